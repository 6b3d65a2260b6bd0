"""Park & Kim's published models: the post-activation ResNet, the ViT without
query/key/value biases, the `.pth` reader and the CIFAR-100 preprocessing.

The `parkkim_*` fixtures were written once by `scripts/make_parkkim_fixtures.py`
with the authors' own PyTorch code (github.com/xxxnell/how-do-vits-work at
9571ff1) and timm, on random weights: small versions of both architectures
saved as the authors save their checkpoints, the uint8 images, the inputs
the authors' CIFAR-100 evaluation transform makes of them, the logits in
float64, and the feature maps the authors' notebooks analyse. These tests
need only NumPy and the fixtures.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile

import keras
import numpy as np
import pytest
from helpers import assert_config_is_constructor_args

import keras_vit
from keras_vit.analysis import FeatureMaps
from keras_vit.models.variants import custom_spec
from keras_vit.parkkim import authors
from keras_vit.parkkim import pth as torch_file
from keras_vit.parkkim import torch_resnet
from keras_vit.parkkim.cnn import CNNLayout
from keras_vit.parkkim.cnn import CNNVariant
from keras_vit.parkkim.cnn import ResNet
from keras_vit.parkkim.layers.conv_blocks import PaddedMaxPooling2D
from keras_vit.parkkim.layers.conv_blocks import PostActBlock
from keras_vit.weights import CheckpointError
from keras_vit.weights import WeightsNotFoundError
from keras_vit.weights import checks
from keras_vit.weights import to_original_layout

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
BASIC = CNNVariant("basic", (2, 1, 1, 1), widths=(4, 8, 16, 32), stem_width=4)
BOTTLENECK = CNNVariant("bottleneck", (2, 1, 1, 1), widths=(4, 8, 16, 32), stem_width=4)
VIT = custom_spec(2, hidden_dim=32, depth=2, mlp_dim=128, num_heads=2)
TOLERANCE = 1e-5


def fixture(name):
    return os.path.join(FIXTURES, name)


def expected(name):
    return np.load(fixture(f"parkkim_{name}.npz"))


def arch():
    with open(fixture("parkkim_arch.json")) as f:
        return json.load(f)


def basic_model(**kwargs):
    return ResNet(BASIC, num_classes=10, image_size=32, stem="cifar", **kwargs)


def bottleneck_model():
    return ResNet(BOTTLENECK, num_classes=10, image_size=64, stem="imagenet")


def vit_model(**kwargs):
    kwargs.setdefault("qkv_bias", False)
    return keras_vit.ViT(VIT, num_classes=10, image_size=32, **kwargs)


def logits(model, inputs):
    return np.asarray(keras.ops.convert_to_numpy(model(inputs)), np.float64)


def max_pool_reference(x, size=3, stride=2, padding=1):
    """NumPy port of `torch.nn.MaxPool2d(size, stride, padding)` on NHWC maps.

    PyTorch pads with -inf and takes `floor((n + 2p - k) / s) + 1` windows.
    """
    batch, height, width, channels = x.shape
    padded = np.full(
        (batch, height + 2 * padding, width + 2 * padding, channels), -np.inf, x.dtype
    )
    padded[:, padding : padding + height, padding : padding + width] = x
    rows = (height + 2 * padding - size) // stride + 1
    cols = (width + 2 * padding - size) // stride + 1
    out = np.empty((batch, rows, cols, channels), x.dtype)
    for i in range(rows):
        for j in range(cols):
            window = padded[
                :, i * stride : i * stride + size, j * stride : j * stride + size
            ]
            out[:, i, j] = window.max(axis=(1, 2))
    return out


# --------------------------------------------------------------------------
# The .pth reader
# --------------------------------------------------------------------------


def test_reader_reads_the_authors_checkpoint_format():
    saved = torch_file.read_torch_file(fixture("parkkim_resnet_basic.pth.tar"))
    assert sorted(saved) == ["name", "optimizer", "state_dict"]  # models._save
    assert saved["name"] == "resnet_test"
    group = saved["optimizer"]["param_groups"][0]
    assert group["betas"] == (0.9, 0.999) and group["amsgrad"] is False
    state = torch_file.read_state_dict(fixture("parkkim_resnet_basic.pth.tar"))
    assert state["layer0.0.weight"].shape == (4, 3, 3, 3)
    assert state["layer1.0.conv1.1.num_batches_tracked"].dtype == np.int64
    assert all(np.array_equal(state[k], v) for k, v in saved["state_dict"].items())


def test_legacy_and_zip_formats_give_the_same_arrays():
    zipped = torch_file.read_state_dict(fixture("parkkim_resnet_basic.pth.tar"))
    legacy = torch_file.read_state_dict(fixture("parkkim_resnet_basic_legacy.pth.tar"))
    assert list(zipped) == list(legacy)
    for key in zipped:
        assert zipped[key].dtype == legacy[key].dtype
        np.testing.assert_array_equal(zipped[key], legacy[key])


def test_bare_state_dict_and_sniffing():
    state = torch_file.read_state_dict(fixture("parkkim_resnet_bottleneck.pth"))
    assert "layer0.3.weight" not in state  # layer0.3 is the max-pool
    assert state["layer1.0.conv3.0.weight"].shape == (16, 4, 1, 1)
    assert torch_file.is_torch_file(fixture("parkkim_vit.pth.tar"))
    assert torch_file.is_torch_file(fixture("parkkim_resnet_basic_legacy.pth.tar"))
    assert not torch_file.is_torch_file(fixture("timm_vit.safetensors"))
    assert not torch_file.is_torch_file(fixture("parkkim_vit.npz"))


class _Payload:
    def __init__(self, sentinel):
        self.sentinel = sentinel

    def __reduce__(self):
        return os.system, (f"touch {self.sentinel}",)


def _zip_with_pickle(path, payload: bytes):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/version", "3\n")


def _legacy_with_pickle(path, payload: bytes):
    with open(path, "wb") as f:
        for header in (torch_file.LEGACY_MAGIC, torch_file.LEGACY_PROTOCOL, {}):
            pickle.dump(header, f, protocol=2)
        f.write(payload)


@pytest.mark.parametrize("writer", [_zip_with_pickle, _legacy_with_pickle])
def test_a_malicious_pickle_is_refused_without_running(tmp_path, writer):
    sentinel = tmp_path / "ran"
    path = tmp_path / "evil.pth.tar"
    writer(path, pickle.dumps({"state_dict": _Payload(sentinel)}, protocol=2))
    assert torch_file.is_torch_file(path)
    model = basic_model()
    before = [w.numpy().copy() for w in model.weights]
    for read in (
        torch_file.read_torch_file,
        torch_file.read_state_dict,
        lambda p: keras_vit.load_weights(model, p),
        lambda p: keras_vit.load_weights(vit_model(qkv_bias=True), p),
    ):
        with pytest.raises(CheckpointError, match=r"posix\.system|os\.system") as info:
            read(path)
        assert "\n" not in str(info.value)
        assert not sentinel.exists()
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())


@pytest.mark.parametrize(
    "module, name",
    [
        ("builtins", "eval"),
        ("torch._utils", "_rebuild_parameter"),
        ("torch.nn.modules.linear", "Linear"),
        ("numpy.core.multiarray", "_reconstruct"),
    ],
)
def test_only_tensors_storages_and_ordered_dicts_are_allowed(tmp_path, module, name):
    payload = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b")R."
    path = tmp_path / "other.pth"
    _zip_with_pickle(path, payload)
    with pytest.raises(CheckpointError, match=f"{module}.{name}"):
        torch_file.read_torch_file(path)


@pytest.mark.parametrize(
    "name", ["parkkim_resnet_basic.pth.tar", "parkkim_resnet_basic_legacy.pth.tar"]
)
def test_a_truncated_file_is_one_line_and_changes_nothing(tmp_path, name):
    data = open(fixture(name), "rb").read()
    model = basic_model()
    before = [w.numpy().copy() for w in model.weights]
    for cut in (len(data) // 2, len(data) - 100, 200):
        path = tmp_path / name
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError) as info:
            keras_vit.load_weights(model, path)
        assert "\n" not in str(info.value)
        assert "truncated" in str(info.value) or "corrupt" in str(info.value)
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())


def test_a_corrupt_storage_record_is_reported(tmp_path):
    path = tmp_path / "corrupt.pth.tar"
    with zipfile.ZipFile(fixture("parkkim_resnet_basic.pth.tar")) as source:
        with zipfile.ZipFile(path, "w") as target:
            for info in source.infolist():
                data = source.read(info)
                if "/data/" in info.filename:
                    data = data[: len(data) // 2]  # a storage cut short
                target.writestr(info, data)
    with pytest.raises(CheckpointError, match="needs .* bytes"):
        torch_file.read_state_dict(path)


def _with_nan_storage(source, path):
    """`source` with its first storage (the first tensor's) all NaN."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(path, "w") as target:
        for info in original.infolist():
            data = original.read(info)
            if info.filename.endswith("/data/0"):
                data = np.full(len(data) // 4, np.nan, "<f4").tobytes()
            target.writestr(info, data)


@pytest.mark.parametrize(
    "name, build, key",
    [
        ("parkkim_resnet_basic.pth.tar", basic_model, "layer0.0.weight"),
        ("parkkim_vit.pth.tar", vit_model, "cls_token"),
    ],
)
def test_nan_weights_are_refused_by_their_file_key(tmp_path, name, build, key):
    path = tmp_path / name
    _with_nan_storage(fixture(name), path)
    model = build()
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=f"NaN or infinite.*\\n  {key} "):
        keras_vit.load_weights(model, path)
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())


