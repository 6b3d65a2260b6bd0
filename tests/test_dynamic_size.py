"""Any resolution at run time: the dynamic-size ViT, padding, FlexiViT loading."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import randomize

import keras_vit
from keras_vit.resample import resample_patch_embedding
from keras_vit.weights import CheckpointError
from keras_vit.weights import load_weights

SIZES = [(32, 32), (48, 64), (24, 40)]


def _pair(variant="test/4", **kwargs):
    static = keras_vit.ViT(variant, image_size=32, num_classes=3, **kwargs)
    randomize(static, seed=1)
    dynamic = keras_vit.ViT(
        variant, image_size=32, num_classes=3, dynamic_image_size=True, **kwargs
    )
    dynamic.set_weights(static.get_weights())
    return static, dynamic


def _images(size, seed=0, batch=2):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, *size, 3)).astype("float32")


@pytest.mark.parametrize(
    "variant, kwargs",
    [
        ("test/4", {}),
        ("test/8", {"backbone": (1,)}),
        ("test/4", {"pooling": "gap", "class_token": False}),
    ],
)
def test_dynamic_model_equals_with_image_size(variant, kwargs):
    static, dynamic = _pair(variant, **kwargs)
    assert dynamic.input_shape == (None, None, None, 3)
    for size in SIZES:
        x = _images(size)
        expected = keras_vit.with_image_size(static, size)(x)
        np.testing.assert_allclose(dynamic(x), expected, atol=1e-5)


def test_dynamic_resampling_modes_equal_the_numpy_ones():
    static, _ = _pair()
    dynamic = keras_vit.ViT(
        "test/4", image_size=32, num_classes=3, dynamic_image_size=True,
        position_resample="timm",
    )  # fmt: skip
    dynamic.set_weights(static.get_weights())
    for size in [(48, 20), (16, 24)]:
        x = _images(size)
        expected = keras_vit.with_image_size(static, size, method="timm")(x)
        np.testing.assert_allclose(dynamic(x), expected, atol=1e-5)


def test_padding_equals_a_static_model_on_the_zero_padded_image():
    static, _ = _pair()
    padded = keras_vit.ViT(
        "test/4", image_size=32, num_classes=3, dynamic_image_size=True,
        dynamic_image_pad=True,
    )  # fmt: skip
    padded.set_weights(static.get_weights())
    x = _images((30, 37))
    zero_padded = np.pad(x, ((0, 0), (0, 2), (0, 3), (0, 0)))  # (2, 32, 40, 3)
    expected = keras_vit.with_image_size(static, (32, 40))(zero_padded)
    np.testing.assert_allclose(padded(x), expected, atol=1e-5)
    with pytest.raises(ValueError, match="needs `dynamic_image_size=True`"):
        keras_vit.ViT("test/4", image_size=32, dynamic_image_pad=True)


def test_one_trace_per_input_shape_and_xla():
    _, dynamic = _pair()
    forward = tf.function(lambda x: dynamic(x, training=False))
    for _ in range(3):
        forward(_images((32, 48)))
    assert forward.experimental_get_tracing_count() == 1
    forward(_images((24, 24)))
    assert forward.experimental_get_tracing_count() == 2
    compiled = tf.function(lambda x: dynamic(x, training=False), jit_compile=True)
    x = _images((40, 24))
    np.testing.assert_allclose(compiled(x), dynamic(x), atol=1e-5)


def test_dynamic_model_round_trips_through_keras(tmp_path):
    _, dynamic = _pair("test/8", backbone=(1,))
    dynamic.save(tmp_path / "dynamic.keras")
    loaded = keras.saving.load_model(tmp_path / "dynamic.keras")
    x = _images((40, 56))
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(dynamic(x)))


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_dynamic_model_runs_on_jax(tmp_path):
    _, dynamic = _pair()
    dynamic.save(tmp_path / "dynamic.keras")
    x = _images((24, 40))
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", np.asarray(dynamic(x)))
    script = textwrap.dedent(
        f"""
        import numpy as np, keras, keras_vit
        assert keras.backend.backend() == "jax"
        model = keras.saving.load_model({str(tmp_path / "dynamic.keras")!r})
        x = np.load({str(tmp_path / "x.npy")!r})
        out = np.asarray(model(x))
        np.testing.assert_allclose(out, np.load({str(tmp_path / "y.npy")!r}), atol=1e-5)
        import jax
        jitted = jax.jit(lambda images: model(images))
        np.testing.assert_allclose(np.asarray(jitted(x)), out, atol=1e-5)
        print("ok")
        """
    )
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]


# -- FlexiViT: another patch size from a checkpoint ----------------------------


def test_patch_size_override_loads_a_resized_kernel(tmp_path):
    source = keras_vit.ViT("test/8", image_size=32, num_classes=3)
    randomize(source, seed=2)
    source.save_weights(tmp_path / "p8.weights.h5")
    model = keras_vit.ViT(
        "test/8", patch_size=4, image_size=32, num_classes=3,
        weights=tmp_path / "p8.weights.h5",
    )  # fmt: skip
    assert model.name == "vit_test4"
    kernel = np.asarray(model.get_layer("embedding").kernel)
    expected = resample_patch_embedding(
        np.asarray(source.get_layer("embedding").kernel), 4
    )
    np.testing.assert_allclose(kernel, expected, atol=1e-6)
    # Position embeddings follow the new 8x8 grid; every other weight is copied.
    assert model.get_layer("posembed_input").embedding.shape == (1, 65, 32)
    np.testing.assert_array_equal(
        np.asarray(model.get_layer("encoderblock_1").mlp_dense_2.kernel),
        np.asarray(source.get_layer("encoderblock_1").mlp_dense_2.kernel),
    )
    # Without asking for it, another patch size stays another variant.
    plain = keras_vit.ViT("test/4", image_size=32, num_classes=3)
    with pytest.raises(CheckpointError, match="patch_size"):
        load_weights(plain, tmp_path / "p8.weights.h5")
    with pytest.raises(ValueError, match="`patch_size` must be a positive integer"):
        keras_vit.ViT("test/8", patch_size=0)


# -- serving any size ------------------------------------------------------------


@pytest.fixture(scope="module")
def dynamic_export(tmp_path_factory):
    from keras_vit.export import export

    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, dynamic_image_size=True,
        include_preprocessing=True,
    )  # fmt: skip
    randomize(model, seed=4)
    base = tmp_path_factory.mktemp("dynamic_export")
    export(model, base / "1")
    export(model, base / "2", image_size=(24, 40))  # baked, for LiteRT / ONNX
    export(model, base / "3", bytes_image_size=16)
    return model, base


def test_dynamic_export_serves_any_multiple_of_the_stride(dynamic_export):
    model, base = dynamic_export
    served = tf.saved_model.load(str(base / "1")).signatures
    spec = served["serving_default"].structured_input_signature[1]["images"]
    assert spec.shape.as_list() == [None, None, None, 3]
    for size in [(16, 16), (24, 40), (44, 8)]:
        x = np.random.default_rng(0).integers(0, 256, (2, *size, 3)).astype("uint8")
        expected = np.asarray(model(x.astype("float32")))
        got = served["serving_default"](images=tf.constant(x))["logits"].numpy()
        np.testing.assert_allclose(got, expected, atol=1e-5)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=r"multiples of \(4, 4\), got \(2, 22, 40, 3\)",
    ):
        served["serving_default"](images=tf.zeros((2, 22, 40, 3), tf.uint8))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"got \(2, 24, 40, 1\)"):
        served["features"](images=tf.zeros((2, 24, 40, 1), tf.uint8))


def test_dynamic_export_bytes_keep_or_resize(dynamic_export):
    model, base = dynamic_export
    rng = np.random.default_rng(1)
    images = [
        rng.integers(0, 256, size).astype("uint8")
        for size in [(24, 40, 3), (12, 20, 3)]
    ]
    encoded = tf.constant([tf.io.encode_png(i).numpy() for i in images])
    own = tf.saved_model.load(str(base / "1")).signatures["serving_bytes"](
        image_bytes=encoded
    )
    for index, image in enumerate(images):  # each at its own size (on the grid)
        expected = np.asarray(model(image[None].astype("float32")))
        probabilities = tf.nn.softmax(expected).numpy()[0]
        np.testing.assert_allclose(
            own["probabilities"].numpy()[index], probabilities, atol=1e-5
        )
    fixed = tf.saved_model.load(str(base / "3")).signatures["serving_bytes"](
        image_bytes=encoded
    )
    resized = tf.image.resize(
        np.stack([i.astype("float32") for i in images[:1]]), (16, 16)
    )
    expected = tf.nn.softmax(model(resized)).numpy()[0]
    np.testing.assert_allclose(fixed["probabilities"].numpy()[0], expected, atol=1e-5)


def test_baked_export_equals_the_dynamic_model(dynamic_export):
    model, base = dynamic_export
    baked = tf.saved_model.load(str(base / "2")).signatures["serving_default"]
    assert baked.structured_input_signature[1]["images"].shape.as_list() == [
        None,
        24,
        40,
        3,
    ]
    x = np.random.default_rng(2).integers(0, 256, (2, 24, 40, 3)).astype("uint8")
    np.testing.assert_allclose(
        baked(images=tf.constant(x))["logits"].numpy(),
        np.asarray(model(x.astype("float32"))),
        atol=1e-5,
    )
