"""The input contract: everything that feeds pixels uses `model.preprocessing`.

`keras_vit.data.transforms.normalize` / `resize_and_crop` / `prepare_image`
against NumPy and PIL references of timm's evaluation transform; a DeiT
III-like model (ImageNet mean/std) served through every signature of an
export; `include_preprocessing=True`; the recipes' pipelines; and, when the
Hub fixtures are there, timm's and transformers' own preprocessed pixels.

Measured TF-vs-PIL differences (0-255 scale), which the tolerances below
bound:

- the resize alone (`resize_and_crop` of decoded `uint8` pixels vs PIL's
  `Image.resize` + torchvision's `CenterCrop`, the images below): mean
  0.000-0.26, max 4 levels. Most cases agree to one level (PIL's passes are
  reproduced, width first, each clipped and rounded); the few above are
  sizes where Pillow 13 runs the height pass first.
- the Hub fixtures (`tests/fixtures/hub`, 32x32 from 47-72 px JPEGs):
  `decode_image` decodes JPEGs as Pillow does (libjpeg's accurate integer
  DCT), and the pipeline gives mean <= 0.073, max 1 level. TensorFlow's
  default fast DCT gave mean 0.98-1.03, max 5 levels. The `[-1, 1]`
  contract instead is off by a mean of 35 levels on the ImageNet-statistics
  checkpoints.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit.data import transforms
from keras_vit.data.source import ImageSource
from keras_vit.export import export
from keras_vit.export import savedmodel
from keras_vit.export.signatures import ServingGraph
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.preprocessing import IMAGENET_MEAN
from keras_vit.models.preprocessing import IMAGENET_STD
from keras_vit.models.preprocessing import PAPER
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.models.preprocessing_layer import preprocessing_layer

HUB = pathlib.Path(__file__).parent / "fixtures" / "hub"
SIZE = 16
CLASSES = 3
ATOL = 1e-5
# TF vs PIL on 0-255 pixels, the resize alone (measured: mean <= 0.26,
# max 4; see the module docstring).
RESIZE_MEAN_TOL = 0.35
RESIZE_MAX_TOL = 4.0
# The Hub fixtures through `decode_image` (measured: mean <= 0.073, max 1).
HUB_MEAN_TOL, HUB_MAX_TOL = 0.1, 1.0


def randomize(model: keras.Model, seed: int = 0) -> keras.Model:
    """Random weights everywhere (a zero head would hide a wrong input)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def deit3_like(**kwargs) -> keras.Model:
    """A tiny DeiT III: the family's ImageNet mean/std contract."""
    return keras_vit.models.family_model(
        "test/4", "deit3", image_size=SIZE, num_classes=CLASSES, **kwargs
    )


