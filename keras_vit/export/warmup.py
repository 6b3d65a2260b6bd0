"""TF Serving's warm-up file: one recorded request per signature.

When TF Serving loads a version it replays the requests stored in
`<version>/assets.extra/tf_serving_warmup_requests` before it reports the
version ready, so that graph optimisation and memory allocation for each
signature happen then, not during the first client's request. The file is a
TFRecord file of `tensorflow.serving.PredictionLog` protos, each holding one
`PredictRequest`.

The records are written here in the protobuf wire format from the public
field numbers of `tensorflow_serving/apis/{prediction_log,predict,model}.proto`
(only the few fields a request needs), with TensorFlow's own `TensorProto`
for the inputs: exporting does not need the `tensorflow-serving-api` package.
The tests read the file back with that package's protos.
"""

from __future__ import annotations

import pathlib

import numpy as np
import tensorflow as tf

from keras_vit._export import export
from keras_vit.export.signatures import ServingGraph

WARMUP_FILE = "assets.extra/tf_serving_warmup_requests"
export("keras_vit.export.WARMUP_FILE").constant(__name__, "WARMUP_FILE")

# Field numbers in tensorflow_serving/apis/*.proto.
_PREDICTION_LOG_PREDICT_LOG = 6
_PREDICT_LOG_REQUEST = 1
_REQUEST_MODEL_SPEC = 1
_REQUEST_INPUTS = 2  # map<string, TensorProto>: entries {key = 1, value = 2}
_MODEL_SPEC_NAME = 1
_MODEL_SPEC_SIGNATURE_NAME = 3


def example_inputs(graph: ServingGraph) -> dict[str, dict[str, np.ndarray]]:
    """Returns one small input batch per signature: `{signature: {key: array}}`.

    A batch of one deterministic image (a colour gradient) at the export
    size; `serving_bytes` gets it as a PNG.
    """
    height, width = graph.image_size
    rows, cols = np.meshgrid(
        np.linspace(0, 255, height), np.linspace(0, 255, width), indexing="ij"
    )  # (H, W) each
    image = np.stack([rows, cols, np.full_like(rows, 128)], axis=-1)
    image = image.round().astype(np.uint8)  # (H, W, 3)
    inputs = {}
    for name, (spec,) in graph.input_signatures().items():
        if spec.dtype == tf.string:
            value = np.array([tf.io.encode_png(image).numpy()], dtype=object)  # (1,)
        else:
            value = image[None].astype(spec.dtype.as_numpy_dtype)  # (1, H, W, 3)
        inputs[name] = {spec.name: value}
    return inputs


def warmup_records(graph: ServingGraph, model_name: str = "") -> list[bytes]:
    """Returns the serialized `PredictionLog` records, one per signature.

    Args:
        graph: The exported computation.
        model_name: Written as each request's `model_spec.name` (TF Serving
            does not check it during warm-up). Defaults to none.
    """
    records = []
    for signature, inputs in example_inputs(graph).items():
        spec = _field(_MODEL_SPEC_SIGNATURE_NAME, signature.encode())
        if model_name:
            spec = _field(_MODEL_SPEC_NAME, model_name.encode()) + spec
        request = _field(_REQUEST_MODEL_SPEC, spec)
        for key, value in inputs.items():
            tensor = tf.make_tensor_proto(value).SerializeToString()
            entry = _field(1, key.encode()) + _field(2, tensor)
            request += _field(_REQUEST_INPUTS, entry)
        log = _field(_PREDICT_LOG_REQUEST, request)
        records.append(_field(_PREDICTION_LOG_PREDICT_LOG, log))
    return records


def write_warmup_file(
    graph: ServingGraph, directory: pathlib.Path, model_name: str = ""
) -> pathlib.Path:
    """Writes `assets.extra/tf_serving_warmup_requests` under `directory`.

    `directory` is a SavedModel being staged by `export`, which makes the
    whole version appear at once; the file is not written atomically on its
    own.

    Example:

    ```python
    write_warmup_file(ServingGraph(model), staging, model_name="vit_b16")
    ```
    """
    target = directory / WARMUP_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(target)) as writer:
        for record in warmup_records(graph, model_name):
            writer.write(record)
    return target


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2): strings, messages."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)
