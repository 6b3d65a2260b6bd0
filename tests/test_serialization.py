"""`.keras` and weights-only round trips of whole models, hybrid included."""

import json

import keras
import numpy as np
import pytest
from helpers import images
from helpers import randomize
from helpers import tiny_model

import keras_vit

MODELS = {
    "vit": lambda: tiny_model(
        representation_size=16, drop_path_rate=0.1, dropout_rate=0.1
    ),
    "gap_non_square": lambda: tiny_model(
        class_token=False, pooling="gap", image_size=(24, 40)
    ),
    "hybrid": lambda: keras_vit.ViT(
        "test/16",
        backbone=keras_vit.ResNetSpec((1, 1), width=32),
        image_size=32,
        num_classes=3,
    ),
    "preprocessing_gelu_tanh": lambda: tiny_model(
        include_preprocessing=True, gelu_approximate=True
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_keras_file_round_trip_gives_identical_outputs(name, tmp_path):
    model = MODELS[name]()
    randomize(model, scale=0.1)
    x = images(size=model.input_shape[1:3]) * 100
    expected = model.predict(x, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(restored.predict(x, verbose=0), expected)
    assert restored.to_json() == model.to_json()

    weights_path = tmp_path / "model.weights.h5"
    model.save_weights(weights_path)
    fresh = MODELS[name]()
    fresh.load_weights(weights_path)
    np.testing.assert_array_equal(fresh.predict(x, verbose=0), expected)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_no_lambda_layers_and_json_config(name):
    model = MODELS[name]()
    assert not any(isinstance(layer, keras.layers.Lambda) for layer in model.layers)
    config = json.loads(model.to_json())
    assert "Lambda" not in json.dumps(config)
    clone = keras.models.model_from_json(model.to_json())
    assert [w.shape for w in clone.weights] == [w.shape for w in model.weights]