def natural(height: int, width: int, seed: int = 0) -> np.ndarray:
    """A uint8 RGB image with smooth gradients, hard edges and noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    base = np.stack(
        [np.sin(7 * x + 3 * y), np.cos(5 * y - 2 * x), np.sin(11 * x * y)], -1
    )
    base = base * 80 + 128
    base += (x[..., None] > 0.5) * 40 - (y[..., None] > 0.3) * 30
    base += rng.normal(0, 12, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


def timm_eval_resize(image, size, crop, mode, resample=Image.BICUBIC):
    """timm's `transforms_imagenet_eval` geometry on a PIL image, as NumPy.

    `Resize(floor(size / crop))` of the shorter side (torchvision: the longer
    side `int(s * long / short)`) for a square "center" target, timm's
    `ResizeKeepRatio` for a non-square one, `Resize((h', w'))` for "squash";
    then torchvision's `CenterCrop` (`int(round((H - h) / 2.0))`).
    """
    pil = Image.fromarray(image)
    width, height = pil.size
    out_h, out_w = size
    scale_h, scale_w = math.floor(out_h / crop), math.floor(out_w / crop)
    if mode == "squash":
        new_h, new_w = scale_h, scale_w
    elif scale_h == scale_w:
        if width <= height:
            new_w, new_h = scale_h, int(scale_h * height / width)
        else:
            new_h, new_w = scale_h, int(scale_h * width / height)
    else:
        ratio = min(height / scale_h, width / scale_w)
        new_h, new_w = round(height / ratio), round(width / ratio)
    pil = pil.resize((new_w, new_h), resample)
    top = int(round((new_h - out_h) / 2.0))
    left = int(round((new_w - out_w) / 2.0))
    pil = pil.crop((left, top, left + out_w, top + out_h))
    return np.asarray(pil, np.float32)


def png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


# normalize -------------------------------------------------------------------


def test_normalize_matches_numpy_for_imagenet_and_inception_contracts():
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    floats = rng.uniform(0, 255, (2, 5, 7, 3)).astype(np.float32)
    for x in (pixels, floats):
        expected = (x.astype(np.float64) / 255 - IMAGENET_MEAN) / IMAGENET_STD
        got = transforms.normalize(x, IMAGENET)
        assert got.dtype == tf.float32
        np.testing.assert_allclose(got, expected, atol=1e-5)
        # The per-channel multiply-add of `include_preprocessing`.
        layer = preprocessing_layer(IMAGENET)(x.astype(np.float32))
        np.testing.assert_allclose(got, layer, atol=1e-6)
        # [-1, 1]: `to_model_range`, bit for bit (old results do not move).
        inception = transforms.normalize(x, PAPER).numpy()
        np.testing.assert_array_equal(inception, transforms.to_model_range(x))
        np.testing.assert_array_equal(inception, (x.astype(np.float32) - 127.5) / 127.5)
        np.testing.assert_array_equal(
            transforms.normalize(x, None),
            inception,  # None: the paper's.
        )
        half = IMAGENET.replace(mean=(0.5,) * 3, std=(0.5,) * 3)  # Inception's.
        np.testing.assert_array_equal(transforms.normalize(x, half), inception)
    # Per-channel statistics need RGB; [-1, 1] takes any channel count.
    gray = pixels[..., :1]
    with pytest.raises(ValueError, match="3 RGB channels"):
        transforms.normalize(gray, IMAGENET)
    np.testing.assert_array_equal(
        transforms.normalize(gray, PAPER), transforms.to_model_range(gray)
    )


# resize_and_crop ---------------------------------------------------------------


@pytest.mark.parametrize("size", [16, (16, 24), 64])
def test_paper_contract_resize_is_eval_resize_exactly(size):
    image = natural(37, 29)
    for x in (image, image.astype(np.float32), np.stack([image, image[::-1]])):
        np.testing.assert_array_equal(
            transforms.resize_and_crop(x, PAPER, size),
            transforms.eval_resize(x, size),
        )


def test_center_and_squash_geometry_is_timms():
    """Sizes where no resize happens: the crop alone, exactly.

    A centre crop starts at `round((H - h) / 2)`, half to even (Python's
    `round`, as torchvision): 4 for 41 -> 32, 6 for 43 -> 32.
    """
    image = natural(43, 32, seed=1)
    center = IMAGENET.replace(crop_fraction=1.0)
    for height, top in ((40, 4), (41, 4), (43, 6)):
        got = transforms.resize_and_crop(image[:height], center, 32)
        np.testing.assert_array_equal(got, image[top : top + 32])
        # Aspect kept: the transposed image is cut on its width.
        wide = np.transpose(image[:height], (1, 0, 2))
        got = transforms.resize_and_crop(wide, center, 32)
        np.testing.assert_array_equal(got, wide[:, top : top + 32])
    # squash, crop 0.9: resized to floor(32 / 0.9) = 35 (here: already), then
    # the central 32 from round(1.5) = 2.
    square = natural(35, 35, seed=2)
    squash = IMAGENET.replace(crop_fraction=0.9, crop_mode="squash")
    np.testing.assert_array_equal(
        transforms.resize_and_crop(square, squash, 32), square[2:34, 2:34]
    )


CASES = [
    ((32, 32), 0.875, "center"),
    ((32, 32), 1.0, "center"),
    ((32, 32), 0.9, "squash"),
    ((32, 32), 1.0, "squash"),
    ((24, 32), 0.875, "center"),  # Non-square: timm's ResizeKeepRatio.
    ((24, 32), 0.9, "squash"),
]


@pytest.mark.parametrize(
    "shape", [(300, 200), (200, 300), (64, 48), (37, 29), (17, 40)]
)
def test_resize_and_crop_matches_timm_on_pil(shape):
    image = natural(*shape)
    worst = []
    for size, crop, mode in CASES:
        contract = IMAGENET.replace(crop_fraction=crop, crop_mode=mode)
        want = timm_eval_resize(image, size, crop, mode)
        got = transforms.resize_and_crop(image, contract, size).numpy()
        assert got.shape == want.shape, (size, crop, mode)
        diff = np.abs(got - want)
        worst.append(diff.max())
        assert diff.mean() < RESIZE_MEAN_TOL, (size, crop, mode, diff.mean())
        assert diff.max() <= RESIZE_MAX_TOL, (size, crop, mode, diff.max())
    # Bilinear (transformers' ViTImageProcessor), squash, whole image.
    bilinear = Preprocessing(antialias=True)
    want = timm_eval_resize(image, (32, 32), 1.0, "squash", Image.BILINEAR)
    diff = np.abs(transforms.resize_and_crop(image, bilinear, 32).numpy() - want)
    assert diff.mean() < RESIZE_MEAN_TOL and diff.max() <= RESIZE_MAX_TOL


def test_resize_and_crop_takes_any_size_in_a_graph():
    contract = IMAGENET.replace(crop_fraction=0.875)
    one = tf.function(
        lambda image: transforms.prepare_image(image, contract, (16, 12)),
        input_signature=[tf.TensorSpec((None, None, 3), tf.uint8)],
    )
    batch = tf.function(
        lambda images: transforms.resize_and_crop(images, contract, 16),
        input_signature=[tf.TensorSpec((None, None, None, 3), tf.uint8)],
    )
    for shape in ((37, 29), (20, 50), (16, 16)):
        image = natural(*shape)
        np.testing.assert_allclose(
            one(image),
            transforms.normalize(
                timm_eval_resize(image, (16, 12), 0.875, "center"), contract
            ),
            atol=RESIZE_MAX_TOL / (255 * min(IMAGENET_STD)),
        )
        assert batch(np.stack([image, image])).shape == (2, 16, 16, 3)
    with pytest.raises(ValueError, match="image_size"):
        transforms.resize_and_crop(natural(8, 8), IMAGENET)  # No size anywhere.
    sized = IMAGENET.replace(image_size=(8, 8))
    assert transforms.resize_and_crop(natural(20, 9), sized).shape == (8, 8, 3)


# Serving ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    keras.config.set_dtype_policy("float32")
    model = randomize(deit3_like())
    assert preprocessing_of(model) == IMAGENET
    return model


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    path = tmp_path_factory.mktemp("served") / "deit3" / "1"
    export(model, path, top_k=2)
    return path


def images_of_sizes():
    """Decoded images of other sizes than the model's, and their PNGs."""
    decoded = [natural(23, 31, 3), natural(40, 20, 4), natural(16, 16, 5)]
    return decoded, [png(image) for image in decoded]


