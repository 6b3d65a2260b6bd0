"""`keras_vit.predict`, `keras-vit predict`, `keras-vit validate`, and
`decode_predictions` on logits.

Every prediction is checked against the same model run by hand on inputs
prepared with `keras_vit.data.transforms.prepare_image` (the model's own
contract), then a softmax. The commands run as a user runs them, through
the installed `keras-vit` script in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import keras_vit_script
from helpers import randomize
from PIL import Image

import keras_vit
from keras_vit import imagenet
from keras_vit import inference
from keras_vit.data.transforms import prepare_image
from keras_vit.data.transforms import resize_and_crop
from keras_vit.models.preprocessing import IMAGENET_MEAN
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.recipes import predict as predict_command
from keras_vit.recipes import validate as validate_command

CLASSES = ("cat", "dog", "emu")


def run(argv, cwd):
    """Runs the installed `keras-vit ...`; returns the completed process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.run(
        [keras_vit_script(), *argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def softmax(logits):
    logits = np.asarray(logits, np.float64)
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def by_hand(model, pixels):
    """Class probabilities of `(H, W, 3)` pixels, prepared by the model's
    contract at its input size, then a softmax of the logits."""
    x = prepare_image(tf.constant(pixels), preprocessing_of(model), (16, 16))
    return softmax(np.asarray(model(x[None], training=False))[0])


def pixels(seed, shape=(20, 28, 3)):
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny 3-class models with random weights, saved as `.keras` files: the
    paper's contract and DeiT III's (ImageNet mean/std, bicubic, centre
    crop); and a 4-class model."""
    folder = tmp_path_factory.mktemp("models")
    paper = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    deit3 = keras_vit.models.family_model(
        "test/4", "deit3", image_size=16, num_classes=3
    )
    four = keras_vit.ViT("test/4", image_size=16, num_classes=4)
    files = {}
    for seed, (name, model) in enumerate(
        [("paper", paper), ("deit3", deit3), ("four", four)]
    ):
        randomize(model, seed=seed, scale=0.5)
        files[name] = str(folder / f"{name}.keras")
        model.save(files[name])
    return files


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """3 classes x 4 PNG images of 16x16 (lossless: PIL and TensorFlow
    decode the same pixels)."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for name in CLASSES:
        os.makedirs(root / name)
        for i in range(4):
            image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            Image.fromarray(image).save(root / name / f"{i}.png")
    return root


# -- keras_vit.predict ---------------------------------------------------------
@pytest.mark.parametrize("contract", ["paper", "deit3"])
def test_predict_a_file_a_pil_image_and_an_array_as_by_hand(contract, models, tmp_path):
    model = keras.saving.load_model(models[contract], compile=False)
    if contract == "deit3":  # The contract survives .keras saving.
        assert preprocessing_of(model).mean == IMAGENET_MEAN
        assert preprocessing_of(model).crop_mode == "center"
    image = pixels(1)  # Not square: the centre crop matters.
    path = tmp_path / "image.png"
    Image.fromarray(image).save(path)
    expected = by_hand(model, image)
    assert expected.max() - expected.min() > 0.05  # Not uniform.
    order = list(np.argsort(-expected))
    # Float pixels are resized as floats (`resize_and_crop`: uint8 images as
    # PIL resizes 8-bit images), so they are checked against their own.
    floats = image.astype("float32")
    results = keras_vit.predict(
        models[contract], [str(path), Image.fromarray(image), image, floats], top_k=2
    )
    assert len(results) == 4
    for top, want in zip(
        results, [expected] * 3 + [by_hand(model, floats)], strict=True
    ):
        assert [p.index for p in top] == order[:2]
        assert [p.label for p in top] == [str(i) for i in order[:2]]
        np.testing.assert_allclose(
            [p.probability for p in top], want[order[:2]], rtol=1e-5, atol=1e-6
        )
    # A batch array is that many images; the path may be a PathLike.
    batch = np.stack([image, pixels(2)])
    (first, second) = keras_vit.predict(model, batch, top_k=3)
    assert [p.index for p in first] == order
    np.testing.assert_allclose(
        [p.probability for p in second],
        np.sort(by_hand(model, pixels(2)))[::-1],
        rtol=1e-5,
        atol=1e-6,
    )
    (top,) = keras_vit.predict(model, path, top_k=10)
    assert len(top) == 3  # No more than the model's classes.


def test_predict_feeds_pixels_to_a_model_that_normalises_itself():
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, include_preprocessing=True,
        preprocessing=keras_vit.models.preprocessing.IMAGENET,
    )  # fmt: skip
    randomize(model, seed=3, scale=0.5)
    image = pixels(4)
    x = resize_and_crop(tf.constant(image), preprocessing_of(model), (16, 16))
    expected = softmax(np.asarray(model(x[None]))[0])
    (top,) = keras_vit.predict(model, image, top_k=3)
    np.testing.assert_allclose(
        [p.probability for p in top], np.sort(expected)[::-1], rtol=1e-5, atol=1e-6
    )


def test_a_softmax_head_is_reported_as_it_is_and_names_are_used():
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, classifier_activation="softmax"
    )
    randomize(model, seed=5, scale=0.5)
    image = pixels(6)
    x = prepare_image(tf.constant(image), preprocessing_of(model), (16, 16))
    expected = np.asarray(model(x[None]))[0]
    (top,) = keras_vit.predict(model, image, top_k=3, class_names=CLASSES)
    assert sum(p.probability for p in top) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(
        [p.probability for p in top], np.sort(expected)[::-1], rtol=1e-5
    )
    assert [p.label for p in top] == [CLASSES[p.index] for p in top]
    assert top[0].as_dict() == {
        "label": top[0].label, "index": top[0].index,
        "probability": top[0].probability,
    }  # fmt: skip
    with pytest.raises(ValueError, match="lists 2 names, but model .* has 3 classes"):
        keras_vit.predict(model, image, class_names=["a", "b"])


