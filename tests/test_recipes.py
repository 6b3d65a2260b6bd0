"""The trainer and its configs: every recipe runs, fine-tunes, resumes exactly."""

from __future__ import annotations

import dataclasses
import glob
import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from keras_vit.recipes import train
from keras_vit.recipes.configs import base

# Shrinks any shipped config to a few steps of a tiny model.
TINY = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=2",
    "steps_per_epoch=2",
    "warmup_steps=1",
    "mixed_precision=False",
    "verbose=0",
]


def _tiny(name, tmp_path, *extra):
    config = base.override(base.load_config(name), [*TINY, *extra])
    return dataclasses.replace(config, workdir=str(tmp_path / name))


def _event_tags(folder):
    from tensorboard.backend.event_processing import event_accumulator

    tags = set()
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        accumulator = event_accumulator.EventAccumulator(
            path, size_guidance={"tensors": 0}
        )
        accumulator.Reload()
        tags |= set(accumulator.Tags()["tensors"])
    return tags


def test_overrides_are_parsed_and_type_checked():
    config = base.override(
        base.TrainConfig(),
        [
            "epochs=3",
            "dataset=cifar100",
            "learning_rate=1",
            "crop_area_range=[0.5, 1.0]",
            "ema_momentum=None",
            "mixed_precision=True",
        ],
    )
    assert config.epochs == 3 and config.dataset == "cifar100"
    assert config.learning_rate == 1.0 and isinstance(config.learning_rate, float)
    assert config.crop_area_range == (0.5, 1.0)
    assert config.ema_momentum is None and config.mixed_precision is True
    for bad in (
        "epochs=2.5",
        "epochs=True",
        "crop_area_range=(1,)",
        "nope=1",
        "epochs",
    ):
        with pytest.raises(ValueError):
            base.override(config, [bad])


def test_shipped_configs_document_how_to_run_them():
    names = base.shipped_configs()
    assert {
        "digits",
        "cifar10",
        "cifar100",
        "cifar10_finetune_b16",
        "cifar100_finetune_b16",
        "imagenet_finetune_b16_384",
        "imagenet_finetune_l16_384",
    } <= set(names)
    for name in names:
        config = base.load_config(name)
        module = __import__(
            f"keras_vit.recipes.configs.{name}", fromlist=["get_config"]
        )
        doc = module.__doc__
        assert f"--config {name}" in doc, name
        assert "Hardware" in doc and "accuracy" in doc.lower(), name
        keras_vit.parse_variant(config.variant)  # A known variant.
    finetune = base.load_config("imagenet_finetune_l16_384")
    assert (finetune.optimizer, finetune.weight_decay, finetune.ema_momentum) == (
        "sgd",
        0.0,
        0.9999,
    )
    assert finetune.image_size == 384 and finetune.global_clipnorm == 1.0


def test_digits_recipe_writes_the_documented_run_directory(tmp_path):
    config = _tiny(
        "digits",
        tmp_path,
        "fewshot_every=1",
        "fewshot_shots=(1, 2)",
        "fewshot_examples=100",
    )
    result = train.run(config)
    workdir = config.workdir
    assert result["test"]["accuracy"] >= 0.0
    assert set(result["history"]) >= {"loss", "accuracy", "val_loss", "fewshot_1shot"}
    for name in (
        "config.json",
        "results.json",
        "metrics.csv",
        "final.keras",
        "checkpoints/best.keras",
        "checkpoints/last.keras",
    ):
        assert os.path.exists(os.path.join(workdir, name)), name
    assert not os.path.exists(os.path.join(workdir, "backup"))  # Removed at the end.
    assert json.load(open(os.path.join(workdir, "config.json")))["variant"] == "test/4"
    train_tags = _event_tags(os.path.join(workdir, "tensorboard", "train"))
    assert {
        "epoch_loss",
        "epoch_accuracy",
        "epoch_learning_rate",
        "epoch_steps_per_second",
        "epoch_fewshot_2shot",
        "weight_norm/global",
        "grad_norm/global",
        "grad_norm/encoderblock_1",
        "examples",
        "attention/class_token",
    } <= train_tags
    val_tags = _event_tags(os.path.join(workdir, "tensorboard", "validation"))
    assert {"epoch_loss", "epoch_accuracy"} <= val_tags


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_cifar100_recipe_runs_a_few_steps_on_mock_tfds(tmp_path):
    import tensorflow_datasets as tfds

    # The recipe's RandAugment, MixUp and CutMix all stay on.
    config = _tiny("cifar100", tmp_path, "monitor_images=0")
    with tfds.testing.mock_data(num_examples=16):
        result = train.run(config)
    assert np.isfinite(result["history"]["loss"]).all()
    assert len(result["history"]["loss"]) == 2
    assert result["model"].output_shape == (None, 100)


