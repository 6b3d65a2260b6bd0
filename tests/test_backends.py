"""The layers use `keras.ops` only: the same model runs on the JAX backend.

A subprocess builds the tiny model under `KERAS_BACKEND=jax` from a `.keras`
file saved here (TensorFlow backend) and must reproduce its outputs, with and
without attention scores, and train one step.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import images
from helpers import randomize
from helpers import tiny_model

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    assert keras.backend.backend() == "jax"
    import keras_vit

    path, inputs_path, out_path = sys.argv[1:]
    x = np.load(inputs_path)
    model = keras.saving.load_model(path)
    logits = np.asarray(model.predict(x, verbose=0))
    block = model.get_layer("encoderblock_0")
    tokens = keras.ops.ones((2, 17, 32))
    _, scores = block(tokens, return_attention_scores=True)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    y = np.arange(len(x)) % 10
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, epochs=2, verbose=0)
    after = model.evaluate(x, y, verbose=0)
    np.save(out_path, logits)
    print(json.dumps({
        "scores_sum": float(np.asarray(scores).sum(-1).mean()),
        "before": before, "after": after,
    }))
    """
)


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_tiny_model_runs_identically_on_jax(tmp_path):
    model = tiny_model(drop_path_rate=0.1)
    randomize(model, scale=0.1)
    x = images(batch=4)
    path = tmp_path / "model.keras"
    model.save(path)
    np.save(tmp_path / "x.npy", x)
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(tmp_path / "x.npy"),
         str(tmp_path / "out.npy")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(
        np.load(tmp_path / "out.npy"), model.predict(x, verbose=0), atol=1e-5
    )
    assert report["scores_sum"] == pytest.approx(1.0, abs=1e-5)
    assert report["after"] < report["before"]
