"""Exports under faults a real TF Serving deployment meets (issue 12, 5 and 6).

Each test injects the fault: a umask and a reader of another uid, a SIGKILL
in the middle of an export, a version name TF Serving does not serve,
requests of the wrong shape or with NaN and infinite pixels, and the
server's own reading of the warm-up and batching files (with the
`tensorflow-serving-api` protos).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory
from google.protobuf import text_format
from google.protobuf import wrappers_pb2
from tensorflow_serving.apis import prediction_log_pb2

import keras_vit
from keras_vit import atomic
from keras_vit.export import export

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZE = 16
NUM_CLASSES = 3
NOBODY = 65534


def randomize(model: keras.Model) -> keras.Model:
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


def normalize(pixels) -> np.ndarray:
    return (np.asarray(pixels, np.float32) - 127.5) / 127.5


def quiet_env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module")
def model():
    keras.config.set_dtype_policy("float32")
    return randomize(keras_vit.ViT("test/4", image_size=SIZE, num_classes=NUM_CLASSES))


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    return export(model, tmp_path_factory.mktemp("faults") / "vit" / "1")


# Permissions follow the umask. ------------------------------------------------


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes(directory: pathlib.Path) -> set[tuple[str, int]]:
    """{(kind, permission bits)} over `directory` and everything below it."""
    found = {("dir", mode(directory))}
    for entry in directory.rglob("*"):
        found.add(("dir" if entry.is_dir() else "file", mode(entry)))
    return found


def read_as_nobody(path: pathlib.Path) -> subprocess.CompletedProcess:
    """Reads every file under `path` as uid/gid 65534, no extra groups."""
    return subprocess.run(
        ["find", str(path), "-type", "f", "-exec", "cat", "{}", "+"],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_permissions_follow_the_umask(model):
    # pytest's own tmp_path is private (0700): a world-traversable base.
    base = pathlib.Path(tempfile.mkdtemp(prefix="keras_vit_umask_"))
    base.chmod(0o755)
    old = os.umask(0o022)
    try:
        public = export(model, base / "vit" / "1", warmup=False)
        atomic.write_bytes(public.parent / "1.tflite", b"flatbuffer", False)
        os.umask(0o077)
        private = export(model, base / "vit" / "2", warmup=False)
        atomic.write_bytes(private.parent / "2.tflite", b"flatbuffer", False)
        os.umask(old)

        assert modes(public) == {("dir", 0o755), ("file", 0o644)}
        assert modes(private) == {("dir", 0o700), ("file", 0o600)}
        assert mode(base / "vit" / "1.tflite") == 0o644
        assert mode(base / "vit" / "2.tflite") == 0o600
        if os.geteuid() == 0:  # Another uid can only be taken as root.
            assert read_as_nobody(public).returncode == 0
            denied = read_as_nobody(private)
            assert denied.returncode != 0
            assert "Permission denied" in denied.stderr
    finally:
        os.umask(old)
        shutil.rmtree(base)


# Staging directories of killed exports are removed. ---------------------------

KILLED_EXPORT = textwrap.dedent(
    """
    import pathlib, sys, time
    import keras_vit
    from keras_vit.export import export, savedmodel

    base, ready = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])

    def hang(*args, **kwargs):  # The SavedModel is half written: wait there.
        ready.write_text("writing")
        time.sleep(600)

    savedmodel._write_metadata = hang
    export(keras_vit.ViT("test/4", image_size=16, num_classes=3), base / "1")
    """
)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_killed_export_is_cleaned_up_by_the_next(model, tmp_path):
    base = tmp_path / "vit"
    ready = tmp_path / "ready"
    script = tmp_path / "killed_export.py"
    script.write_text(KILLED_EXPORT)
    process = subprocess.Popen(
        [sys.executable, str(script), str(base), str(ready)],
        env=quiet_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not ready.exists():
            assert process.poll() is None, process.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "the export never started"
            time.sleep(0.2)
        left = [entry.name for entry in base.iterdir()]
        assert len(left) == 1 and left[0].startswith(".1.partial-"), left
    finally:
        process.send_signal(signal.SIGKILL)
        process.communicate()

    path = export(model, base / "1", warmup=False)
    assert sorted(entry.name for entry in base.iterdir()) == ["1"]
    assert (path / "saved_model.pb").is_file()


def test_only_staging_of_dead_processes_on_this_host_is_removed(model, tmp_path):
    base = tmp_path / "vit"
    base.mkdir()
    host = re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname())
    dead_pid = _reaped_pid()
    live = subprocess.Popen(["sleep", "60"])
    try:
        dead = base / f".2.partial-{dead_pid}-0123abcd@{host}"
        running = base / f".3.partial-{live.pid}-0123abcd@{host}"
        elsewhere = base / f".4.partial-{dead_pid}-0123abcd@other-host"
        # A killed `overwrite=True` export had moved version 1 aside.
        moved_aside = base / f".1.old-{dead_pid}-0123abcd@{host}" / "1"
        for directory in (dead, running, elsewhere, moved_aside):
            directory.mkdir(parents=True)
        (moved_aside / "saved_model.pb").write_bytes(b"version 1")

        export(model, base / "5", warmup=False)
        assert sorted(entry.name for entry in base.iterdir()) == sorted(
            ["1", "5", running.name, elsewhere.name]
        )
        assert (base / "1" / "saved_model.pb").read_bytes() == b"version 1"
    finally:
        live.kill()
        live.wait()


def _reaped_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


# Integer versions only. ---------------------------------------------------------


@pytest.mark.parametrize("version", ["latest", "-1", "0", "01", "1.5", "v2"])
def test_version_must_be_a_positive_integer(model, tmp_path, version):
    with pytest.raises(ValueError, match="must be a positive integer") as error:
        export(model, tmp_path / "vit" / version)
    assert "\n" not in str(error.value) and repr(version) in str(error.value)
    assert not (tmp_path / "vit").exists()


# Each signature checks its input. ---------------------------------------------

WRONG_REQUESTS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import tensorflow as tf

    signatures = tf.saved_model.load(sys.argv[1]).signatures
    size = int(sys.argv[2])
    good = np.full((2, size, size, 3), 200, np.uint8)
    png = tf.io.encode_png(good[0]).numpy()
    cases = {
        "serving_default": ("images", tf.uint8, good),
        "serving_float": ("images", tf.float32, good),
        "features": ("images", tf.uint8, good),
    }
    report = {}

    def call(name, key, value):
        try:
            signatures[name](**{key: value})
            return None
        except tf.errors.InvalidArgumentError as error:
            return error.message

    for name, (key, dtype, batch) in cases.items():
        wrong = {
            "size": np.zeros((2, 2 * size, 2 * size, 3)),
            "channels": np.zeros((2, size, size, 1)),
            "rank": np.zeros((size, size, 3)),  # Aborted the process before.
        }
        for what, value in wrong.items():
            report[f"{name}/{what}"] = call(name, key, tf.constant(value, dtype))
            report[f"{name}/{what}/next"] = call(name, key, tf.constant(batch, dtype))
    for what, value in {"rank 0": png, "rank 2": [[png], [png]]}.items():
        report["serving_bytes/" + what] = call("serving_bytes", "image_bytes",
                                               tf.constant(value))
        report["serving_bytes/" + what + "/next"] = call(
            "serving_bytes", "image_bytes", tf.constant([png, png]))
    print(json.dumps(report))
    """
)