def test_a_1000_class_model_is_labelled_with_the_imagenet_names():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=1000)
    randomize(model, seed=7)
    (top,) = keras_vit.predict(model, pixels(8), top_k=3)
    names = imagenet.class_names()
    assert [p.label for p in top] == [names[p.index] for p in top]


def test_a_dynamic_size_model_is_fed_its_native_size():
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, dynamic_image_size=True
    )
    assert inference.image_size_of(model) == (16, 16)
    assert len(keras_vit.predict(model, pixels(9))[0]) == 3


def test_a_headless_model_and_bad_inputs_are_clear_errors(tmp_path):
    headless = keras_vit.ViT("test/4", image_size=16, include_top=False)
    with pytest.raises(ValueError, match="no classification head.*include_top=False"):
        keras_vit.predict(headless, pixels(0))
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    missing = str(tmp_path / "missing.jpg")
    with pytest.raises(FileNotFoundError, match=f"{missing}: no such file"):
        keras_vit.predict(model, [pixels(0), missing])
    text = tmp_path / "notes.png"
    text.write_text("not an image")
    with pytest.raises(ValueError) as error:
        keras_vit.predict(
            model, [np.zeros((16, 16)), str(text), np.full((20, 28, 3), -0.5)]
        )
    message = str(error.value)
    assert message.startswith("3 inputs are not usable images: ")
    assert "images[0]: an array of shape (16, 16); expected" in message
    assert f"{text}: not an image" in message
    assert "images[2]: an array of shape (20, 28, 3) with values from -0.5" in message
    with pytest.raises(ValueError, match="top_k"):
        keras_vit.predict(model, pixels(0), top_k=0)


# -- decode_predictions --------------------------------------------------------
def test_decode_predictions_turns_logits_into_probabilities():
    logits = np.random.default_rng(0).normal(0, 3, (2, 1000)).astype("float32")
    decoded = imagenet.decode_predictions(logits, top=5)
    expected = softmax(logits)
    for row, top in zip(expected, decoded, strict=True):
        order = np.argsort(-row)[:5]
        assert [wnid for wnid, _, _ in top] == [imagenet.synsets()[i] for i in order]
        np.testing.assert_allclose([p for _, _, p in top], row[order], rtol=1e-5)
        assert 0 < sum(p for _, _, p in top) <= 1.0
    # Probabilities are reported as they are; `from_logits` overrides.
    probabilities = expected.astype("float32")
    same = imagenet.decode_predictions(probabilities, top=1)
    assert same[0][0][2] == pytest.approx(float(probabilities[0].max()))
    raw = imagenet.decode_predictions(logits, top=1, from_logits=False)
    assert raw[0][0][2] == pytest.approx(float(logits[0].max()))


# -- the commands ----------------------------------------------------------------
def test_both_commands_answer_help(capsys):
    for command in (predict_command, validate_command):
        with pytest.raises(SystemExit) as exit_:
            command.main(["--help"])
        assert exit_.value.code == 0
        assert "--model" in capsys.readouterr().out