def test_a_file_without_a_state_dict_is_refused(tmp_path):
    path = tmp_path / "list.pth"
    _zip_with_pickle(path, pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(CheckpointError, match="holds no state dict"):
        torch_file.read_state_dict(path)


# Pickle opcodes, written by hand: a state dict {"w": tensor} as torch.save
# pickles it, with instructions a real file never holds.
def _text(value: str) -> bytes:
    return b"X" + struct.pack("<I", len(value)) + value.encode()  # BINUNICODE


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value)  # BININT


def _storage(after=b"") -> bytes:
    """A persistent storage id: FloatStorage "0" of 4 elements."""
    storage = b"ctorch\nFloatStorage\n" + _text("0") + _text("cpu") + _int(4)
    return b"(" + _text("storage") + storage + b"tQ" + after  # MARK TUPLE BINPERSID


def _rebuilt(storage: bytes, offset=0, stride=1, after=b"") -> bytes:
    """`_rebuild_tensor_v2(storage, offset, (4,), (stride,), False, hooks)`."""
    arguments = (
        storage + _int(offset) + _int(4) + b"\x85" + _int(stride) + b"\x85"
        + b"\x89ccollections\nOrderedDict\n)R"
    )  # fmt: skip
    return b"ctorch._utils\n_rebuild_tensor_v2\n(" + arguments + b"tR" + after