def test_each_signature_says_what_shape_it_expected(exported, tmp_path):
    script = tmp_path / "wrong_requests.py"
    script.write_text(WRONG_REQUESTS)
    # A fresh process: a wrong-rank batch used to abort the whole process.
    result = subprocess.run(
        [sys.executable, str(script), str(exported), str(SIZE)],
        env=quiet_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])

    expected = f"expected images of shape (batch, {SIZE}, {SIZE}, 3), got"
    got = {
        "size": f"(2, {2 * SIZE}, {2 * SIZE}, 3)",
        "channels": f"(2, {SIZE}, {SIZE}, 1)",
        "rank": f"({SIZE}, {SIZE}, 3)",
    }
    for name in ("serving_default", "serving_float", "features"):
        for what, shape in got.items():
            message = report[f"{name}/{what}"]
            assert f"{name}: {expected} {shape}" in message, message
            assert report[f"{name}/{what}/next"] is None  # Still serving.
    bytes_expected = "serving_bytes: expected image_bytes of shape (batch), got"
    assert f"{bytes_expected} ()" in report["serving_bytes/rank 0"]
    assert f"{bytes_expected} (2, 1)" in report["serving_bytes/rank 2"]
    assert report["serving_bytes/rank 0/next"] is None
    assert report["serving_bytes/rank 2/next"] is None


# serving_float refuses NaN and infinity. ---------------------------------------