def test_predict_command_prints_each_images_top_k(models, tmp_path):
    model = keras.saving.load_model(models["deit3"], compile=False)
    images = [pixels(10), pixels(11, (24, 16, 3))]
    paths = []
    for i, image in enumerate(images):
        paths.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(image).save(paths[-1])
    names = tmp_path / "names.txt"
    names.write_text("\n".join(CLASSES) + "\n")
    process = run(
        ["predict", "--model", models["deit3"], "--top-k", "2", "--class-names",
         str(names), *paths],
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    out = process.stdout
    assert "images prepared at 16x16: mean (0.485, 0.456, 0.406)" in out
    for path, image in zip(paths, images, strict=True):
        block = out[out.index(path) :].splitlines()[2:4]  # The header, then top 2.
        expected = by_hand(model, image)
        for rank, (line, index) in enumerate(
            zip(block, np.argsort(-expected), strict=False), 1
        ):
            words = line.split()
            assert words[:3] == [str(rank), CLASSES[index], str(index)], out
            assert float(words[3]) == pytest.approx(expected[index], abs=2e-4), out


def test_predict_command_json_and_a_bad_path_exit_1_naming_it(models, tmp_path):
    path = tmp_path / "a.png"
    Image.fromarray(pixels(12)).save(path)
    process = run(
        ["predict", "--model", models["paper"], "--json", str(path)], tmp_path
    )
    assert process.returncode == 0, process.stderr[-3000:]
    record = json.loads(process.stdout)
    (entry,) = record["images"]
    assert entry["image"] == str(path) and len(entry["top_k"]) == 3
    assert sum(p["probability"] for p in entry["top_k"]) == pytest.approx(1, abs=1e-5)
    assert record["image_size"] == [16, 16]

    bad = run(
        ["predict", "--model", models["paper"], str(path), "missing.jpg",
         str(tmp_path)],
        tmp_path,
    )  # fmt: skip
    assert bad.returncode == 1, bad.stderr[-3000:]
    assert "Traceback" not in bad.stderr
    (line,) = [line for line in bad.stderr.splitlines() if line.startswith("error: ")]
    assert line == (
        f"error: 2 inputs are not usable images: missing.jpg: no such file; "
        f"{tmp_path}: not a file"
    )
    assert bad.stdout == ""  # Nothing was run.


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_validate_command_on_a_folder_matches_by_hand(models, image_folder, tmp_path):
    out = tmp_path / "results" / "val.json"
    process = run(
        ["validate", "--model", models["deit3"], "--data", f"folder:{image_folder}",
         "--batch-size", "5", "--out", str(out)],
        tmp_path,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    record = json.loads(out.read_text())
    model = keras.saving.load_model(models["deit3"], compile=False)
    correct, losses = [], []
    for label, name in enumerate(CLASSES):
        for i in range(4):
            image = np.asarray(Image.open(image_folder / name / f"{i}.png"))
            probabilities = by_hand(model, image)
            correct.append(np.argmax(probabilities) == label)
            losses.append(-np.log(probabilities[label]))
    assert record["num_images"] == 12 and record["num_classes"] == 3
    assert record["top1"] == pytest.approx(100 * np.mean(correct), abs=1e-3)
    assert record["top5"] is None  # Fewer than 5 classes.
    assert record["loss"] == pytest.approx(np.mean(losses), rel=1e-4)
    assert record["images_per_second"] > 0
    assert record["split"] == "train" and record["batch_size"] == 5
    assert record["preprocessing"]["config"]["mean"] == list(IMAGENET_MEAN)
    assert record["preprocessing"]["description"].startswith("mean (0.485")
    assert f"top-1   {record['top1']:.3f} %" in process.stdout
    assert f"Wrote {out}" in process.stdout


def test_validate_command_refuses_a_model_of_other_classes(
    models, image_folder, tmp_path
):
    process = run(
        ["validate", "--model", models["four"], "--data", f"folder:{image_folder}",
         "--out", str(tmp_path / "val.json")],
        tmp_path,
    )  # fmt: skip
    assert process.returncode == 1, process.stderr[-3000:]
    (line,) = [x for x in process.stderr.splitlines() if x.startswith("error: ")]
    assert "has 3 classes but the model" in line and "has 4" in line, line
    assert "Traceback" not in process.stderr
    assert not (tmp_path / "val.json").exists()
