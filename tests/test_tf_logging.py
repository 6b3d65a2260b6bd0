"""What reaches standard error around `import keras_vit`.

`import keras_vit` imports TensorFlow with file descriptor 2 pointed at
`/dev/null` and a stand-in for `sys.stderr` (`keras_vit/_tensorflow.py`).
In a fresh process, as a user's script runs: what C++ code writes to
descriptor 2 during the import is dropped, what Python writes is kept, and
the log handlers made during the import (TensorFlow's, absl's, JAX's) print
each message once to the real standard error afterwards.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Writes one note as C++ code does (to descriptor 2) and one as Python does
# (to `sys.stderr`) when TensorFlow's import starts, then imports keras_vit
# and logs through each Python channel once.
_SCRIPT = """
import importlib.abc, os, sys

class AnnounceTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            os.write(2, b"NOTE-FROM-C\\n")
            print("NOTE-FROM-PYTHON", file=sys.stderr)
        return None

sys.meta_path.insert(0, AnnounceTensorFlow())
import keras_vit
import tensorflow as tf

tf.get_logger().warning("TF-LOGGER-TEXT")
import warnings
warnings.warn("WARNINGS-TEXT")
import jax  # Its handlers are made at import, attached when switched on.
import logging
jax.config.update("jax_logging_level", "WARNING")
logging.getLogger("jax").warning("JAX-LOGGER-TEXT")
jax.config.update("jax_logging_level", None)
from absl import flags
from absl import logging as absl_logging
flags.FLAGS(["script"])  # As `absl.app.run` does, then its handler:
absl_logging.use_absl_handler()
absl_logging.warning("ABSL-TEXT")
print("DONE")
"""
TEXTS = ("TF-LOGGER-TEXT", "WARNINGS-TEXT", "JAX-LOGGER-TEXT", "ABSL-TEXT")


def _run(**env) -> subprocess.CompletedProcess:
    """Runs `_SCRIPT` in a fresh process, TensorFlow's log level unset."""
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    for name in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_VIT_VERBOSE"):
        if name not in env:
            environment.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_SCRIPT)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
        timeout=600,
    )


def _assert_each_text_once(process: subprocess.CompletedProcess) -> None:
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.strip().endswith("DONE"), process.stdout[-2000:]
    assert "Logging error" not in process.stderr, process.stderr[-3000:]
    assert "closed file" not in process.stderr, process.stderr[-3000:]
    for text in TEXTS:
        assert process.stderr.count(text) == 1, (text, process.stderr[-3000:])


def test_log_records_after_import_keras_vit_print_once_to_stderr():
    process = _run()
    _assert_each_text_once(process)
    # The start-up notes stay hidden; Python's output during the import stays.
    assert "NOTE-FROM-C" not in process.stderr, process.stderr[-3000:]
    assert process.stderr.count("NOTE-FROM-PYTHON") == 1, process.stderr[-3000:]


def test_verbose_shows_the_notes_and_logs_the_same():
    process = _run(KERAS_VIT_VERBOSE="1")
    _assert_each_text_once(process)
    # The note the first test expects hidden does reach descriptor 2.
    assert process.stderr.count("NOTE-FROM-C") == 1, process.stderr[-3000:]
    assert process.stderr.count("NOTE-FROM-PYTHON") == 1, process.stderr[-3000:]
