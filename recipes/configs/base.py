"""`TrainConfig`: every setting of `recipes.train`, with documented defaults.

A config module (`recipes/configs/<name>.py`) defines `get_config()`
returning a `TrainConfig`; its docstring gives the command, the hardware,
the expected accuracy and the time. The command line changes any field with
`--set key=value`: the value is a Python literal (`ast.literal_eval`), or a
bare word for text fields (`--set dataset=cifar100`), checked against the
field's type.

The defaults are the paper's pre-training recipe (Adam β = (0.9, 0.999),
weight decay 0.1, linear warm-up then cosine decay, gradient clipping at
global norm 1).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import os
import types
import typing


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Settings of one training or fine-tuning run.

    Attributes are grouped as run, data, augmentation, model, optimisation,
    distribution and monitoring; each is documented where it is defined.
    """

    # -- run ---------------------------------------------------------------
    name: str = "run"  # Run name; the default workdir is runs/<name>.
    workdir: str | None = None  # Run directory (logs, checkpoints, results).
    seed: int = 0  # Seeds the model initialisation, the data order and augmentation.

    # -- data --------------------------------------------------------------
    dataset: str = "digits"  # "digits", "folder:PATH" or a TFDS name.
    data_dir: str | None = None  # TFDS data directory.
    train_split: str = "train"
    val_split: str | None = "test"  # Monitored each epoch; None for no validation.
    test_split: str | None = "test"  # Evaluated once at the end; None to skip.
    image_size: int = 224  # Training and evaluation resolution.
    channels: int = 3
    global_batch_size: int = 512  # Summed over replicas and workers.
    eval_batch_size: int | None = None  # Defaults to global_batch_size.
    eval_crop_fraction: float = 1.0  # Central crop at evaluation (1 = none).
    shuffle_buffer: int = 10_000

    # -- augmentation ------------------------------------------------------
    crop_area_range: tuple[float, float] = (0.05, 1.0)  # Inception crop; (1, 1) = off.
    crop_aspect_range: tuple[float, float] = (0.75, 4 / 3)
    random_flip: bool = True
    randaugment_ops: int = 0  # keras_vit.data.RandAugment ops per image; 0 = off.
    randaugment_magnitude: float = 0.5  # In [0, 1]: the reference's level / 10.
    mixup_alpha: float = 0.0  # 0 = off.
    cutmix_factor: float = 0.0  # keras.layers.CutMix factor in (0, 1]; 0 = off.
    label_smoothing: float = 0.0

    # -- model -------------------------------------------------------------
    variant: str = "B/16"  # See keras_vit.VARIANTS; e.g. "Ti/16", "R50+B/16".
    pooling: str = "token"  # "token" or "gap".
    class_token: bool = True
    representation_size: int | None = None  # Pre-training tanh "pre-logits" width.
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    # Initial weights: a keras_vit.weights tag ("imagenet21k", ...) or an
    # original .npz (head replaced, position embeddings resampled), or our own
    # .keras / .weights.h5 (matched by layer name, head skipped). None = random.
    init_from: str | None = None

    # -- optimisation ------------------------------------------------------
    optimizer: str = "adamw"  # "adamw", "adam" or "sgd".
    learning_rate: float = 1e-3  # Peak, reached at the end of the warm-up.
    end_learning_rate: float = 0.0
    schedule: str = "cosine"  # "cosine", "linear" or "constant" after warm-up.
    warmup_steps: int = 10_000
    weight_decay: float = 0.1  # Decoupled; biases, norms, tokens excluded.
    beta_1: float = 0.9
    beta_2: float = 0.999
    momentum: float = 0.9  # SGD only.
    global_clipnorm: float | None = 1.0
    ema_momentum: float | None = None  # Polyak averaging, e.g. 0.9999.
    epochs: int = 300
    steps_per_epoch: int | None = None  # Defaults to examples // batch.

    # -- distribution and speed --------------------------------------------
    strategy: str = "auto"  # auto, default, one_device, mirrored, multi_worker, tpu.
    mixed_precision: bool | str = False  # True: bfloat16 on TPU/CPU, float16 on GPU.
    jit_compile: bool | str = "auto"  # "auto": XLA on GPU/TPU, off on CPU.
    steps_per_execution: int = 1

    # -- monitoring --------------------------------------------------------
    verbose: int = 1  # 1: progress bar, 2: one line per epoch, 0: silent.
    tensorboard_update_freq: str | int = "epoch"  # Or a step count.
    profile_steps: tuple[int, int] | None = None  # E.g. (10, 15) to profile.
    monitor_images: int = 4  # Example and attention-map images; 0 = none.
    fewshot_every: int = 0  # Few-shot linear eval every N epochs; 0 = off.
    fewshot_shots: tuple[int, ...] = (1, 5, 10, 25)
    fewshot_examples: int = 2_000  # Train/test images held for the few-shot eval.
    export_savedmodel: bool = False  # Also export a SavedModel for TF Serving.

    def resolved_workdir(self) -> str:
        """`workdir`, or `runs/<name>` when it is unset."""
        return self.workdir or os.path.join("runs", self.name)


