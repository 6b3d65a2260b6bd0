"""ONNX export of an exported SavedModel's tensor signature, via `tf2onnx`.

`tf2onnx` and `onnxruntime` are optional: `pip install tf2onnx onnxruntime`
(or the `onnx` extra of this package).
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
import tensorflow as tf

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.export.signatures import SERVING_DEFAULT

DEFAULT_OPSET = 17


@export("keras_vit.export.export_onnx")
def export_onnx(
    saved_model_dir: str | os.PathLike,
    path: str | os.PathLike,
    *,
    signature: str = SERVING_DEFAULT,
    opset: int = DEFAULT_OPSET,
    overwrite: bool = False,
) -> pathlib.Path:
    """Converts one signature of a SavedModel written by `export` to ONNX.

    The ONNX graph keeps the signature's input and output names (for
    `serving_default`: `images` uint8 `(batch, H, W, 3)` -> `logits`,
    `probabilities`), preprocessing included, with a dynamic batch axis. ONNX
    holds one function per file: convert `features` separately if needed.
    `serving_bytes` cannot be converted (ONNX has no image decoder).

    The exact GELU lowers to TensorFlow's `Erfc`, which `tf2onnx` does not
    convert; it is written here as `1 - Erf(x)`.

    Args:
        saved_model_dir: A directory written by `keras_vit.export.export`.
        path: The `.onnx` file to write.
        signature: `"serving_default"` (default), `"serving_float"` or
            `"features"`.
        opset: ONNX opset. Defaults to 17.
        overwrite: Replace an existing file. Defaults to `False`.

    Returns:
        The path of the written file.

    Raises:
        ImportError: if `tf2onnx` is not installed.

    Example:

    ```python
    export_onnx("saved_models/vit/1", "vit.onnx")
    session = onnxruntime.InferenceSession("vit.onnx")
    logits, probabilities = session.run(None, {"images": batch})
    ```
    """
    try:
        import tf2onnx
    except ImportError as error:
        raise ImportError(
            "ONNX export needs `tf2onnx`: pip install tf2onnx onnxruntime"
        ) from error
    path = os.fspath(path) if paths.is_url(path) else pathlib.Path(path)
    if os.path.splitext(path)[1] != ".onnx":
        raise ValueError(f"The ONNX file name must end in '.onnx'. Received: {path}")
    if paths.is_url(path):
        atomic.check_url_target(path, overwrite, is_dir=False)
    else:
        atomic.check_target(path, overwrite, is_dir=False)
    loaded = tf.saved_model.load(str(saved_model_dir))
    if signature not in loaded.signatures:
        raise ValueError(
            f"{str(saved_model_dir)!r} has no signature {signature!r}; it has "
            f"{sorted(loaded.signatures)}."
        )
    function = loaded.signatures[signature]
    (name, spec), *others = function.structured_input_signature[1].items()
    if others or spec.dtype == tf.string:
        raise ValueError(
            f"Only signatures taking one image tensor convert to ONNX; "
            f"{signature!r} takes {function.structured_input_signature[1]}."
        )
    spec = tf.TensorSpec(spec.shape, spec.dtype, name=name)
    wrapped = tf.function(lambda images: function(**{name: images}))
    model_proto, _ = tf2onnx.convert.from_function(
        wrapped,
        input_signature=[spec],
        opset=opset,
        custom_op_handlers={"Erfc": (_erfc_as_erf, [])},
    )
    atomic.write_bytes(path, model_proto.SerializeToString(), overwrite)
    return path


def _erfc_as_erf(ctx, node, name, args):
    """tf2onnx handler: rewrites `Erfc(x)` as `1 - Erf(x)`."""
    from tf2onnx import utils

    dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
    node.type = "Erf"
    node.domain = ""
    one = ctx.make_const(utils.make_name("one"), np.array(1, dtype=dtype))
    ctx.insert_new_node_on_output(
        "Sub", node.output[0], inputs=[one.output[0], node.output[0]]
    )