def test_every_signature_serves_the_models_contract(model, exported):
    contract = preprocessing_of(model)
    loaded = tf.saved_model.load(str(exported))
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)
    floats = rng.uniform(0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)
    decoded, encoded = images_of_sizes()

    def expected(images):
        return model(transforms.prepare_image(images, contract, SIZE)).numpy()

    served = loaded.signatures["serving_default"](images=tf.constant(pixels))
    np.testing.assert_allclose(served["logits"], expected(pixels), atol=ATOL)
    served_float = loaded.signatures["serving_float"](images=tf.constant(floats))
    np.testing.assert_allclose(served_float["logits"], expected(floats), atol=ATOL)
    bytes_out = loaded.signatures["serving_bytes"](
        image_bytes=tf.constant(encoded, dtype=tf.string)
    )
    bytes_logits = np.concatenate([expected(image[None]) for image in decoded])
    np.testing.assert_allclose(
        bytes_out["probabilities"], softmax(bytes_logits), atol=ATOL
    )

    # The old [-1, 1] path gives other logits, by far more than the tolerance.
    def paper(images):
        return model(transforms.to_model_range(transforms.eval_resize(images, SIZE)))

    assert np.abs(served["logits"] - paper(pixels)).max() > 1000 * ATOL
    assert np.abs(served_float["logits"] - paper(floats)).max() > 1000 * ATOL
    old = np.concatenate([paper(image[None]).numpy() for image in decoded])
    assert np.abs(bytes_out["probabilities"] - softmax(old)).max() > 1000 * ATOL

    info = json.loads((exported / savedmodel.METADATA_FILE).read_text())
    assert info["preprocessing"] == contract.get_config()
    assert Preprocessing.from_config(info["preprocessing"]) == contract
    assert info["crop_fraction"] == contract.crop_fraction


