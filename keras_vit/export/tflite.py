"""LiteRT (TFLite) export of an exported SavedModel's tensor signatures.

`quantize="int8"` writes the int8 model to serve on CPUs: int8 weights
(per output channel) and activations quantized at run time by LiteRT's
XNNPACK kernels (dynamic-range quantization), with the float model's
signatures, inputs and outputs.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import tensorflow as tf

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.export.signatures import FEATURES
from keras_vit.export.signatures import SERVING_BYTES
from keras_vit.export.signatures import SERVING_DEFAULT
from keras_vit.export.signatures import SERVING_FLOAT

TENSOR_SIGNATURES = (SERVING_DEFAULT, SERVING_FLOAT, FEATURES)
QUANTIZATIONS = (None, "int8")


@export("keras_vit.export.export_tflite")
def export_tflite(
    saved_model_dir: str | os.PathLike,
    path: str | os.PathLike,
    *,
    signatures: Sequence[str] = TENSOR_SIGNATURES,
    quantize: str | None = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Converts a SavedModel written by `export` to a LiteRT flatbuffer.

    The `.tflite` file keeps the signatures' names, inputs and outputs
    (`images` uint8 -> `logits`, `probabilities`, ...), preprocessing
    included, and runs with the built-in LiteRT ops only. `serving_bytes`
    cannot be converted: image decoding is not a LiteRT op (it would need the
    TensorFlow "Flex" delegate); decode in the app and call
    `serving_default`.

    With `quantize="int8"` the weights of every matrix product and of the
    patch embedding are stored as int8 (one scale per output channel) and
    LiteRT quantizes their inputs per call (dynamic-range quantization, run
    by XNNPACK's int8 kernels, which use VNNI or AMX where the CPU has
    them); everything else (attention products, LayerNorm, softmax, GELU)
    stays float32. No calibration data is needed, the file is about a
    quarter of the float one, and the signatures take and return what the
    float model's do. See `docs/performance.md` for its speed and
    `docs/serving.md` for its accuracy.

    Args:
        saved_model_dir: A directory written by `keras_vit.export.export`.
        path: The `.tflite` file to write.
        signatures: Signatures to convert. Defaults to `serving_default`,
            `serving_float` and `features`.
        quantize: `None` (default): float32, as the SavedModel. `"int8"`:
            int8 weights, activations quantized at run time.
        overwrite: Replace an existing file. Defaults to `False`.

    Returns:
        The path of the written file.

    Example:

    ```python
    export(model, "saved_models/vit/1")
    export_tflite("saved_models/vit/1", "vit.tflite")
    export_tflite("saved_models/vit/1", "vit.int8.tflite", quantize="int8")
    runner = ai_edge_litert.interpreter.Interpreter("vit.tflite")
    logits = runner.get_signature_runner()(images=batch)["logits"]
    ```
    """
    path = os.fspath(path) if paths.is_url(path) else pathlib.Path(path)
    if os.path.splitext(path)[1] != ".tflite":
        raise ValueError(
            f"The LiteRT file name must end in '.tflite'. Received: {path}"
        )
    if quantize not in QUANTIZATIONS:
        raise ValueError(
            f"`quantize` must be one of {QUANTIZATIONS}. Received: {quantize!r}"
        )
    signatures = list(signatures)
    if not signatures:
        raise ValueError(
            "`signatures` is empty: name at least one signature to convert."
        )
    if SERVING_BYTES in signatures:
        raise ValueError(
            f"'{SERVING_BYTES}' decodes images with TensorFlow ops that LiteRT does "
            f"not have; convert {list(TENSOR_SIGNATURES)} and decode in the app."
        )
    if paths.is_url(path):
        atomic.check_url_target(path, overwrite, is_dir=False)
    else:
        atomic.check_target(path, overwrite, is_dir=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(saved_model_dir), signature_keys=signatures
    )
    if quantize == "int8":
        # No representative dataset: dynamic-range quantization (int8
        # weights, activations quantized per call), not full-integer.
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    atomic.write_bytes(path, converter.convert(), overwrite)
    return path