def _build(name: str, value: bytes) -> bytes:
    """BUILD with the state `{name: value}` on the object on the stack."""
    return b"}" + _text(name) + value + b"sb"


def _torch_zip(path, tensor: bytes, dict_state=b""):
    """A zip-format file holding `OrderedDict(w=tensor)` and 4 float32s."""
    payload = (
        b"\x80\x02ccollections\nOrderedDict\n)R" + dict_state + _text("w") + tensor
        + b"s."
    )  # fmt: skip
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/data/0", np.arange(4, dtype="<f4").tobytes())
        archive.writestr("archive/version", "3\n")


def test_the_hand_written_pickle_reads_without_the_extra_instructions(tmp_path):
    # The helpers below write a readable file when nothing is added to it.
    path = tmp_path / "plain.pth"
    _torch_zip(path, _rebuilt(_storage()), _build("_metadata", b"}"))
    state = torch_file.read_state_dict(path)
    np.testing.assert_array_equal(state["w"], np.arange(4, dtype="float32"))


@pytest.mark.parametrize(
    "tensor, dict_state, what",
    [
        # The tensor's stride reset to a negative number after its checks:
        # as_strided would have read 400 MB before the storage.
        (_rebuilt(_storage(), after=_build("stride", _int(-100_000_000) + b"\x85")),
         b"", "a tensor"),
        (_rebuilt(_storage(), after=_build("offset", _int(1 << 30))), b"", "a tensor"),
        # The storage's element count or view changed under the tensor.
        (_rebuilt(_storage(after=_build("numel", _int(1 << 30)))), b"", "a storage"),
        (_rebuilt(_storage(after=_build("view", _int(-8)))), b"", "a storage"),
        # A state dict's method replaced: only plain attributes may be set.
        (_rebuilt(_storage()), _build("items", _int(1)), "an OrderedDict (['items']"),
    ],
    ids=["tensor stride", "tensor offset", "storage numel", "storage view",
         "OrderedDict method"],
)  # fmt: skip
def test_a_build_instruction_on_a_record_is_refused(tmp_path, tensor, dict_state, what):
    path = tmp_path / "build.pth"
    _torch_zip(path, tensor, dict_state)
    for read in (torch_file.read_torch_file, torch_file.read_state_dict):
        with pytest.raises(CheckpointError) as info:
            read(path)
        message = str(info.value)
        assert f"asks to set the state of {what}" in message
        assert "(a pickle BUILD instruction)" in message
        assert "\n" not in message