def test_finetune_starts_from_our_checkpoints_at_a_higher_resolution(tmp_path):
    keras.utils.set_random_seed(1)
    pretrained = keras_vit.ViT("test/4", num_classes=7, image_size=16)
    for layer in pretrained.layers:  # Non-trivial values everywhere.
        layer.set_weights([np.random.normal(size=w.shape) for w in layer.get_weights()])
    pretrained.save(tmp_path / "pre.keras")
    pretrained.save_weights(tmp_path / "pre.weights.h5")
    from keras_vit.models.masked_patch import masked_patch_model

    masked = masked_patch_model("test/4", image_size=16, seed=0)
    masked.save(tmp_path / "masked.keras")

    for path, source in (
        ("pre.keras", pretrained),
        ("pre.weights.h5", pretrained),
        ("masked.keras", masked),
    ):
        config = _tiny(
            "cifar10_finetune_b16",
            tmp_path,
            f"init_from='{tmp_path / path}'",
            "image_size=32",
        )
        model = train.build_model(config, num_classes=10, say=lambda _: None)
        block = model.get_layer("encoderblock_1").get_weights()
        for got, want in zip(
            block, source.get_layer("encoderblock_1").get_weights(), strict=True
        ):
            np.testing.assert_array_equal(got, want)
        assert not model.get_layer("head").get_weights()[0].any()  # Fresh, zero head.
        posemb = model.get_layer("posembed_input").get_weights()[0]
        expected = source.get_layer("posembed_input").resampled((8, 8))
        np.testing.assert_allclose(posemb, expected, rtol=1e-6)

    # The whole fine-tune recipe (SGD + EMA) from the masked-patch encoder.
    import tensorflow_datasets as tfds

    config = _tiny(
        "cifar10_finetune_b16",
        tmp_path,
        f"init_from='{tmp_path / 'masked.keras'}'",
        "eval_batch_size=8",
    )
    with tfds.testing.mock_data(num_examples=16):
        result = train.run(config)
    assert np.isfinite(result["history"]["val_loss"]).all()

    # A file of another architecture is refused before training: the first
    # line gives the overrides that fit it, the next ones what differs, then
    # the keys and shapes.
    config = _tiny(
        "digits", tmp_path, f"init_from='{tmp_path / 'pre.keras'}'", "variant=test/8"
    )
    with pytest.raises(base.ConfigError) as caught:
        train.run(config)
    first, *rest = str(caught.value).splitlines()
    assert first.endswith(
        "to fine-tune from it: --set encoder.class_token=true "
        "--set encoder.pooling=token --set variant=test/4"
    ), first
    assert "- class token: the file has one, the config's encoder has none" in rest
    assert "- patch size: the file's 4x4, the config's 8x8 (variant 'test/8')" in rest