def test_crop_fraction_none_is_the_contracts_and_a_value_overrides_it(model):
    decoded, encoded = images_of_sizes()
    assert ServingGraph(model).crop_fraction == preprocessing_of(model).crop_fraction
    graph = ServingGraph(model, crop_fraction=0.5)
    cropped = preprocessing_of(model).replace(crop_fraction=0.5)
    assert graph.preprocessing == cropped
    out = graph.serving_bytes(tf.constant(encoded))
    logits = model(
        np.stack([transforms.prepare_image(i, cropped, SIZE) for i in decoded])
    )
    np.testing.assert_allclose(out["probabilities"], softmax(logits.numpy()), atol=ATOL)
    # An explicit contract (e.g. for a plain keras.Model) is served as given.
    plain = keras.Model(model.inputs, model.outputs)
    assert ServingGraph(plain).preprocessing == PAPER
    assert ServingGraph(plain, preprocessing=IMAGENET).preprocessing == IMAGENET


def test_dynamic_size_model_keeps_each_size_and_normalises_by_contract():
    model = randomize(deit3_like(dynamic_image_size=True))
    graph = ServingGraph(model)
    contract = preprocessing_of(model)
    pixels = np.random.default_rng(1).integers(0, 256, (2, 8, 12, 3), dtype=np.uint8)
    out = graph.serving_default(tf.constant(pixels))
    expected = model(transforms.normalize(pixels, contract)).numpy()
    np.testing.assert_allclose(out["logits"], expected, atol=ATOL)
    # serving_bytes: each image at its own size (here already on the token
    # grid, so not resized), normalised by the contract.
    image = natural(12, 20, 6)
    out = graph.serving_bytes(tf.constant([png(image)]))
    expected = model(transforms.normalize(image[None], contract)).numpy()
    np.testing.assert_allclose(out["probabilities"], softmax(expected), atol=ATOL)


def test_include_preprocessing_equals_normalize_then_model(model):
    inside = deit3_like(include_preprocessing=True)
    for layer in model.layers:
        if layer.get_weights():
            inside.get_layer(layer.name).set_weights(layer.get_weights())
    pixels = np.random.default_rng(2).integers(0, 256, (2, SIZE, SIZE, 3), np.uint8)
    contract = preprocessing_of(model)
    want = model(transforms.normalize(pixels, contract)).numpy()
    np.testing.assert_allclose(inside(pixels.astype(np.float32)), want, atol=ATOL)
    # Served, it is not normalised a second time.
    served = ServingGraph(inside).serving_default(tf.constant(pixels))
    np.testing.assert_allclose(served["logits"], want, atol=ATOL)