@pytest.mark.parametrize(
    "offset, stride, message",
    [
        (0, -1, r"tensor 'w' has offset 0, size \(4,\) and stride \(-1,\)"),
        (-2, 1, r"tensor 'w' has offset -2"),
        (1, 1, r"'w' of size \(4,\), stride \(1,\) and offset 1 reads elements 1 to 4"),
        (100, 1, r"reads elements 100 to 103 of a storage of 4 elements"),
        (0, 2, r"reads elements 0 to 6 of a storage of 4 elements"),
    ],
)
def test_a_tensor_outside_its_storage_is_refused(tmp_path, offset, stride, message):
    path = tmp_path / "outside.pth"
    _torch_zip(path, _rebuilt(_storage(), offset=offset, stride=stride))
    with pytest.raises(CheckpointError, match=message) as info:
        torch_file.read_state_dict(path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "offset, size, stride",
    [(0, (4,), (-1,)), (-1, (2,), (1,)), (4, (1,), (0,)), (0, (2, 2), (1,))],
)
def test_the_layout_is_checked_where_the_storage_is_read(offset, size, stride):
    # A record made past the unpickler is still never read outside its
    # storage.
    storage = torch_file._StorageRef("0", np.dtype("<f4"), 4)
    ref = torch_file._TensorRef(storage, offset, size, stride)
    base = np.arange(4, dtype="<f4")
    with pytest.raises(CheckpointError, match="tensor 'w' .*corrupt"):
        torch_file._tensor(ref, base, "made.pth", "w")


def _number(value: int) -> bytes:
    if -(1 << 31) <= value < 1 << 31:
        return _int(value)
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def _view(size, stride, offset=0) -> bytes:
    """A tensor of any layout on the storage "0" (4 float32s)."""
    arguments = (
        _storage() + _number(offset)
        + b"(" + b"".join(map(_number, size)) + b"t"
        + b"(" + b"".join(map(_number, stride)) + b"t"
        + b"\x89ccollections\nOrderedDict\n)R"
    )  # fmt: skip
    return b"ctorch._utils\n_rebuild_tensor_v2\n(" + arguments + b"tR"


def _torch_zip_of(path, tensors: dict[str, bytes], under: str | None = None):
    """A zip-format file of `OrderedDict(tensors)`, optionally as `{under: it}`."""
    items = b"".join(_text(name) + tensor for name, tensor in tensors.items())
    state = b"ccollections\nOrderedDict\n)R(" + items + b"u"  # MARK ... SETITEMS
    if under is not None:
        state = b"}" + _text(under) + state + b"s"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02" + state + b".")
        archive.writestr("archive/data/0", np.arange(4, dtype="<f4").tobytes())
        archive.writestr("archive/version", "3\n")


@pytest.mark.parametrize(
    "size, stride, message",
    [
        # A 1.6 KB file that asked for 3.64 TiB.
        ((10**12,), (0,), r"'w' of size \(1000000000000,\), stride \(0,\) and "
         r"offset 0 repeats the elements of a storage of 4 elements into "
         r"1000000000000 \(4000000000000 bytes\), past the 64 MiB"),
        ((10**8,), (0,), r"'w' .* into 100000000 \(400000000 bytes\), past the 64 MiB"),
        ((4, 10**7), (1, 0), r"'w' .*into 40000000 \(160000000 bytes\)"),
        ((-1,), (1,), r"tensor 'w' has offset 0, size \(-1,\) and stride \(1,\)"),
        ((1 << 63,), (0,), r"tensor 'w' has offset 0, size \(9223372036854775808,\)"),
        ((1,), (1 << 64,), r"tensor 'w' has .* stride \(18446744073709551616,\)"),
        ((0, 1 << 62), (1, 1), r"'w' of size \(0, 4611686018427387904\).* is not an "
         r"array NumPy can hold"),
        ((1,) * 65, (1,) * 65, r"'w' of size \(1, 1, .* not an array NumPy can hold"),
    ],
    ids=["3.64 TiB", "400 MB", "160 MB", "negative size", "int64 size",
         "int64 stride", "too big if empty", "65 dimensions"],
)  # fmt: skip
def test_a_view_past_what_its_storage_holds_is_refused(tmp_path, size, stride, message):
    path = tmp_path / "view.pth"
    _torch_zip_of(path, {"w": _view(size, stride)})
    assert path.stat().st_size < 2000
    for read in (torch_file.read_torch_file, torch_file.read_state_dict):
        with pytest.raises(CheckpointError, match=message) as info:
            read(path)
        assert "\n" not in str(info.value) and "corrupt" in str(info.value)
    model = vit_model()
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=message):
        keras_vit.load_weights(model, path)
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())


def test_a_refused_view_is_named_by_its_keys_from_the_top(tmp_path):
    path = tmp_path / "nested.pth"
    _torch_zip_of(path, {"ok": _view((4,), (1,)), "w": _view((10**9,), (0,))}, "model")
    with pytest.raises(CheckpointError, match=r"tensor 'model/w' of size"):
        torch_file.read_torch_file(path)
    with pytest.raises(CheckpointError, match=r"tensor 'w' of size"):
        torch_file.read_state_dict(path, key="model")