class _Interrupt(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if self._epoch == 1 and batch == 1:
            raise KeyboardInterrupt("simulated preemption")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_an_interrupted_run_resumes_and_ends_where_an_uninterrupted_one_does(tmp_path):
    overrides = [
        "epochs=3",
        "dropout_rate=0.1",
        "drop_path_rate=0.1",
        "val_split=None",
        "test_split=None",
        "crop_area_range=(0.3, 1.0)",
        "monitor_images=0",
    ]
    whole = train.run(_tiny("digits", tmp_path / "whole", *overrides))

    config = _tiny("digits", tmp_path / "resumed", *overrides)
    with pytest.raises(KeyboardInterrupt):
        train.run(config, callbacks=(_Interrupt(),))
    assert training.resume_epoch(os.path.join(config.workdir, "backup")) == 1
    keras.backend.clear_session()
    resumed = train.run(config)  # The same command again.

    assert len(resumed["history"]["loss"]) == 2  # Epochs 2 and 3 only.
    np.testing.assert_allclose(
        resumed["history"]["loss"], whole["history"]["loss"][1:], rtol=1e-5
    )
    for got, want in zip(
        resumed["model"].get_weights(), whole["model"].get_weights(), strict=True
    ):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    csv_rows = open(os.path.join(config.workdir, "metrics.csv")).read().splitlines()
    assert [row.split(",")[0] for row in csv_rows[1:]] == ["0", "1", "2"]


def test_warmup_then_cosine_or_linear_decay():
    cosine = training.WarmupDecay(1.0, total_steps=10, warmup_steps=2)
    lrs = [float(cosine(step)) for step in range(11)]
    np.testing.assert_allclose(lrs[:3], [0.5, 1.0, 1.0], rtol=1e-6)
    np.testing.assert_allclose(lrs[6], 0.5, rtol=1e-6)  # Half-way: cos(pi / 2).
    assert lrs[10] == 0.0 and all(
        a >= b for a, b in zip(lrs[1:], lrs[2:], strict=False)
    )
    linear = training.WarmupDecay(1.0, total_steps=10, warmup_steps=2, decay="linear")
    np.testing.assert_allclose(float(linear(4)), 0.75, rtol=1e-6)
    with pytest.raises(ValueError, match="warmup_steps"):
        training.WarmupDecay(1.0, total_steps=10, warmup_steps=11)


def test_optimizers_follow_the_paper():
    adamw = training.make_optimizer("adamw", 1e-3, weight_decay=0.1)
    assert (adamw.beta_1, adamw.beta_2, adamw.weight_decay) == (0.9, 0.999, 0.1)
    assert adamw.global_clipnorm == 1.0 and not adamw.use_ema
    model = keras_vit.ViT("test/8", num_classes=3, image_size=16)
    adamw.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if adamw._use_weight_decay(v)}
    assert "encoderblock_0/mlp_dense_1/kernel" in decayed
    assert not decayed & {
        "encoderblock_0/mlp_dense_1/bias",
        "posembed_input/embedding",
        "class_token/token",
        "encoder_norm/gamma",
    }
    sgd = training.make_optimizer("sgd", 0.03, ema_momentum=0.9999)
    assert (sgd.momentum, sgd.weight_decay, sgd.use_ema, sgd.ema_momentum) == (
        0.9,
        None,
        True,
        0.9999,
    )
    with pytest.raises(ValueError, match="Unknown optimizer"):
        training.make_optimizer("lamb", 1e-3)


class _RecordWeights(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        self.trajectory.append([w.copy() for w in self.model.get_weights()])

    def on_train_begin(self, logs=None):
        self.trajectory = []


def test_the_averaged_weights_are_what_evaluation_and_the_final_model_use():
    model = keras_vit.ViT("test/8", num_classes=3, image_size=16)
    momentum = 0.5
    model.compile(
        training.make_optimizer("sgd", 0.1, ema_momentum=momentum),
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, 8)]
    recorder, validation = _RecordWeights(), []

    class _Validation(keras.callbacks.Callback):
        def on_test_begin(self, logs=None):
            validation.append([w.copy() for w in self.model.get_weights()])

    model.fit(
        x,
        y,
        batch_size=4,
        epochs=2,
        validation_data=(x, y),
        verbose=0,
        callbacks=[
            keras.callbacks.SwapEMAWeights(swap_on_epoch=True),
            recorder,
            _Validation(),
        ],
    )
    average = recorder.trajectory[0]  # Keras starts the average at step 1.
    averages = [average]
    for weights in recorder.trajectory[1:]:
        average = [
            momentum * a + (1 - momentum) * w
            for a, w in zip(average, weights, strict=True)
        ]
        averages.append(average)
    for got, want in zip(model.get_weights(), averages[-1], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    for got, want in zip(validation[0], averages[1], strict=True):  # After 2 steps.
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
    assert not np.allclose(recorder.trajectory[-1][-2], averages[-1][-2])


def test_masked_patch_pretraining_and_fewshot_recipes_run(tmp_path):
    from keras_vit.recipes import fewshot as fewshot_recipe
    from keras_vit.recipes import pretrain_masked

    result = pretrain_masked.main(
        [
            "--config", "digits",
            "--set", "variant=test/4",
            "--set", "epochs=1",
            "--set", "steps_per_epoch=2",
            "--set", "global_batch_size=16",
            "--set", f"workdir={tmp_path}",
            "--set", "fewshot_shots=(1, 2)",
            "--set", "fewshot_test_examples=50",
            "--set", "monitor_images=0",
            "--set", "verbose=0",
        ]
    )  # fmt: skip
    assert (tmp_path / "encoder.keras").exists()
    assert "fewshot_1shot" in result["history"]
    table = fewshot_recipe.main(
        ["--model", str(tmp_path / "encoder.keras"), "--shots", "1,2",
         "--max-test-examples", "50"]
    )  # fmt: skip
    assert set(table) == {"1shot", "2shot"}
    assert all(0 <= value <= 1 for value in table.values())