# The recipes' pipelines ---------------------------------------------------------


def colour_source(count: int = 8, shape=(20, 28)) -> tuple[ImageSource, np.ndarray]:
    """Images of one colour each (augmentation keeps them so), and the colours."""
    rng = np.random.default_rng(3)
    colours = rng.integers(0, 256, (count, 3)).astype(np.uint8)
    colours[0] = 0  # Black: -2.1 in ImageNet's red, far outside [-1, 1].
    images = np.broadcast_to(colours[:, None, None, :], (count, *shape, 3)).copy()
    labels = np.arange(count, dtype=np.int64) % 2
    source = ImageSource(
        dataset=tf.data.Dataset.from_tensor_slices((images, labels)),
        num_examples=count,
        num_classes=2,
        class_names=("a", "b"),
        name="colours:test",
    )
    return source, colours


def digits_config(tmp_path, *overrides):
    from helpers import digits_run_config

    return digits_run_config(
        tmp_path,
        "global_batch_size=4",
        "eval_batch_size=8",
        "image_size=16",
        *overrides,
    )


def test_recipe_pipelines_normalise_by_the_models_contract(tmp_path):
    from keras_vit.recipes import streams

    contract = preprocessing_of(deit3_like())
    config = digits_config(tmp_path)
    source, colours = colour_source()
    want = (colours / 255 - IMAGENET_MEAN) / IMAGENET_STD  # (count, 3)

    (images, _), *_ = list(streams.eval_data(config, source, False, contract))
    assert images.shape[1:] == (16, 16, 3)
    constant = np.broadcast_to(want[:, None, None], images.shape)
    np.testing.assert_allclose(images, constant, atol=1e-5)
    assert images.numpy().min() < -2.0  # ImageNet statistics, not [-1, 1].
    # Exactly the contract's transform (its own crop: eval_crop_fraction=None).
    assert config.eval_crop_fraction is None
    raw = next(iter(source.dataset.batch(8)))[0]
    cropped = contract
    np.testing.assert_allclose(
        images, transforms.prepare_image(raw, cropped, 16), atol=1e-6
    )
    # Without a contract: the paper's [-1, 1], as before.
    (paper, _), *_ = list(streams.eval_data(config, source, False))
    np.testing.assert_array_equal(
        paper, transforms.to_model_range(transforms.eval_resize(raw, 16))
    )

    # Training: the augmentation is the same, the normalisation the contract's.
    _, _, stream = streams.training_data(
        config, 0, source=source, preprocessing=contract
    )
    batch, labels = next(iter(stream))
    order = [int(np.argmin(np.abs(image[0, 0] - want).sum(-1))) for image in batch]
    np.testing.assert_allclose(
        batch, np.broadcast_to(want[order][:, None, None], batch.shape), atol=1e-4
    )


def test_train_builds_the_pipelines_from_the_built_models_contract(
    tmp_path, monkeypatch
):
    from keras_vit.recipes import engine
    from keras_vit.recipes import train

    class Stop(Exception):
        pass

    seen = {}

    def build_model(config, num_classes, say=print):
        return deit3_like()

    def training_data(config, start_epoch, source, preprocessing, **augmentation):
        seen["preprocessing"] = preprocessing
        raise Stop

    monkeypatch.setattr(train, "build_model", build_model)
    monkeypatch.setattr(engine, "training_data", training_data)
    config = dataclasses.replace(digits_config(tmp_path), verbose=0)
    with pytest.raises(Stop):
        train.run(config)
    assert seen["preprocessing"] == IMAGENET


# timm's and transformers' own pixels (tests/fixtures/hub) ------------------------