@pytest.mark.parametrize(
    "size, stride, expected",
    [
        # `torch.arange(4).expand(1, -1)`, as transformers' `position_ids`.
        ((1, 4), (0, 1), [[0, 1, 2, 3]]),
        ((3, 2), (0, 1), [[0, 1]] * 3),  # a small broadcast
        ((2, 2), (1, 2), [[0, 2], [1, 3]]),  # a transposed view
        ((3,), (1,), [0, 1, 2]),
        ((1, 2), (1 << 62, 2), [[0, 2]]),  # a size-1 dimension, any stride
        ((0, 5), (5, 1), np.zeros((0, 5))),
    ],
)
def test_views_that_torch_save_writes_read_as_their_elements(
    tmp_path, size, stride, expected
):
    path = tmp_path / "views.pth"
    _torch_zip_of(path, {"w": _view(size, stride)})
    state = torch_file.read_state_dict(path)
    np.testing.assert_array_equal(state["w"], np.asarray(expected, "float32"))
    assert state["w"].shape == size and state["w"].flags.writeable


def test_repeating_views_share_one_allowance_per_file(tmp_path):
    # 16 MiB each: four fit in the 64 MiB a file's repeating views may hold,
    # five do not; the allowance is the file's, not the process's.
    view = _view((4, 1 << 20), (1, 0))
    fits, beyond = tmp_path / "four.pth", tmp_path / "five.pth"
    _torch_zip_of(fits, {f"w{i}": view for i in range(4)})
    _torch_zip_of(beyond, {f"w{i}": view for i in range(5)})
    for _ in range(2):
        state = torch_file.read_state_dict(fits)
        assert len(state) == 4 and state["w3"].shape == (4, 1 << 20)
        np.testing.assert_array_equal(state["w3"][:, -1], [0, 1, 2, 3])
    with pytest.raises(CheckpointError, match=r"tensor 'w4' .* past the 64 MiB"):
        torch_file.read_state_dict(beyond)


# --------------------------------------------------------------------------
# The post-activation ResNet against the authors' code
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, build, file",
    [
        ("resnet_basic", basic_model, "parkkim_resnet_basic.pth.tar"),
        ("resnet_basic", basic_model, "parkkim_resnet_basic_legacy.pth.tar"),
        ("resnet_bottleneck", bottleneck_model, "parkkim_resnet_bottleneck.pth"),
    ],
)
def test_resnet_gives_the_authors_logits(name, build, file):
    model = build()
    assert keras_vit.load_weights(model, fixture(file)) == []
    want = expected(name)
    np.testing.assert_allclose(
        logits(model, want["inputs"]), want["logits"], atol=TOLERANCE, rtol=0
    )


@pytest.mark.parametrize(
    "name, build, file",
    [
        ("resnet_basic", basic_model, "parkkim_resnet_basic.pth.tar"),
        ("resnet_bottleneck", bottleneck_model, "parkkim_resnet_bottleneck.pth"),
    ],
)
def test_resnet_maps_are_the_authors_blocks(name, build, file):
    # The authors' notebooks analyse `layer0` and every block of layer1-4.
    model = build()
    keras_vit.load_weights(model, fixture(file))
    want = expected(name)
    maps = FeatureMaps.of(model)
    assert maps.labels[0] == "stem" and set(maps.kinds[1:]) == {"conv"}
    found = dict(maps.iter_maps(want["inputs"][:1]))
    assert len(found) == len([k for k in want.files if k.startswith("map_")])
    for index, value in found.items():
        reference = want[f"map_{index}"]
        scale = np.abs(reference).max()
        # float32 against float64: 1e-5 of the map's scale
        np.testing.assert_allclose(value, reference, atol=1e-5 * max(scale, 1), rtol=0)


def test_preprocessing_is_the_authors_evaluation_transform():
    want = expected("resnet_basic")
    np.testing.assert_array_equal(authors.preprocess(want["images"]), want["inputs"])
    layer = authors.preprocessing_layer()
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layer(want["images"].astype("float32"))),
        want["inputs"],
        atol=1e-6,
    )
    model = basic_model()
    keras_vit.load_weights(model, fixture("parkkim_resnet_basic.pth.tar"))
    out = logits(model, authors.preprocess(want["images"]))
    np.testing.assert_allclose(out, want["logits"], atol=TOLERANCE, rtol=0)
    assert arch()["cifar100_mean"] == list(authors.CIFAR100_MEAN)
    assert arch()["cifar100_std"] == list(authors.CIFAR100_STD)


@pytest.mark.parametrize(
    "key, stem, classes, size",
    [
        ("resnet_50", "cifar", 100, 32),
        ("resnet_18", "cifar", 100, 32),
        ("resnet_50_imagenet", "imagenet", 1000, 224),
    ],
)
def test_full_size_resnets_have_the_authors_keys_and_shapes(key, stem, classes, size):
    reference = arch()[key]
    variant = key.split("_")[1]
    with keras.StatelessScope(initialize_variables=False):
        model = ResNet(variant, num_classes=classes, image_size=size, stem=stem)
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        assert trainable == reference["params"]
        state = {
            k: np.broadcast_to(np.float32(0), shape)
            for k, shape in reference["state_dict"].items()
        }
        plan = torch_resnet.plan_torch_resnet(model, state)  # raises on any misfit
    assert len(plan.values) == len(model.weights)


