"""Runs a case on a Keras model: keras_vit's, or keras-hub's ViT built from config.

Both go through the same Keras code path, so only the model differs:
inference is `model.predict_on_batch` (the `tf.function` Keras builds; with
`+xla`, `model.compile(jit_compile=True)` first), a training step is
`model.train_on_batch` after `model.compile(AdamW, sparse cross-entropy)`,
nothing else: the first step is the one a user waits for.
bfloat16 is the `mixed_bfloat16` policy (float32 variables, bfloat16 compute);
the `+bf16-weights` modes build the model under the `bfloat16` policy instead
(bfloat16 variables). The `+jax` modes run the same calls on Keras's JAX
backend (`benchmark.py` sets `KERAS_BACKEND` for the worker), where Keras
compiles every step with XLA. The `litert` mode (int8) is the serving path
of `docs/performance.md`: the model exported (`keras_vit.export.export`),
converted with `export_tflite(quantize="int8")` and run by LiteRT's
interpreter on uint8 images; the export and conversion are timed apart
(`export_s`), the interpreter's first call is the first call.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import importlib  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
from cases import FAMILY_MODELS  # noqa: E402
from flops import parse  # noqa: E402
from timing import peak_rss_mb  # noqa: E402
from timing import time_calls  # noqa: E402

NUM_CLASSES = 1000


def build_keras_vit(case):
    import keras_vit
    from keras_vit import finetune

    if case.variant in FAMILY_MODELS:  # a zoo family's model, its defaults
        from keras_vit.models import zoo

        family, variant, _, _ = FAMILY_MODELS[case.variant]
        return zoo.named(family).build(
            variant, image_size=case.image_size, num_classes=NUM_CLASSES,
            include_top=True,
        )  # fmt: skip
    model = keras_vit.ViT(
        case.variant,
        image_size=case.image_size,
        num_classes=NUM_CLASSES,
        # "+dynamic": any input size at run time, position embeddings
        # resampled in the graph (measured at the model's own size).
        dynamic_image_size="+dynamic" in case.mode,
        remat="+remat" in case.mode,
    )
    for mode in ("int8", "int4"):
        if f"+{mode}" in case.mode:
            finetune.quantize(model, mode)
    if "+lora" in case.mode:
        finetune.enable_lora(model, rank=8, alpha=16)
    return model


def build_keras_hub(case):
    import keras_hub

    size, patch = parse(case.variant)
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(case.image_size, case.image_size, 3),
        patch_size=patch,
        num_layers=size.depth,
        num_heads=size.num_heads,
        hidden_dim=size.hidden_dim,
        mlp_dim=size.mlp_dim,
    )
    return keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=NUM_CLASSES, preprocessor=None
    )


def versions(impl: str) -> str:
    if impl == "keras_hub":
        import keras_hub

        library = f"keras-hub {keras_hub.__version__}"
    else:
        import keras_vit

        switches = keras_vit.layers.speed_switches()
        on = ", ".join(name for name, value in switches.items() if value) or "none"
        library = f"keras_vit {keras_vit.__version__} (speed switches on: {on})"
    backend = keras.backend.backend()
    module = importlib.import_module(backend if backend != "torch" else "torch")
    return f"{library}, Keras {keras.__version__}, {backend} {module.__version__}"


def litert_int8(case) -> tuple[dict, object]:
    """The int8 LiteRT interpreter of a fresh keras_vit model, and its cost.

    Returns `({"export_s": ...}, signature runner)`.
    """
    from keras_vit.export import export
    from keras_vit.export import export_tflite

    model = build_keras_vit(case)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        saved = export(model, f"{folder}/vit/1", warmup=False)
        path = export_tflite(saved, f"{folder}/vit.int8.tflite", quantize="int8")
        seconds = time.perf_counter() - start
        interpreter = _interpreter(str(path))
    return {"export_s": seconds}, interpreter.get_signature_runner("serving_default")


def _interpreter(path: str):
    """LiteRT's interpreter (`ai_edge_litert`, else TensorFlow's copy of it)."""
    threads = len(os.sched_getaffinity(0))
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter  # noqa: N806
    return Interpreter(model_path=path, num_threads=threads)


def run(case) -> dict:
    """Measures one case; returns the timing dict plus memory and versions."""
    runtime_mb = peak_rss_mb()  # the backend and Keras imported, no model yet
    if case.mode == "litert":
        extra, runner = litert_int8(case)
        rng = np.random.default_rng(0)
        shape = (case.batch, case.image_size, case.image_size, 3)
        pixels = rng.integers(0, 256, shape, dtype=np.uint8)
        result = time_calls(
            lambda: runner(images=pixels)["logits"], case.warmup, case.iters
        )
        result.update(extra, runtime_rss_mb=runtime_mb, versions=versions(case.impl))
        return result
    return _run_keras(case, runtime_mb)


def _run_keras(case, runtime_mb) -> dict:
    if case.precision == "bfloat16":
        # "bf16-weights": variables stored in bfloat16 (no per-call casts, half
        # the memory); keras_vit keeps its head in float32 either way.
        policy = "bfloat16" if "bf16-weights" in case.mode else "mixed_bfloat16"
        keras.config.set_dtype_policy(policy)
    build = build_keras_hub if case.impl == "keras_hub" else build_keras_vit
    model = build(case)
    # JAX compiles every step with XLA; TensorFlow only with `+xla`.
    jit = "+xla" in case.mode or keras.backend.backend() == "jax"
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (case.batch, case.image_size, case.image_size, 3))
    images = images.astype("float32")
    if case.task == "train":
        labels = rng.integers(0, NUM_CLASSES, (case.batch,))
        model.compile(
            optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=jit,
        )

        # The user's path: compile, then train_on_batch (the first call
        # traces the step and builds the optimizer).
        def step():
            return model.train_on_batch(images, labels)

    else:
        model.compile(jit_compile=jit)

        def step():
            return model.predict_on_batch(images)

    result = time_calls(step, case.warmup, case.iters)
    result["runtime_rss_mb"] = runtime_mb
    result["versions"] = versions(case.impl)
    return result