HUB_NPZ = sorted(HUB.glob("*.npz")) if HUB.is_dir() else []
TIMM_NPZ = [path for path in HUB_NPZ if path.name.startswith("timm--")]


def hub_contract(path: pathlib.Path) -> Preprocessing:
    with np.load(path) as arrays:
        if "data_config" in arrays:
            return Preprocessing.from_timm(json.loads(str(arrays["data_config"])))
    config = json.loads((path.with_suffix("") / "preprocessor_config.json").read_text())
    return Preprocessing.from_transformers(config)


@pytest.mark.skipif(len(TIMM_NPZ) < 4, reason="tests/fixtures/hub not written yet")
@pytest.mark.parametrize("path", HUB_NPZ, ids=lambda p: p.stem)
def test_prepare_image_matches_the_libraries_pixels(path):
    contract = hub_contract(path)
    jpegs = [tf.io.read_file(str(p)) for p in sorted((HUB / "images").glob("*.jpg"))]
    scale = 255.0 * np.asarray(contract.std)  # Normalised units -> 0-255 levels.

    def levels(decode, chosen):
        got = np.stack([transforms.prepare_image(decode(j), chosen, 32) for j in jpegs])
        return np.abs(got - want) * scale

    with np.load(path) as arrays:
        want = arrays["pixels"]
    assert want.shape == (len(jpegs), 32, 32, 3)
    diff = levels(transforms.decode_image, contract)
    assert diff.mean() < HUB_MEAN_TOL, diff.mean()
    assert diff.max() <= HUB_MAX_TOL + 1e-3, diff.max()

    # TensorFlow's default (fast) JPEG decoding is off by about one level.
    def fast(contents):
        return tf.io.decode_jpeg(contents, channels=3)

    assert levels(fast, contract).mean() > 5 * HUB_MEAN_TOL
    if not contract.is_inception:  # ImageNet statistics: [-1, 1] is far off.
        paper = levels(transforms.decode_image, PAPER)
        assert paper.mean() > 10 * HUB_MEAN_TOL, paper.mean()


def test_analyze_and_fewshot_feed_the_models_contract():
    from keras_vit.recipes import analyze
    from keras_vit.recipes import fewshot

    images = np.random.default_rng(4).uniform(-1, 1, (2, SIZE, SIZE, 3))
    images = images.astype(np.float32)  # The analyses' [-1, 1] images.
    deit3 = deit3_like()
    inputs, value_range = analyze.model_inputs_of(deit3, images)
    np.testing.assert_allclose(
        inputs, transforms.normalize((images + 1) * 127.5, IMAGENET), atol=1e-5
    )
    assert value_range[0] == pytest.approx(np.mean(IMAGENET.offset))
    paper = keras_vit.ViT("test/4", image_size=SIZE, num_classes=CLASSES)
    inputs, value_range = analyze.model_inputs_of(paper, images)
    assert inputs is images and value_range == (-1.0, 1.0)  # As before.
    # Few-shot pools: the model's contract; [0, 255] for a model that
    # normalises itself.
    assert fewshot._contract(deit3) == IMAGENET
    inside = deit3_like(include_preprocessing=True)
    pixels = np.array([[[0.0, 127.0, 255.0]]])
    np.testing.assert_allclose(
        transforms.normalize(pixels, fewshot._contract(inside)), pixels, atol=1e-4
    )


def test_monitor_shows_inputs_as_the_pixels_they_came_from():
    """TensorBoard's example images undo the model's own normalisation."""
    from keras_vit.training.monitor import _to_unit_range

    rng = np.random.default_rng(0)
    pixels = rng.uniform(0, 255, (2, 4, 4, 3)).astype("float32")
    for contract in (preprocessing_of(deit3_like()), Preprocessing()):
        inputs = transforms.normalize(pixels, contract)
        shown = _to_unit_range(inputs, contract)
        np.testing.assert_allclose(shown, pixels / 255.0, atol=1e-5)
