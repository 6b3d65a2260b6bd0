"""Export and serving: SavedModel signatures, resolution, atomic writes.

One SavedModel of a tiny random ViT is exported per module and checked in a
fresh Python process that never imports keras_vit; expected values are
computed here from the Keras model with plain TF/NumPy preprocessing, not
with `keras_vit.data.transforms`.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import installed_script
from PIL import Image

import keras_vit
from keras_vit.data import transforms
from keras_vit.export import export
from keras_vit.export import export_onnx
from keras_vit.export import export_tflite
from keras_vit.export import savedmodel
from keras_vit.export.signatures import ServingGraph

IMAGE_SIZE = (16, 24)  # Non-square: a (2, 3) patch grid at patch 8.
NUM_CLASSES = 7
TOP_K = 3
CLASS_NAMES = ["cat", "dog", "owl", "fox", "elk", "yak", "emu"]
ATOL = 1e-5

# The documented signatures: name -> inputs, outputs as {key: (dtype, shape)}.
H, W = IMAGE_SIZE
CLASSIFY = {"logits": ("DT_FLOAT", "(-1, 7)"), "probabilities": ("DT_FLOAT", "(-1, 7)")}
SIGNATURES = {
    "serving_default": ({"images": ("DT_UINT8", f"(-1, {H}, {W}, 3)")}, CLASSIFY),
    "serving_float": ({"images": ("DT_FLOAT", f"(-1, {H}, {W}, 3)")}, CLASSIFY),
    "serving_bytes": (
        {"image_bytes": ("DT_STRING", "(-1)")},
        {
            "probabilities": ("DT_FLOAT", "(-1, 7)"),
            "top_k_classes": ("DT_INT32", "(-1, 3)"),
            "top_k_scores": ("DT_FLOAT", "(-1, 3)"),
            "top_k_names": ("DT_STRING", "(-1, 3)"),
        },
    ),
    "features": (
        {"images": ("DT_UINT8", f"(-1, {H}, {W}, 3)")},
        {"pooled": ("DT_FLOAT", "(-1, 32)")},
    ),
}


def randomize(model: keras.Model, seed: int = 0) -> keras.Model:
    """Random weights everywhere (the zero-initialised head would hide bugs)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def normalize(pixels) -> np.ndarray:
    return (np.asarray(pixels, np.float32) - 127.5) / 127.5


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def pooled_model(model: keras.Model) -> keras.Model:
    return keras.Model(model.input, model.get_layer("pool").output)


# Encoded test images: every format the bytes signature accepts. ------------


def _pil_bytes(array: np.ndarray, fmt: str, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array, mode).save(buffer, format=fmt)
    return buffer.getvalue()


