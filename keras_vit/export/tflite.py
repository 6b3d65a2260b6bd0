"""LiteRT (TFLite) export of an exported SavedModel's tensor signatures."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Sequence

import tensorflow as tf

from keras_vit import atomic
from keras_vit.export.signatures import FEATURES
from keras_vit.export.signatures import SERVING_BYTES
from keras_vit.export.signatures import SERVING_DEFAULT
from keras_vit.export.signatures import SERVING_FLOAT

TENSOR_SIGNATURES = (SERVING_DEFAULT, SERVING_FLOAT, FEATURES)


def export_tflite(
    saved_model_dir: str | os.PathLike,
    path: str | os.PathLike,
    *,
    signatures: Sequence[str] = TENSOR_SIGNATURES,
    overwrite: bool = False,
) -> pathlib.Path:
    """Converts a SavedModel written by `export` to a LiteRT flatbuffer.

    The `.tflite` file keeps the signatures' names, inputs and outputs
    (`images` uint8 -> `logits`, `probabilities`, ...), preprocessing
    included, and runs with the built-in LiteRT ops only. `serving_bytes`
    cannot be converted: image decoding is not a LiteRT op (it would need the
    TensorFlow "Flex" delegate); decode in the app and call
    `serving_default`.

    Args:
        saved_model_dir: A directory written by `keras_vit.export.export`.
        path: The `.tflite` file to write.
        signatures: Signatures to convert. Defaults to `serving_default`,
            `serving_float` and `features`.
        overwrite: Replace an existing file. Defaults to `False`.

    Returns:
        The path of the written file.

    Example:

    ```python
    export(model, "saved_models/vit/1")
    export_tflite("saved_models/vit/1", "vit.tflite")
    runner = ai_edge_litert.interpreter.Interpreter("vit.tflite")
    logits = runner.get_signature_runner()(images=batch)["logits"]
    ```
    """
    path = pathlib.Path(path)
    if path.suffix != ".tflite":
        raise ValueError(
            f"The LiteRT file name must end in '.tflite'. Received: {path}"
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
    atomic.check_target(path, overwrite, is_dir=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(saved_model_dir), signature_keys=signatures
    )
    atomic.write_bytes(path, converter.convert(), overwrite)
    return path