def test_serving_float_refuses_non_finite_pixels(model, exported):
    serve = tf.saved_model.load(str(exported)).signatures["serving_float"]
    good = np.random.default_rng(3).uniform(0, 255, (2, SIZE, SIZE, 3))
    good = good.astype(np.float32)
    logits = model(normalize(good)).numpy()
    expected = "serving_float: expected finite images (pixel values in [0, 255]), got"
    planted = {
        "1 NaN and 0 infinite": [np.nan],
        "0 NaN and 1 infinite": [np.inf],
        "0 NaN and 2 infinite": [-np.inf, np.inf],
        "2 NaN and 1 infinite": [np.nan, -np.inf, np.nan],
    }
    for counted, values in planted.items():
        bad = good.copy()
        for i, value in enumerate(values):
            bad[1, i, 2 * i, i % 3] = value
        with pytest.raises(tf.errors.InvalidArgumentError) as info:
            serve(images=tf.constant(bad))  # Answered with NaN scores before.
        assert f"{expected} {counted} value(s)" in info.value.message
        # The server goes on: the next request is answered as usual.
        out = serve(images=tf.constant(good))
        np.testing.assert_allclose(out["logits"], logits, atol=1e-4)


# The warm-up file, read back as TF Serving reads it. ---------------------------


def test_warmup_requests_replay_against_the_saved_model(model, exported, tmp_path):
    warmup = exported / "assets.extra" / "tf_serving_warmup_requests"
    logs = [
        prediction_log_pb2.PredictionLog.FromString(record.numpy())
        for record in tf.data.TFRecordDataset(str(warmup))
    ]
    requests = [log.predict_log.request for log in logs]
    assert sorted(r.model_spec.signature_name for r in requests) == sorted(
        ["serving_default", "serving_float", "serving_bytes", "features"]
    )
    assert {r.model_spec.name for r in requests} == {"vit"}

    loaded = tf.saved_model.load(str(exported))
    pooled_model = keras.Model(model.input, model.get_layer("pool").output)
    for request in requests:
        name = request.model_spec.signature_name
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        out = loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
        if name == "serving_bytes":
            pixels = tf.io.decode_png(inputs["image_bytes"][0]).numpy()[None]
        else:
            pixels = inputs["images"]
        assert pixels.shape == (1, SIZE, SIZE, 3), name
        if name == "features":
            expected = pooled_model(normalize(pixels)).numpy()
            np.testing.assert_allclose(out["pooled"], expected, atol=1e-5)
        else:
            logits = model(normalize(pixels)).numpy()
            probabilities = tf.nn.softmax(logits).numpy()
            np.testing.assert_allclose(out["probabilities"], probabilities, atol=1e-5)

    quiet = export(model, tmp_path / "vit" / "1", warmup=False)
    assert not (quiet / "assets.extra" / "tf_serving_warmup_requests").exists()


# The batching example, parsed as TF Serving parses it. ---------------------------

# tensorflow.serving.BatchingParameters, from the public
# tensorflow_serving/servables/tensorflow/session_bundle_config.proto (the
# tensorflow-serving-api package does not ship its Python module).
BATCHING_FIELDS = [
    ("max_batch_size", 1, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, ".google.protobuf.StringValue"),
]


def batching_parameters_class():
    pool = descriptor_pool.DescriptorPool()
    pool.Add(
        descriptor_pb2.FileDescriptorProto.FromString(
            wrappers_pb2.DESCRIPTOR.serialized_pb
        )
    )
    file = descriptor_pb2.FileDescriptorProto(
        name="batching_parameters.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = file.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for name, number, type_name in BATCHING_FIELDS:
        message.field.add(
            name=name,
            number=number,
            type=field.TYPE_MESSAGE,
            type_name=type_name,
            label=field.LABEL_OPTIONAL,
        )
    message.field.add(
        name="allowed_batch_sizes",
        number=6,
        type=field.TYPE_INT64,
        label=field.LABEL_REPEATED,
    )
    message.field.add(
        name="pad_variable_length_inputs",
        number=7,
        type=field.TYPE_BOOL,
        label=field.LABEL_OPTIONAL,
    )
    pool.Add(file)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
    )


def test_batching_parameters_example_parses():
    text = (ROOT / "saved_models" / "batching_parameters.txt").read_text()
    parameters = text_format.Parse(text, batching_parameters_class()())
    assert parameters.max_batch_size.value == 8
    assert parameters.batch_timeout_micros.value == 2000
    assert parameters.num_batch_threads.value >= 1
    assert parameters.max_enqueued_batches.value == parameters.num_batch_threads.value
    assert not parameters.allowed_batch_sizes  # No padding on CPU.
    # The parser is strict: a misspelt field is refused.
    with pytest.raises(text_format.ParseError, match="max_batch_sizes"):
        text_format.Parse("max_batch_sizes { value: 8 }", batching_parameters_class()())