def encoded_images() -> list[tuple[str, bytes, np.ndarray]]:
    """(kind, bytes, decoded uint8 RGB) for JPEG, PNG (RGB/gray/RGBA), GIF, BMP."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (37, 29, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (12, 40), dtype=np.uint8)
    rgba = rng.integers(0, 256, (20, 20, 4), dtype=np.uint8)
    items = []
    jpeg = tf.io.encode_jpeg(rgb, quality=90).numpy()
    items.append(
        (
            "jpeg",
            jpeg,
            tf.io.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE").numpy(),
        )
    )
    items.append(("png", _pil_bytes(rgb, "PNG"), rgb))
    items.append(
        ("gray png", _pil_bytes(gray, "PNG"), np.repeat(gray[..., None], 3, -1))
    )
    items.append(("rgba png", _pil_bytes(rgba, "PNG"), rgba[..., :3]))
    for fmt in ("GIF", "BMP"):
        data = _pil_bytes(rgb, fmt)
        decoded = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        items.append((fmt.lower(), data, decoded))
    return items


def expected_bytes_outputs(model: keras.Model, decoded: list[np.ndarray]) -> dict:
    """The bytes signature computed by hand: bilinear resize, normalise, softmax."""
    resized = np.stack(
        [tf.image.resize(image, IMAGE_SIZE).numpy() for image in decoded]
    )
    probabilities = softmax(model(normalize(resized)).numpy().astype(np.float64))
    classes = np.argsort(-probabilities, axis=-1)[:, :TOP_K]
    return {
        "probabilities": probabilities,
        "top_k_classes": classes,
        "top_k_scores": np.take_along_axis(probabilities, classes, -1),
        "top_k_names": [[CLASS_NAMES[c] for c in row] for row in classes],
    }


# The fresh-process check. ----------------------------------------------------

CHECK_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys
    import numpy as np
    import tensorflow as tf

    model_dir, work = sys.argv[1], pathlib.Path(sys.argv[2])
    inputs = np.load(work / "inputs.npz")
    encoded = [p.read_bytes() for p in sorted(work.glob("image_*.bin"))]
    loaded = tf.saved_model.load(model_dir)
    signatures = loaded.signatures
    out, report = {}, {"signatures": sorted(signatures)}

    def run(name, **kwargs):
        result = signatures[name](**{k: tf.constant(v) for k, v in kwargs.items()})
        return {key: value.numpy() for key, value in result.items()}

    for key, value in run("serving_default", images=inputs["uint8"]).items():
        out["serving_default/" + key] = value
    for key, value in run("serving_float", images=inputs["float"]).items():
        out["serving_float/" + key] = value
    out["features/pooled"] = run("features", images=inputs["uint8"])["pooled"]
    first = run("serving_bytes", image_bytes=np.array(encoded, dtype=object))

    # Bytes that are not an image, then a batch with one broken JPEG: each
    # call fails alone and the process keeps serving.
    errors = []
    for batch in ([b"this is not an image"], [encoded[0], encoded[0][:100]]):
        try:
            run("serving_bytes", image_bytes=np.array(batch, dtype=object))
            errors.append(None)
        except tf.errors.InvalidArgumentError as error:
            errors.append(error.message)
    after = run("serving_bytes", image_bytes=np.array(encoded, dtype=object))

    for key in ("probabilities", "top_k_classes", "top_k_scores"):
        out["serving_bytes/" + key] = first[key]
        out["after_error/" + key] = after[key]
    report["top_k_names"] = [[n.decode() for n in row] for row in first["top_k_names"]]
    report["errors"] = errors
    imported = {name.split(".")[0] for name in sys.modules}
    report["keras_vit_imported"] = "keras_vit" in imported
    np.savez(work / "outputs.npz", **out)
    (work / "report.json").write_text(json.dumps(report))
    """
)