def test_authors_resnet50_is_the_cifar_resnet50():
    with keras.StatelessScope(initialize_variables=False):
        model = authors.authors_model("resnet_50")
        assert model.name == "resnet_50_cifar100"
        assert model.input_shape == (None, 32, 32, 3)
        assert model.output_shape == (None, 100)
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == arch()["resnet_50"]["params"] == 23_705_252


def test_loading_checks_every_key_before_assigning():
    model = ResNet(BASIC, num_classes=7, image_size=32, stem="cifar")
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=r"head/kernel: checkpoint \(32, 10\)"):
        keras_vit.load_weights(model, fixture("parkkim_resnet_basic.pth.tar"))
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())
    deeper = ResNet(
        CNNVariant("basic", (2, 2, 1, 1), widths=(4, 8, 16, 32), stem_width=4),
        num_classes=10,
        image_size=32,
        stem="cifar",
    )
    with pytest.raises(CheckpointError, match="Missing keys:\n  stage2_block2/"):
        keras_vit.load_weights(deeper, fixture("parkkim_resnet_basic.pth.tar"))
    imagenet = ResNet(BASIC, num_classes=10, image_size=32, stem="imagenet")
    with pytest.raises(
        CheckpointError, match=r"checkpoint \(3, 3, 3, 4\) vs model \(7, 7"
    ):
        keras_vit.load_weights(imagenet, fixture("parkkim_resnet_basic.pth.tar"))


def test_the_authors_keys_are_a_dialect_of_the_one_rule_engine():
    assert torch_resnet.DIALECT.rules is torch_resnet.RULES
    assert torch_resnet.variable_path("layer0.0.weight") == "stem_conv/kernel"
    assert torch_resnet.variable_path("layer0.1.running_var") == (
        "stem_norm/moving_variance"
    )
    assert torch_resnet.variable_path("layer3.0.shortcut.1.weight") == (
        "stage3_block1/shortcut_norm/gamma"
    )
    assert torch_resnet.variable_path("layer2.10.conv3.0.weight") == (
        "stage2_block11/conv_3/kernel"
    )
    assert torch_resnet.variable_path("classifier.0.dense.bias") == "head/bias"
    assert torch_resnet.variable_path("layer1.0.conv1.1.num_batches_tracked") is None
    assert torch_resnet.variable_path("layer1.0.conv4.0.weight") is None
    state = torch_file.read_state_dict(fixture("parkkim_resnet_basic.pth.tar"))
    assert torch_resnet.DIALECT.recognizes(state)


def test_every_misfit_is_named_and_nothing_changes():
    model = basic_model()
    state = dict(torch_file.read_state_dict(fixture("parkkim_resnet_basic.pth.tar")))
    before = [w.numpy().copy() for w in model.weights]
    cases = [
        # A key no rule knows, with its shape.
        ({"layer1.0.conv9.0.weight": np.zeros((4, 4, 3, 3), "float32")},
         r"Unexpected keys:\n  layer1\.0\.conv9\.0\.weight \(4, 4, 3, 3\)"),
        # A known key for a block the model does not have.
        ({"layer2.1.conv1.0.weight": np.zeros((8, 8, 3, 3), "float32")},
         r"layer2\.1\.conv1\.0\.weight -> stage2_block2/conv_1/kernel \(the "
         r"model has no such variable\)"),
        # A kernel of another rank is mis-shaped, not a crash.
        ({"layer0.0.weight": np.zeros((4, 27), "float32")},
         r"layer0\.0\.weight -> stem_conv/kernel: checkpoint \(4, 27\) vs model "
         r"\(3, 3, 3, 4\)"),
    ]  # fmt: skip
    for change, message in cases:
        with pytest.raises(CheckpointError, match=message):
            keras_vit.load_weights(model, {**state, **change})
    with pytest.raises(CheckpointError, match="'layer0.0.weight' has dtype int32"):
        torch_resnet.load_torch_resnet(
            model, {**state, "layer0.0.weight": np.zeros((4, 3, 3, 3), "int32")}
        )
    missing = {k: v for k, v in state.items() if not k.startswith("layer4.")}
    with pytest.raises(CheckpointError) as info:
        keras_vit.load_weights(model, missing)
    assert info.value.missing[0].startswith("stage4_block1/")
    for value, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(value, weight.numpy())