def override(config: TrainConfig, assignments: list[str]) -> TrainConfig:
    """Applies `key=value` overrides to `config`, checking every type.

    Args:
        config: The config to change.
        assignments: Strings `"key=value"`; the value is a Python literal,
            or a bare word for `str` fields.

    Returns:
        A new `TrainConfig`.

    Example:

    >>> override(TrainConfig(), ["epochs=3", "dataset=cifar10"]).epochs
    3
    """
    hints = typing.get_type_hints(TrainConfig)
    changes = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"Overrides look like key=value. Received: {assignment!r}")
        if key not in hints:
            known = ", ".join(sorted(hints))
            raise ValueError(f"Unknown config key {key!r}. Known keys: {known}.")
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()  # A bare word, e.g. dataset=cifar10.
        changes[key] = check_type(key, value, hints[key])
    return dataclasses.replace(config, **changes)


def check_type(key: str, value, hint):
    """Returns `value` converted to the field type `hint`, or raises.

    Accepts ints for float fields, lists for tuple fields and `None` for
    optional fields.
    """
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return check_type(key, value, option)
            except ValueError:
                continue
        raise ValueError(f"{key}={value!r} does not fit {_name(hint)}.")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        args = typing.get_args(hint)
        if isinstance(value, (tuple, list)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(check_type(key, v, args[0]) for v in value)
            if len(value) == len(args):
                return tuple(
                    check_type(key, v, a) for v, a in zip(value, args, strict=True)
                )
    else:
        raise TypeError(f"Unsupported config type {hint!r} for {key!r}.")
    raise ValueError(f"{key}={value!r} does not fit {_name(hint)}.")


def load_config(name_or_path: str) -> TrainConfig:
    """Returns `get_config()` of `recipes/configs/<name>.py` or of a file path.

    Args:
        name_or_path: A shipped config name (e.g. `"digits"`) or the path to
            a Python file defining `get_config()`.
    """
    if name_or_path.endswith(".py"):
        spec = importlib.util.spec_from_file_location("recipe_config", name_or_path)
        if spec is None or not os.path.exists(name_or_path):
            raise ValueError(f"Config file {name_or_path!r} does not exist.")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(f"recipes.configs.{name_or_path}")
        except ModuleNotFoundError as error:
            raise ValueError(
                f"Unknown config {name_or_path!r}. Shipped configs: "
                f"{', '.join(shipped_configs())}; or pass a .py file."
            ) from error
    config = module.get_config()
    if not isinstance(config, TrainConfig):
        raise ValueError(f"get_config() of {name_or_path!r} must return a TrainConfig.")
    return config


def shipped_configs() -> list[str]:
    """Names of the configs in `recipes/configs/`."""
    folder = os.path.dirname(__file__)
    return sorted(
        name[:-3]
        for name in os.listdir(folder)
        if name.endswith(".py") and name not in ("__init__.py", "base.py")
    )


def _name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
