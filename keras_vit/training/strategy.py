"""Choosing a `tf.distribute` strategy, and which worker is the chief.

`select_strategy("auto")` picks, in order:

1. `TPUStrategy` when a TPU is attached (`/dev/accel*` on a Cloud TPU VM,
   or `TPU_NAME`, `TPU_ACCELERATOR_TYPE`, Colab's `COLAB_TPU_ADDR`);
2. `MultiWorkerMirroredStrategy` when `TF_CONFIG` names more than one
   worker;
3. `MirroredStrategy` when there are several GPUs;
4. the default strategy (one device) otherwise.

Create the strategy first thing in a program: TPU and multi-worker
strategies must be set up before TensorFlow initialises its devices.
"""

from __future__ import annotations

import glob
import json
import logging
import os

import tensorflow as tf

from keras_vit._export import export

logger = logging.getLogger(__name__)

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")
export("keras_vit.training.STRATEGIES").constant(__name__, "STRATEGIES")


@export("keras_vit.training.select_strategy")
def select_strategy(
    kind: str = "auto", tpu: str | None = None
) -> tf.distribute.Strategy:
    """Returns the `tf.distribute.Strategy` for this machine or cluster.

    Args:
        kind: `"auto"` (see the module docstring), or one of `"default"`,
            `"one_device"` (the first GPU, else the CPU), `"mirrored"` (all
            local GPUs; with no GPU, all logical CPU devices), `"multi_worker"`
            (needs `TF_CONFIG`) and `"tpu"`, to force one.
        tpu: TPU name or address for `TPUClusterResolver`; defaults to the
            local TPU or `$TPU_NAME`.

    Returns:
        A strategy; build and compile the model inside `strategy.scope()`.

    Example:

    ```python
    strategy = select_strategy()        # or select_strategy("mirrored")
    with strategy.scope():
        model = keras_vit.ViT("B/16", num_classes=10)
        model.compile(...)
    ```
    """
    if kind not in STRATEGIES:
        raise ValueError(f"Unknown strategy {kind!r}. Known: {STRATEGIES}.")
    if kind == "auto":
        kind = _auto_kind(tpu)
    if kind == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif kind == "multi_worker":
        if not os.environ.get("TF_CONFIG"):
            raise ValueError(
                "strategy='multi_worker' needs the TF_CONFIG environment "
                "variable describing the cluster and this worker's task."
            )
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        cpus = tf.config.list_logical_devices("CPU")
        devices = [d.name for d in gpus] or [d.name for d in cpus]
        strategy = tf.distribute.MirroredStrategy(devices=devices)
    elif kind == "one_device":
        gpus = tf.config.list_logical_devices("GPU")
        strategy = tf.distribute.OneDeviceStrategy(gpus[0].name if gpus else "/cpu:0")
    else:
        strategy = tf.distribute.get_strategy()
    logger.info("Strategy: %s", describe(strategy))
    return strategy


@export("keras_vit.training.describe")
def describe(strategy: tf.distribute.Strategy) -> str:
    """A one-line description, e.g. `"MirroredStrategy, 2 replicas"`."""
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        name = "MultiWorkerMirroredStrategy"  # Its class is an alias.
    elif not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        name = "default strategy"
    else:
        name = type(strategy).__name__
    return f"{name}, {strategy.num_replicas_in_sync} replica(s)"


@export("keras_vit.training.num_workers")
def num_workers(tf_config: str | None = None) -> int:
    """Workers (chief included) named by `TF_CONFIG`; 1 when it is unset.

    Args:
        tf_config: The JSON text; defaults to `$TF_CONFIG`.
    """
    text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
    if not text:
        return 1
    cluster = json.loads(text).get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


@export("keras_vit.training.is_chief")
def is_chief(strategy: tf.distribute.Strategy | None = None) -> bool:
    """Whether this process writes logs, checkpoints and exports.

    The chief is the `"chief"` task of `TF_CONFIG`, or worker 0 when the
    cluster has no chief; a single process is always the chief.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None and not isinstance(
        resolver, tf.distribute.cluster_resolver.TPUClusterResolver
    ):
        task_type, task_id = resolver.task_type, resolver.task_id
        cluster = resolver.cluster_spec().as_dict()
    else:
        text = os.environ.get("TF_CONFIG", "")
        if not text:
            return True
        config = json.loads(text)
        task = config.get("task", {})
        task_type, task_id = task.get("type"), task.get("index", 0)
        cluster = config.get("cluster", {})
    if task_type is None or task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


@export("keras_vit.training.task_name")
def task_name(strategy: tf.distribute.Strategy | None = None) -> str:
    """`"chief"` for the chief, else e.g. `"worker_1"` (for per-task paths)."""
    if is_chief(strategy):
        return "chief"
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None:
        return f"{resolver.task_type}_{resolver.task_id}"
    task = json.loads(os.environ["TF_CONFIG"]).get("task", {})
    return f"{task.get('type', 'worker')}_{task.get('index', 0)}"


def _auto_kind(tpu: str | None) -> str:
    if _tpu_present(tpu):
        return "tpu"
    if num_workers() > 1:
        return "multi_worker"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def _tpu_present(tpu: str | None) -> bool:
    # Cheap checks only: probing for a TPU over the network can hang.
    variables = ("TPU_NAME", "COLAB_TPU_ADDR", "TPU_ACCELERATOR_TYPE")
    if tpu or any(os.environ.get(name) for name in variables):
        return True
    return bool(glob.glob("/dev/accel[0-9]*"))