def test_headless_resnet_drops_the_head_and_gives_the_features():
    model = ResNet(BASIC, include_top=False, image_size=32, stem="cifar")
    notes = keras_vit.load_weights(model, fixture("parkkim_resnet_basic.pth.tar"))
    assert notes == ["The model has no head: the checkpoint's head is dropped."]
    want = expected("resnet_basic")
    pooled = logits(model, want["inputs"][:1])
    np.testing.assert_allclose(
        pooled[0], want["map_5"][0].mean(axis=(0, 1)), atol=1e-5, rtol=1e-5
    )


def test_pytorch_state_dicts_load_into_the_post_activation_resnet_only():
    for model in (
        keras_vit.PreActResNet(BASIC, num_classes=10, image_size=32, stem="cifar"),
        keras_vit.AlterNet("test", num_classes=10, image_size=16),
    ):
        with pytest.raises(CheckpointError, match="not a post-activation ResNet"):
            keras_vit.load_weights(model, fixture("parkkim_resnet_basic.pth.tar"))
    with pytest.raises(CheckpointError, match="is not a PyTorch file"):
        keras_vit.load_weights(basic_model(), fixture("parkkim_vit.npz"))


def test_resnet_layout_and_features():
    model = basic_model()
    layout = CNNLayout.of(model)
    assert layout.block_names == (
        "stage1_block1",
        "stage1_block2",
        "stage2_block1",
        "stage3_block1",
        "stage4_block1",
    )
    assert layout.final.name == "stage4_block1"  # post-activation: no head_relu
    assert not layout.has("head_relu") and layout.has("stem_norm")
    features = keras_vit.feature_extractor(model, blocks=[0])
    out = features(np.ones((1, 32, 32, 3), "float32"))
    assert set(out) == {"pooled", "features", "block_0"}
    assert out["features"].shape == (1, 4, 4, 32)
    assert float(keras.ops.min(out["features"])) >= 0.0  # after the last ReLU


@pytest.mark.parametrize(
    "layer",
    [PostActBlock(4, 2, True, 0.1), PostActBlock(3), PaddedMaxPooling2D(3, 2, 0)],
    ids=lambda layer: type(layer).__name__,
)
def test_new_layers_config_is_their_arguments(layer):
    assert_config_is_constructor_args(layer)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(layer)
    )
    assert type(restored) is type(layer)
    assert restored.get_config() == layer.get_config()


def test_resnet_round_trips_through_keras_files(tmp_path):
    model = basic_model()
    keras_vit.load_weights(model, fixture("parkkim_resnet_basic.pth.tar"))
    path = tmp_path / "resnet.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    inputs = expected("resnet_basic")["inputs"]
    np.testing.assert_array_equal(logits(loaded, inputs), logits(model, inputs))


def test_resnet_arguments():
    with pytest.raises(ValueError, match="Unknown ResNet variant"):
        ResNet("77")
    with pytest.raises(ValueError, match="MSA blocks"):
        ResNet(keras_vit.ALTERNETS["test"], image_size=16)
    with pytest.raises(ValueError, match="multiple of the total stride"):
        ResNet("test", image_size=31)
    with pytest.raises(ValueError, match="filters"):
        PostActBlock(0)


# --------------------------------------------------------------------------
# The ImageNet stem's max-pool: PyTorch's padding
# --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 16, 16, 3), (1, 15, 17, 2), (1, 112, 112, 4)])
def test_stem_pool_is_torch_max_pool(shape):
    x = np.random.default_rng(0).normal(size=shape).astype("float32") - 1.0
    layer = PaddedMaxPooling2D(3, 2, 1)
    out = keras.ops.convert_to_numpy(layer(x))
    want = max_pool_reference(x)
    assert out.shape == want.shape == layer.compute_output_shape(shape)
    np.testing.assert_array_equal(out, want)  # every output, negative maps included


def test_stem_pool_matches_torch_and_the_built_stems():
    want = expected("resnet_bottleneck")
    out = PaddedMaxPooling2D(3, 2, 1)(want["pool_input"].astype("float32"))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(out), want["pool_output"].astype("float32")
    )
    x = np.random.default_rng(1).normal(size=(1, 64, 64, 3)).astype("float32")
    for model in (
        keras_vit.PreActResNet("test", image_size=64, stem="imagenet"),
        keras_vit.AlterNet("test", image_size=128, stem="imagenet"),
        ResNet("test", image_size=64, stem="imagenet"),
    ):
        size = model.input_shape[1]
        x = np.random.default_rng(1).normal(size=(1, size, size, 3)).astype("float32")
        pool = model.get_layer("stem_pool")
        stem = keras.Model(model.input, [pool.input, pool.output])
        before, after = (keras.ops.convert_to_numpy(t) for t in stem(x))
        np.testing.assert_array_equal(after, max_pool_reference(before))