def run_quietly(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(command, capture_output=True, text=True, env=env, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def model():
    keras.config.set_dtype_policy("float32")  # Created before per-test fixtures.
    return randomize(
        keras_vit.ViT("test/8", num_classes=NUM_CLASSES, image_size=IMAGE_SIZE)
    )


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "vit_test" / "1"
    returned = export(model, path, class_names=CLASS_NAMES, top_k=TOP_K)
    assert returned == path
    return path


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_fresh_process_matches_keras_for_every_signature(model, exported, tmp_path):
    rng = np.random.default_rng(0)
    uint8 = rng.integers(0, 256, (3, *IMAGE_SIZE, 3), dtype=np.uint8)
    floats = rng.uniform(0, 255, (2, *IMAGE_SIZE, 3)).astype(np.float32)
    np.savez(tmp_path / "inputs.npz", uint8=uint8, float=floats)
    images = encoded_images()
    for i, (_, data, _) in enumerate(images):
        (tmp_path / f"image_{i}.bin").write_bytes(data)
    (tmp_path / "check.py").write_text(CHECK_SCRIPT)

    run_quietly(
        [sys.executable, str(tmp_path / "check.py"), str(exported), str(tmp_path)],
        cwd=tmp_path,
    )
    out = np.load(tmp_path / "outputs.npz")
    report = json.loads((tmp_path / "report.json").read_text())

    assert report["signatures"] == sorted(SIGNATURES)
    assert report["keras_vit_imported"] is False
    logits = model(normalize(uint8)).numpy()
    np.testing.assert_allclose(out["serving_default/logits"], logits, atol=ATOL)
    np.testing.assert_allclose(
        out["serving_default/probabilities"], softmax(logits), atol=ATOL
    )
    float_logits = model(normalize(floats)).numpy()
    np.testing.assert_allclose(out["serving_float/logits"], float_logits, atol=ATOL)
    np.testing.assert_allclose(
        out["serving_float/probabilities"], softmax(float_logits), atol=ATOL
    )
    pooled = pooled_model(model)(normalize(uint8)).numpy()
    np.testing.assert_allclose(out["features/pooled"], pooled, atol=ATOL)

    expected = expected_bytes_outputs(model, [decoded for _, _, decoded in images])
    for prefix in ("serving_bytes/", "after_error/"):
        np.testing.assert_allclose(
            out[prefix + "probabilities"], expected["probabilities"], atol=ATOL
        )
        np.testing.assert_allclose(
            out[prefix + "top_k_scores"], expected["top_k_scores"], atol=ATOL
        )
        np.testing.assert_array_equal(
            out[prefix + "top_k_classes"], expected["top_k_classes"]
        )
    assert out["serving_bytes/top_k_classes"].dtype == np.int32
    assert report["top_k_names"] == expected["top_k_names"]
    not_an_image, broken_jpeg = report["errors"]
    assert "Unknown image file format" in not_an_image
    assert "Invalid JPEG data" in broken_jpeg


# `inputs['images'] tensor_info:` then `dtype: DT_UINT8` and `shape: (-1, 16, 3)`.
TENSOR_INFO = (
    r"(inputs|outputs)\['(\w+)'\] tensor_info:\s+dtype: (\w+)\s+shape: ([^\n]+)"
)


def test_saved_model_cli_lists_documented_signatures(exported):
    cli = installed_script("saved_model_cli", "tensorflow")
    text = run_quietly([cli, "show", "--all", "--dir", str(exported)]).stdout
    found = {}
    for block in re.split(r"\nsignature_def\['", text)[1:]:
        name = block.split("'", 1)[0]
        tensors = re.findall(TENSOR_INFO, block)
        inputs = {
            key: (dtype, shape)
            for kind, key, dtype, shape in tensors
            if kind == "inputs"
        }
        outputs = {
            key: (dtype, shape)
            for kind, key, dtype, shape in tensors
            if kind == "outputs"
        }
        found[name] = (inputs, outputs)
    found.pop("__saved_model_init_op", None)
    assert found == SIGNATURES


def test_export_stores_metadata_and_each_weight_once(model, exported):
    checkpoint = tf.train.load_checkpoint(str(exported / "variables" / "variables"))
    shapes = checkpoint.get_variable_to_shape_map().values()
    assert sum(int(np.prod(shape)) for shape in shapes if shape) == model.count_params()
    info = json.loads((exported / savedmodel.METADATA_FILE).read_text())
    assert info["image_size"] == list(IMAGE_SIZE)
    assert info["num_classes"] == NUM_CLASSES
    assert info["class_names"] == CLASS_NAMES
    assert info["top_k"] == TOP_K
    assert info["signatures"] == sorted(SIGNATURES)
    assert info["warmup_file"] == "assets.extra/tf_serving_warmup_requests"


# Exporting at another resolution. --------------------------------------------


def built_at(model: keras.Model, image_size, patch: int) -> keras.Model:
    """A model built at `image_size` from `model`'s weights, posemb resampled.

    Independent of `keras_vit.with_image_size`: a new `ViT(...)` and a plain
    weight copy with `keras_vit.resample_position_embedding`.
    """
    target = keras_vit.ViT("test/16", num_classes=NUM_CLASSES, image_size=image_size)
    old_grid = tuple(s // patch for s in model.input_shape[1:3])
    new_grid = tuple(s // patch for s in image_size)
    for layer in model.layers:
        weights = layer.get_weights()
        if layer.name == "posembed_input":
            weights = [
                keras_vit.resample_position_embedding(
                    weights[0], new_grid, old_grid_size=old_grid
                )
            ]
        if weights:
            target.get_layer(layer.name).set_weights(weights)
    return target


@pytest.mark.parametrize("image_size", [(384, 384), (256, 384)])
def test_reexport_at_new_resolution_matches_model_built_there(tmp_path, image_size):
    model_224 = randomize(
        keras_vit.ViT("test/16", num_classes=NUM_CLASSES, image_size=224), seed=3
    )
    path = export(model_224, tmp_path / "vit" / "1", image_size=image_size)
    loaded = tf.saved_model.load(str(path))
    serve = loaded.signatures["serving_default"]
    assert tuple(serve.structured_input_signature[1]["images"].shape) == (
        None,
        *image_size,
        3,
    )

    images = np.random.default_rng(0).integers(
        0, 256, (2, *image_size, 3), dtype=np.uint8
    )
    reference = built_at(model_224, image_size, patch=16)
    expected = reference(normalize(images)).numpy()
    np.testing.assert_allclose(
        serve(images=tf.constant(images))["logits"], expected, atol=ATOL
    )
    # The 224 model itself is untouched by the re-export.
    assert model_224.input_shape[1:3] == (224, 224)


# Atomic, versioned writes. ----------------------------------------------------


def _snapshot(path: pathlib.Path) -> dict:
    return {
        p.relative_to(path): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def test_existing_version_is_refused_and_survives_a_failed_overwrite(
    model, tmp_path, monkeypatch
):
    path = tmp_path / "vit" / "1"
    export(model, path, top_k=2)
    before = _snapshot(path)

    with pytest.raises(FileExistsError, match="already exists"):
        export(model, path, top_k=4)
    assert _snapshot(path) == before

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(savedmodel, "_write_metadata", fail)
    with pytest.raises(OSError, match="disk full"):
        export(model, path, top_k=4, overwrite=True)
    assert _snapshot(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["1"]  # No leftovers.
    monkeypatch.undo()

    export(model, path, top_k=4, overwrite=True)
    info = json.loads((path / savedmodel.METADATA_FILE).read_text())
    assert info["top_k"] == 4
    assert sorted(p.name for p in path.parent.iterdir()) == ["1"]


def test_bad_arguments_fail_before_writing(model, tmp_path):
    path = tmp_path / "vit" / "1"
    with pytest.raises(ValueError, match="3 class names for a model with 7"):
        export(model, path, class_names=["a", "b", "c"])
    with pytest.raises(ValueError, match="top_k"):
        export(model, path, top_k=0)
    with pytest.raises(ValueError, match="crop_fraction"):
        export(model, path, crop_fraction=1.5)
    with pytest.raises(ValueError, match="not a multiple"):
        export(model, path, image_size=(20, 24))
    gray = keras_vit.ViT("test/8", num_classes=2, image_size=16, channels=1)
    with pytest.raises(ValueError, match="1 channels"):
        export(gray, path)
    tokens = keras_vit.ViT("test/8", image_size=16, include_top=False, pooling=None)
    with pytest.raises(ValueError, match="pooling='token' or 'gap'"):
        export(tokens, path)
    assert not path.parent.exists() or not any(path.parent.iterdir())


# Other heads, preprocessing inside the model (no SavedModel round trip). -----


def test_softmax_head_and_builtin_preprocessing_serve_logits(tmp_path):
    model = randomize(
        keras_vit.ViT(
            "test/8",
            num_classes=4,
            image_size=16,
            include_preprocessing=True,
            classifier_activation="softmax",
        )
    )
    graph = ServingGraph(model, top_k=10)
    images = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    out = graph.serving_default(tf.constant(images))
    # The model maps [0, 255] itself: no second normalisation in the graph.
    np.testing.assert_allclose(
        out["probabilities"], model(images.astype("float32")), atol=ATOL
    )
    np.testing.assert_allclose(
        softmax(out["logits"].numpy()), out["probabilities"], atol=ATOL
    )
    assert graph.top_k == 4  # Clipped to the number of classes.


def test_mixed_precision_model_serves_float32():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = randomize(keras_vit.ViT("test/8", num_classes=4, image_size=16))
    graph = ServingGraph(model)
    images = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    out = graph.serving_default(tf.constant(images))
    assert out["logits"].dtype == tf.float32
    assert graph.features(tf.constant(images))["pooled"].dtype == tf.float32
    # bfloat16 rounds differently in graph and eager modes (op fusion): the
    # model's own `predict` differs from its eager call by ~1e-2 here too.
    expected = model.predict(normalize(images), verbose=0)
    np.testing.assert_allclose(out["logits"], expected, atol=3e-2)


def test_headless_model_serves_its_representation():
    model = randomize(
        keras_vit.ViT(
            "test/8", image_size=16, include_top=False, pooling="gap", class_token=False
        )
    )
    graph = ServingGraph(model)
    images = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3), dtype=np.uint8)
    expected = model(normalize(images)).numpy()
    for name in ("serving_default", "features"):
        out = graph.functions()[name](tf.constant(images))
        assert list(out) == ["pooled"]
        np.testing.assert_allclose(out["pooled"], expected, atol=ATOL)
    encoded = tf.constant([tf.io.encode_png(images[0]).numpy()])
    np.testing.assert_allclose(
        graph.serving_bytes(encoded)["pooled"], expected[:1], atol=ATOL
    )
    with pytest.raises(ValueError, match="classification head"):
        ServingGraph(model, class_names=["a"])


# LiteRT and ONNX. ---------------------------------------------------------------


def test_tflite_matches_keras(model, exported, tmp_path):
    path = export_tflite(exported, tmp_path / "vit.tflite")
    with pytest.raises(FileExistsError):
        export_tflite(exported, path)
    with pytest.raises(ValueError, match="LiteRT does not have"):
        export_tflite(exported, tmp_path / "bytes.tflite", signatures=["serving_bytes"])
    interpreter = tf.lite.Interpreter(model_path=str(path))
    assert sorted(interpreter.get_signature_list()) == [
        "features",
        "serving_default",
        "serving_float",
    ]
    images = np.random.default_rng(5).integers(
        0, 256, (2, *IMAGE_SIZE, 3), dtype=np.uint8
    )
    out = interpreter.get_signature_runner("serving_default")(images=images)
    logits = model(normalize(images)).numpy()
    np.testing.assert_allclose(out["logits"], logits, atol=ATOL)
    np.testing.assert_allclose(out["probabilities"], softmax(logits), atol=ATOL)
    pooled = interpreter.get_signature_runner("features")(images=images)["pooled"]
    np.testing.assert_allclose(
        pooled, pooled_model(model)(normalize(images)), atol=ATOL
    )


def test_onnx_matches_keras(model, exported, tmp_path):
    import onnxruntime

    path = export_onnx(exported, tmp_path / "vit.onnx")
    with pytest.raises(ValueError, match="one image tensor"):
        export_onnx(exported, tmp_path / "bytes.onnx", signature="serving_bytes")
    session = onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"]
    )
    assert [i.name for i in session.get_inputs()] == ["images"]
    images = np.random.default_rng(6).integers(
        0, 256, (3, *IMAGE_SIZE, 3), dtype=np.uint8
    )
    names = [o.name for o in session.get_outputs()]
    out = dict(zip(names, session.run(None, {"images": images}), strict=True))
    logits = model(normalize(images)).numpy()
    np.testing.assert_allclose(out["logits"], logits, atol=ATOL)
    np.testing.assert_allclose(out["probabilities"], softmax(logits), atol=ATOL)


def test_tflite_int8_serves_the_float_signatures(tmp_path):
    """The int8 LiteRT file: int8 weights, the float model's signatures and
    input range, logits close to the Keras model's; the recipe's flag."""
    from keras_vit.recipes import export as recipe

    tiny = randomize(keras_vit.ViT("test/4", num_classes=NUM_CLASSES, image_size=16))
    model_file = tmp_path / "tiny.keras"
    tiny.save(model_file)
    argv = ["--model", str(model_file), "--name", "tiny", "--version", "1"]
    saved = recipe.main(argv + ["--base-dir", str(tmp_path), "--tflite-int8"])
    int8 = tmp_path / "tiny" / "1.int8.tflite"
    assert int8.is_file() and not (tmp_path / "tiny" / "1.tflite").exists()
    with pytest.raises(FileExistsError):
        export_tflite(saved, int8, quantize="int8")
    with pytest.raises(ValueError, match="quantize"):
        export_tflite(saved, tmp_path / "int4.tflite", quantize="int4")
    float_file = export_tflite(saved, tmp_path / "float.tflite")

    runners, int8_weights = {}, {}
    for name, path in (("float", float_file), ("int8", int8)):
        interpreter = tf.lite.Interpreter(model_path=str(path))
        runners[name] = interpreter
        details = interpreter.get_tensor_details()
        int8_weights[name] = sum(
            int(np.prod(d["shape"])) for d in details if d["dtype"] == np.int8
        )
    # Most weights (every kernel but the small head's) are stored as int8.
    assert int8_weights["float"] == 0
    assert int8_weights["int8"] > 0.8 * tiny.count_params(), int8_weights
    assert runners["int8"].get_signature_list() == runners["float"].get_signature_list()
    images = np.random.default_rng(7).integers(0, 256, (4, 16, 16, 3), np.uint8)
    logits = tiny(normalize(images)).numpy()
    out = runners["int8"].get_signature_runner("serving_default")(images=images)
    as_float = runners["int8"].get_signature_runner("serving_float")(
        images=images.astype(np.float32)
    )
    np.testing.assert_allclose(out["logits"], as_float["logits"], atol=1e-6)
    # Quantized, not equal: within 5% of the logits' range of the float model.
    spread = logits.max() - logits.min()
    error = np.abs(out["logits"] - logits).max()
    assert 0 < error < 0.05 * spread, (error, spread)
    np.testing.assert_allclose(out["probabilities"], softmax(out["logits"]), atol=1e-5)
    pooled = runners["int8"].get_signature_runner("features")(images=images)["pooled"]
    reference = pooled_model(tiny)(normalize(images)).numpy()
    assert np.abs(pooled - reference).max() < 0.05 * np.ptp(reference)


# The transforms shared with the data pipeline. --------------------------------


def test_decode_image_formats_and_errors():
    for kind, data, decoded in encoded_images():
        image = transforms.decode_image(data)
        assert image.dtype == tf.uint8 and image.shape[-1] == 3, kind
        np.testing.assert_array_equal(image.numpy(), decoded, err_msg=kind)
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="Unknown image file format"
    ):
        transforms.decode_image(b"not an image")
    with pytest.raises(ValueError, match="scalar string"):
        transforms.decode_image(tf.constant([b"a", b"b"]))


def test_to_model_range():
    values = np.array([0, 127.5, 255], np.float32)
    np.testing.assert_allclose(transforms.to_model_range(values), [-1, 0, 1])
    assert transforms.to_model_range(np.array([255], np.uint8)).dtype == tf.float32


def test_eval_resize_plain_and_central_crop():
    image = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    plain = transforms.eval_resize(image, 16)
    np.testing.assert_allclose(plain, tf.image.resize(image, (16, 16)), atol=1e-4)
    # Square target, fraction 0.5: the central 20x20 of the 40x60 image.
    cropped = transforms.eval_resize(image, 10, crop_fraction=0.5)
    np.testing.assert_allclose(
        cropped, tf.image.resize(image[10:30, 20:40], (10, 10)), atol=1e-4
    )
    # A 2:1 (h:w) target keeps its aspect: the 40x20 window, then 0.5 -> 20x10.
    tall = transforms.eval_resize(image, (8, 4), crop_fraction=0.5)
    np.testing.assert_allclose(
        tall, tf.image.resize(image[10:30, 25:35], (8, 4)), atol=1e-4
    )
    batched = transforms.eval_resize(np.stack([image, image]), 10, crop_fraction=0.5)
    np.testing.assert_allclose(batched[1], cropped, atol=1e-4)
    with pytest.raises(ValueError, match="crop_fraction"):
        transforms.eval_resize(image, 16, crop_fraction=0.0)
    with pytest.raises(ValueError, match="channels"):
        transforms.eval_resize(image[..., 0], 16)


# The command. --------------------------------------------------------------------


def test_export_recipe_writes_versioned_layout(model, tmp_path, capsys):
    from keras_vit.recipes import export as recipe

    model_file = tmp_path / "vit.keras"
    model.save(model_file)
    names = tmp_path / "classes.txt"
    names.write_text("\n".join(CLASS_NAMES) + "\n")
    base = tmp_path / "saved_models"
    argv = ["--model", str(model_file), "--name", "vit_test", "--version", "3"]
    argv += [
        "--base-dir",
        str(base),
        "--class-names",
        str(names),
        "--image-size",
        "32x16",
    ]
    path = recipe.main(argv + ["--tflite"])
    assert path == base / "vit_test" / "3"
    assert (path / "saved_model.pb").is_file() and (path / "variables").is_dir()
    assert (base / "vit_test" / "3.tflite").is_file()
    info = json.loads((path / savedmodel.METADATA_FILE).read_text())
    assert info["image_size"] == [32, 16] and info["class_names"] == CLASS_NAMES
    assert "serving_bytes" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="already exists"):
        recipe.main(argv)