def test_stem_pool_gradient_never_reaches_the_padding():
    x = keras.ops.convert_to_tensor(
        np.random.default_rng(2).normal(size=(1, 8, 8, 1)).astype("float32") - 5.0
    )
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(x)
        total = keras.ops.sum(PaddedMaxPooling2D()(x))
    grad = tape.gradient(total, x).numpy()
    assert np.isfinite(grad).all()
    assert grad.sum() == 16  # one unit per output window, all on real pixels


def test_paper_parameter_counts_are_unchanged():
    with keras.StatelessScope(initialize_variables=False):
        counts = [
            keras_vit.PreActResNet("50").count_params(),
            keras_vit.AlterNet("50").count_params(),
        ]
    # Trainable + BatchNorm statistics; the torch dnn_50 counts
    # (25,549,352 and 35,915,038) are the trainable parts.
    with keras.StatelessScope(initialize_variables=False):
        trainable = [
            sum(int(np.prod(w.shape)) for w in m.trainable_weights)
            for m in (keras_vit.PreActResNet("50"), keras_vit.AlterNet("50"))
        ]
    assert trainable == [25_549_352, 35_915_038]
    assert all(c > t for c, t in zip(counts, trainable, strict=True))
    with pytest.raises(ValueError, match="padding"):
        PaddedMaxPooling2D(3, 2, 2)


# --------------------------------------------------------------------------
# The ViT without query/key/value biases against timm
# (needs `qkv_bias` in keras_vit.layers.attention)
# --------------------------------------------------------------------------


def test_vit_without_qkv_bias_gives_timm_logits():
    model = vit_model()
    assert keras_vit.load_weights(model, fixture("parkkim_vit.pth.tar")) == []
    want = expected("vit")
    np.testing.assert_allclose(
        logits(model, want["inputs"]), want["logits"], atol=TOLERANCE, rtol=0
    )
    out = logits(model, authors.preprocess(want["images"]))
    np.testing.assert_allclose(out, want["logits"], atol=TOLERANCE, rtol=0)


def test_vit_maps_are_the_authors_blocks():
    model = vit_model()
    keras_vit.load_weights(model, fixture("parkkim_vit.pth.tar"))
    want = expected("vit")
    maps = FeatureMaps.of(model)
    assert maps.labels[:3] == ("embedding", "msa_0", "mlp_0")
    for index, value in maps.iter_maps(want["inputs"][:1]):
        reference = want[f"map_{index}"].reshape(value.shape)  # (1, 16, 16, D)
        np.testing.assert_allclose(value, reference, atol=1e-5, rtol=1e-5)


def test_a_qkv_bias_mismatch_says_which_to_build():
    with pytest.raises(CheckpointError, match="build it with `qkv_bias=False`"):
        keras_vit.load_weights(vit_model(qkv_bias=True), fixture("parkkim_vit.pth.tar"))
    with pytest.raises(CheckpointError, match="build it with `qkv_bias=True`"):
        keras_vit.load_weights(
            keras_vit.ViT("test/8", num_classes=10, image_size=32, qkv_bias=False),
            fixture("timm_vit.safetensors"),
        )


def test_full_size_vit_ti_has_the_authors_keys_and_shapes():
    reference = arch()["vit_ti"]
    with keras.StatelessScope(initialize_variables=False):
        model = authors.authors_model("vit_ti")
        trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
        assert trainable == reference["params"] == 5_403_172
        state = {
            k: np.zeros(shape, np.float32)
            for k, shape in reference["state_dict"].items()
        }
        params = to_original_layout(state, 3)
        plan = checks.plan_load(model, params)  # raises on any misfit
    assert plan.notes == []
    assert model.name == "vit_ti_cifar100" and model.output_shape == (None, 100)


# --------------------------------------------------------------------------
# authors_model and the published files
# --------------------------------------------------------------------------


def test_authors_models_name_the_published_files():
    assert authors.AUTHORS_MODELS["resnet_50"].url == (
        "https://github.com/xxxnell/how-do-vits-work-storage/releases/download/"
        "v0.1/resnet_50_cifar100_691cc9a9e4.pth.tar"
    )
    assert authors.AUTHORS_MODELS["vit_ti"].url == (
        "https://github.com/xxxnell/how-do-vits-work-storage/releases/download/"
        "v0.1/vit_ti_cifar100_9857b21357.pth.tar"
    )
    with pytest.raises(ValueError, match="Unknown Park & Kim model"):
        authors.authors_model("resnet_18")


def test_published_file_offline_is_one_line(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(keras.utils, "get_file", offline)
    with pytest.raises(WeightsNotFoundError) as info:
        authors.checkpoint_path("vit_ti", cache_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert authors.AUTHORS_MODELS["vit_ti"].url in message
    cached = tmp_path / "keras_vit" / "vit_ti_cifar100_9857b21357.pth.tar"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"cached")
    assert authors.checkpoint_path("vit_ti", cache_dir=tmp_path) == str(cached)
