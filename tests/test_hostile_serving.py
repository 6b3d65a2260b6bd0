"""The served `serving_bytes` signature against image bombs and bad headers.

A tiny random ViT is exported once; a fresh Python process that never
imports keras_vit loads the SavedModel and sends it every request below,
measuring the process's peak memory (VmHWM, reset before each request)
around each one. Bombs are small files of a valid format whose header
claims a huge size (PNG of zlib-compressed zero rows, GIF of LZW-coded
zeros, one-colour lossless WebP, JPEG and WebP headers over a few bytes):
each must be refused before it is decoded, in one request, the server
serving the next. Ordinary images of every format must be answered as
before: as `tf.io.decode_image`, a bilinear resize and the model give.
"""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit.export import export

IMAGE_SIZE = 16
NUM_CLASSES = 3
PILLOW_LIMIT = 89_478_485  # PIL.Image.MAX_IMAGE_PIXELS
LIMIT_TEXT = f"over the limit of {PILLOW_LIMIT} pixels (max_pixels)"
# The most a refused request may add to the serving process's peak memory.
# Decoding the smallest bomb here would add 270 MB; the 20000 x 20000 PNG
# adds 1.1 GB.
REFUSAL_MB = 64
# Extra address space the serving process may take: a bomb that is decoded
# by mistake fails to allocate instead of taking the machine's memory.
HEADROOM_BYTES = 6 << 30


# Encoded images ---------------------------------------------------------------


def _pil(array: np.ndarray, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_bomb(width: int, height: int) -> bytes:
    """A valid 8-bit grayscale PNG of zero rows (zlib: about 1000 to 1)."""
    compressor = zlib.compressobj(9)
    rows_at_once = max(1, (1 << 24) // (width + 1))
    parts, left = [], height
    while left:
        count = min(rows_at_once, left)
        parts.append(compressor.compress(bytes((width + 1) * count)))
        left -= count
    parts.append(compressor.flush())
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", header)
        + _png_chunk(b"IDAT", b"".join(parts))
        + _png_chunk(b"IEND", b"")
    )


def lzw_zeros(count: int, min_code_size: int = 2) -> bytes:
    """GIF LZW data of `count` zero pixels, by the reference encoder's rules
    (GIFENCOD: codes widen when the next free code passes the widest, a
    clear code when the table is full), runs of zeros growing by one."""
    clear = 1 << min_code_size
    init_bits = min_code_size + 1
    out, state = bytearray(), {"acc": 0, "bits": 0}
    n_bits, max_code, free, clearing = init_bits, (1 << init_bits) - 1, clear + 2, False

    def output(code):
        nonlocal n_bits, max_code, clearing
        state["acc"] |= code << state["bits"]
        state["bits"] += n_bits
        while state["bits"] >= 8:
            out.append(state["acc"] & 0xFF)
            state["acc"] >>= 8
            state["bits"] -= 8
        if clearing:
            n_bits, max_code, clearing = init_bits, (1 << init_bits) - 1, False
        elif free > max_code:
            n_bits += 1
            max_code = 4096 if n_bits == 12 else (1 << n_bits) - 1

    def code_of(run):  # Since the last clear, runs of 2, 3, ... are clear+2, ...
        return 0 if run == 1 else clear + run

    output(clear)
    run, longest, left = 1, 1, count - 1
    while left:
        step = min(longest - run, left)  # Extend while the table has the run.
        run, left = run + step, left - step
        if not left:
            break
        output(code_of(run))
        if free < 4096:
            free, longest = free + 1, run + 1
        else:
            free, longest, clearing = clear + 2, 1, True
            output(clear)
        run, left = 1, left - 1
    output(code_of(run))
    output(clear + 1)  # End of information.
    if state["bits"]:
        out.append(state["acc"] & 0xFF)
    return bytes(out)


def _sub_blocks(data: bytes) -> bytes:
    blocks = [data[i : i + 255] for i in range(0, len(data), 255)]
    return b"".join(bytes([len(b)]) + b for b in blocks) + b"\x00"


def gif_of_zeros(frames, screen=None) -> bytes:
    """A GIF (two-colour table) whose frames, `(width, height)` each, hold
    only zero pixels; `screen` defaults to the first frame's size."""
    width, height = screen or frames[0]
    parts = [b"GIF89a", struct.pack("<HHBBB", width, height, 0x80, 0, 0)]
    parts.append(b"\x00\x00\x00\xff\xff\xff")
    for w, h in frames:
        parts.append(b"," + struct.pack("<HHHHB", 0, 0, w, h, 0) + b"\x02")
        parts.append(_sub_blocks(lzw_zeros(w * h)))
    return b"".join(parts) + b";"


def jpeg_claiming(width: int, height: int) -> bytes:
    """A small JPEG whose frame header is patched to claim `width x height`."""
    data = bytearray(tf.io.encode_jpeg(np.full((16, 16, 1), 90, np.uint8)).numpy())
    start = data.index(b"\xff\xc0")  # Baseline start of frame: P, Y, X.
    data[start + 5 : start + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def exif_block() -> bytes:
    """A valid EXIF block (one description tag), as Pillow writes it."""
    exif = Image.Exif()
    exif[0x010E] = "served"  # ImageDescription
    return exif.tobytes()


def webp_lossless_of_one_colour(width: int, height: int, exif: bool = False):
    """A lossless WebP of one colour (a few dozen bytes whatever its size:
    every pixel costs no bits), its `VP8L` (and `VP8X`) size patched."""
    options = {"lossless": True}
    if exif:  # An extended file: "VP8X" first, then "VP8L".
        options["exif"] = exif_block()
    data = bytearray(
        _pil(np.full((16, 16, 3), (200, 30, 60), np.uint8), "WEBP", **options)
    )
    at = data.index(b"VP8L") + 8
    assert data[at] == 0x2F, "not a VP8L bitstream"
    bits = int.from_bytes(data[at + 1 : at + 5], "little") & ~((1 << 28) - 1)
    bits |= (width - 1) | ((height - 1) << 14)
    data[at + 1 : at + 5] = bits.to_bytes(4, "little")
    if exif:
        data[24:30] = (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(
            3, "little"
        )
    return bytes(data)


def webp_lossy_claiming(width: int, height: int) -> bytes:
    """A lossy WebP whose `VP8 ` frame header is patched to claim a size."""
    data = bytearray(_pil(np.full((16, 16, 3), 128, np.uint8), "WEBP", quality=50))
    assert data[12:16] == b"VP8 " and data[23:26] == b"\x9d\x01\x2a"
    data[26:30] = struct.pack("<HH", width, height)
    return bytes(data)


def bmp_claiming(width: int, height: int) -> bytes:
    """A small BMP whose info header claims `width x height`."""
    data = bytearray(_pil(np.zeros((4, 4, 3), np.uint8), "BMP"))
    data[18:26] = struct.pack("<ii", width, height)
    return bytes(data)


def valid_images() -> dict[str, bytes]:
    """One small valid image of every kind `serving_bytes` serves."""
    rng = np.random.default_rng(1)
    rgb = rng.integers(0, 256, (37, 29, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (12, 40), dtype=np.uint8)
    rgba = rng.integers(0, 256, (20, 20, 4), dtype=np.uint8)
    frames = [Image.fromarray(rgb), Image.fromarray(rgb[::-1].copy())]
    frames.append(Image.fromarray(np.where(rgb > 128, rgb, 0).astype(np.uint8)))
    animated = io.BytesIO()  # Pillow crops later frames to what changed.
    frames[0].save(animated, "GIF", save_all=True, append_images=frames[1:])
    commented = io.BytesIO()
    frames[0].save(commented, "GIF", comment=b"a comment block")
    exif = exif_block()
    return {
        "jpeg": tf.io.encode_jpeg(rgb, quality=90).numpy(),
        "jpeg gray": _pil(gray, "JPEG"),
        "jpeg progressive": _pil(rgb, "JPEG", progressive=True),
        "jpeg exif": _pil(rgb, "JPEG", exif=exif),
        "png": _pil(rgb, "PNG"),
        "png gray": _pil(gray, "PNG"),
        "png rgba": _pil(rgba, "PNG"),
        "png 16-bit": _pil((gray.astype(np.uint16) * 257), "PNG"),
        "png palette": _pil(np.asarray(frames[0].quantize(16)), "PNG"),
        "gif": _pil(rgb, "GIF"),
        "gif animated": animated.getvalue(),
        "gif comment": commented.getvalue(),
        "bmp": _pil(rgb, "BMP"),
        "webp": _pil(rgb, "WEBP", quality=80),
        "webp lossless": _pil(rgb, "WEBP", lossless=True),
        "webp extended": _pil(rgb, "WEBP", quality=80, exif=exif),
    }


# Refused before decoding: bytes, and what the message names.
BOMBS = {
    "png 20000x20000": (
        lambda: png_bomb(20000, 20000),
        "(a 20000x20000 PNG) has 400000000 pixels",
    ),
    "gif 20000x20000": (
        lambda: gif_of_zeros([(20000, 20000)]),
        "(a 20000x20000 GIF) has 400000000 pixels",
    ),
    "gif of 10 frames of 3000x3000": (
        lambda: gif_of_zeros([(3000, 3000)] * 10, screen=(100, 100)),
        "(a 100x100 GIF) has 90000000 pixels in all its frames",
    ),
    "gif canvas of 60000x60000": (
        lambda: gif_of_zeros([(60000, 1), (1, 60000)], screen=(10, 10)),
        "(a 10x10 GIF) has more than 1073741824 pixels in all its frames",
    ),
    "jpeg header 65500x65500": (
        lambda: jpeg_claiming(65500, 65500),
        "(a 65500x65500 JPEG) has more than 1073741824 pixels",
    ),
    "webp lossless 16384x16384": (
        lambda: webp_lossless_of_one_colour(16384, 16384),
        "(a 16384x16384 WebP) has 268435456 pixels",
    ),
    "webp extended 16384x16384": (
        lambda: webp_lossless_of_one_colour(16384, 16384, exif=True),
        "(a 16384x16384 WebP) has 268435456 pixels",
    ),
    "webp lossy header 16383x16383": (
        lambda: webp_lossy_claiming(16383, 16383),
        "(a 16383x16383 WebP) has 268402689 pixels",
    ),
    "bmp header 20000x20000": (
        lambda: bmp_claiming(20000, -20000),
        "(a 20000x20000 BMP) has 400000000 pixels",
    ),
}


def damaged_images() -> dict[str, tuple[bytes, str]]:
    """Bytes that must fail their request alone, and what the error says."""
    valid = valid_images()
    png_text_first = (
        valid["png"][:8] + _png_chunk(b"tEXt", b"Comment\x00first") + valid["png"][8:]
    )
    riff = b"RIFF" + struct.pack("<I", 24) + b"WEBP"
    return {
        "png cut in its header": (valid["png"][:20], "truncated or damaged PNG header"),
        "png without IHDR first": (png_text_first, "truncated or damaged PNG header"),
        "gif cut in its screen": (valid["gif"][:10], "truncated or damaged GIF header"),
        "gif cut in its data": (valid["gif"][:200], "GIF"),
        "bmp cut in its header": (valid["bmp"][:20], "truncated or damaged BMP header"),
        "webp of an unknown chunk": (
            riff + b"ABCD" + bytes(20),
            "truncated or damaged WebP header",
        ),
        "webp cut in its header": (
            valid["webp"][:24],
            "truncated or damaged WebP header",
        ),
        "jpeg cut in its header": (valid["jpeg"][:100], "Invalid JPEG data"),
        "jpeg xl codestream": (b"\xff\x0a" + bytes(30), "is a JPEG XL image"),
        "jpeg xl container": (
            b"\x00\x00\x00\x0cJXL \r\n\x87\n" + bytes(30),
            "is a JPEG XL image",
        ),
        "not an image": (b"this is not an image", "Unknown image file format"),
        "empty": (b"", "empty"),
    }


def truncations() -> dict[str, bytes]:
    """Every valid image cut at offsets in and after its header."""
    cuts = (1, 2, 3, 4, 6, 8, 10, 12, 13, 16, 20, 22, 24, 26, 28, 30, 32, 40)
    return {
        f"{kind}[:{cut}]": data[:cut]
        for kind, data in valid_images().items()
        for cut in (*cuts, len(data) // 2, len(data) - 1)
        if cut < len(data)
    }


# The serving process ----------------------------------------------------------

SERVE_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import tensorflow as tf

    model_dir, requests_file, out_file, headroom = sys.argv[1:5]
    requests = json.load(open(requests_file))

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024  # kB -> bytes

    served = tf.saved_model.load(model_dir).signatures["serving_bytes"]
    limit = status("VmSize") + int(headroom)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    results = []
    for request in requests:
        batch = [open(path, "rb").read() for path in request["files"]]
        try:  # Peak memory since here (Linux >= 4.0).
            open("/proc/self/clear_refs", "w").write("5")
        except OSError:
            pass
        before, start = status("VmRSS"), time.perf_counter()
        result = {"name": request["name"]}
        try:
            out = served(image_bytes=tf.constant(batch, dtype=tf.string))
            result["probabilities"] = out["probabilities"].numpy().tolist()
        except tf.errors.OpError as error:
            result["error"] = type(error).__name__ + ": " + error.message
        result["seconds"] = time.perf_counter() - start
        result["peak_mb"] = (status("VmHWM") - before) / 2**20
        result["rss_mb"] = status("VmRSS") / 2**20  # What the process keeps.
        results.append(result)
    imported = {name.split(".")[0] for name in sys.modules}
    json.dump({"results": results, "keras_vit": "keras_vit" in imported},
              open(out_file, "w"))
    """
)


def serve(model_dir, requests: list[tuple[str, list[bytes]]], work) -> dict:
    """Sends `requests` (name, encoded images) to `model_dir`'s
    `serving_bytes` in a fresh process; each result by name."""
    work.mkdir(parents=True, exist_ok=True)
    listed = []
    for i, (name, batch) in enumerate(requests):
        files = []
        for j, data in enumerate(batch):
            path = work / f"request_{i}_{j}.bin"
            path.write_bytes(data)
            files.append(str(path))
        listed.append({"name": name, "files": files})
    (work / "requests.json").write_text(json.dumps(listed))
    (work / "serve.py").write_text(SERVE_SCRIPT)
    out = work / "results.json"
    command = [sys.executable, str(work / "serve.py"), str(model_dir)]
    command += [str(work / "requests.json"), str(out), str(HEADROOM_BYTES)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    finished = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=900
    )
    assert finished.returncode == 0, finished.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["keras_vit"] is False
    names = [name for name, _ in requests]
    assert [r["name"] for r in report["results"]] == names
    return {r["name"]: r for r in report["results"]}


# Expected outputs, computed without keras_vit ----------------------------------


def expected_probabilities(model: keras.Model, data: bytes) -> np.ndarray:
    """`tf.io.decode_image` (JPEG: the accurate DCT), bilinear resize of the
    whole image, `[-1, 1]`, the model, softmax: the paper's contract."""
    if data[:3] == b"\xff\xd8\xff":
        pixels = tf.io.decode_jpeg(data, channels=3, dct_method="INTEGER_ACCURATE")
    else:
        pixels = tf.io.decode_image(data, channels=3, expand_animations=False)
    resized = tf.image.resize(tf.cast(pixels, tf.float32), (IMAGE_SIZE, IMAGE_SIZE))
    logits = model((resized.numpy()[None] - 127.5) / 127.5).numpy()[0]
    z = np.exp(logits - logits.max())
    return z / z.sum()


# Fixtures ---------------------------------------------------------------------


def _randomized(model):
    rng = np.random.default_rng(0)
    for weight in model.weights:  # A zero head would hide wrong inputs.
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    return model


@pytest.fixture(scope="module")
def model():
    keras.config.set_dtype_policy("float32")
    return _randomized(
        keras_vit.ViT("test/4", image_size=IMAGE_SIZE, num_classes=NUM_CLASSES)
    )


@pytest.fixture(scope="module")
def served(model, tmp_path_factory):
    """Every request of this module, answered by one serving process."""
    folder = tmp_path_factory.mktemp("served")
    export(model, folder / "vit" / "1", warmup=False)
    valid = valid_images()
    first = ("first", [valid["png"], valid["jpeg"]])
    requests = [first]
    requests += [(f"valid {kind}", [data]) for kind, data in valid.items()]
    requests += [(f"bomb {name}", [make()]) for name, (make, _) in BOMBS.items()]
    requests += [
        (f"damaged {name}", [data]) for name, (data, _) in damaged_images().items()
    ]
    requests.append(
        (
            "batch with a bomb",
            [valid["png"], png_bomb(20000, 20000), valid["jpeg"]],
        )
    )
    requests += [(f"cut {name}", [data]) for name, data in truncations().items()]
    requests.append(("empty batch", []))
    requests.append(("last", first[1]))
    return serve(folder / "vit" / "1", requests, folder / "work")


# The tests --------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(valid_images()))
def test_every_valid_image_kind_is_served_as_before(model, served, kind):
    result = served[f"valid {kind}"]
    assert "error" not in result, result["error"]
    expected = expected_probabilities(model, valid_images()[kind])
    np.testing.assert_allclose(result["probabilities"][0], expected, atol=1e-5)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bombs_are_refused_before_decoding(served, name):
    result = served[f"bomb {name}"]
    assert "error" in result, f"{name} was answered"
    assert result["error"].startswith("InvalidArgumentError"), result["error"]
    assert "serving_bytes: image 0 " in result["error"], result["error"]
    assert BOMBS[name][1] in result["error"], result["error"]
    assert LIMIT_TEXT in result["error"], result["error"]
    assert result["peak_mb"] < REFUSAL_MB, f"{result['peak_mb']:.0f} MB"


@pytest.mark.parametrize("name", sorted(damaged_images()))
def test_damaged_headers_fail_their_request_alone(served, name):
    result = served[f"damaged {name}"]
    assert "error" in result, f"{name} was answered"
    assert result["error"].startswith("InvalidArgumentError"), result["error"]
    assert damaged_images()[name][1] in result["error"], result["error"]
    assert result["peak_mb"] < REFUSAL_MB


def test_a_bomb_fails_its_batch_naming_it_and_serving_goes_on(served):
    result = served["batch with a bomb"]
    assert "serving_bytes: image 1 (a 20000x20000 PNG)" in result["error"]
    assert result["peak_mb"] < REFUSAL_MB
    # Every truncation of every image failed or was served; none stopped
    # the server, which answers the last request as the first.
    cuts = [r for name, r in served.items() if name.startswith("cut ")]
    assert len(cuts) > 200
    for result in cuts:
        assert "error" not in result or result["error"].startswith(
            "InvalidArgumentError"
        ), (result["name"], result["error"])
    assert served["empty batch"]["probabilities"] == []
    np.testing.assert_allclose(
        served["last"]["probabilities"], served["first"]["probabilities"], atol=0
    )


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_dynamic_size_model_refuses_bombs_before_decoding(tmp_path):
    """The per-image path (`classify_each`) checks as the batched one does."""
    model = _randomized(
        keras_vit.ViT(
            "test/4", image_size=IMAGE_SIZE, num_classes=NUM_CLASSES,
            dynamic_image_size=True,
        )
    )  # fmt: skip
    export(model, tmp_path / "vit" / "1", warmup=False)
    valid = valid_images()
    served = serve(
        tmp_path / "vit" / "1",
        [
            ("png", [valid["png"]]),
            ("bomb", [valid["png"], png_bomb(20000, 20000)]),
            ("gif", [valid["gif animated"]]),
        ],
        tmp_path / "work",
    )
    assert "error" not in served["png"] and "error" not in served["gif"]
    assert "serving_bytes: image 1 (a 20000x20000 PNG)" in served["bomb"]["error"]
    assert served["bomb"]["peak_mb"] < REFUSAL_MB


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_export_command_sets_the_limit(model, tmp_path):
    """`keras-vit export --max-pixels N`: N pixels pass, N + 1 do not; the
    limit is in the metadata; a bad value is refused before anything is
    written."""
    command = os.path.join(os.path.dirname(sys.executable), "keras-vit")
    model.save(tmp_path / "m.keras")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")

    def run(*args):
        return subprocess.run(
            [command, "export", "--model", str(tmp_path / "m.keras"), *args],
            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
        )  # fmt: skip

    for bad in ("0", str(2**30 + 1)):
        refused = run("--name", "bad", "--version", "1", "--max-pixels", bad)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.startswith(
            f"error: argument --max-pixels: not an integer from 1 to 1073741824: "
            f"'{bad}'"
        ), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not (tmp_path / "saved_models").exists()

    done = run("--name", "vit", "--version", "1", "--max-pixels", "600")
    assert done.returncode == 0, done.stderr
    version = tmp_path / "saved_models" / "vit" / "1"
    info = json.loads((version / "assets.extra" / "keras_vit_export.json").read_text())
    assert info["max_pixels"] == 600
    served = serve(
        version,
        [
            ("600 png", [_pil(np.zeros((20, 30), np.uint8), "PNG")]),
            ("601 png", [_pil(np.zeros((1, 601), np.uint8), "PNG")]),
            ("600 gif", [_pil(np.zeros((30, 20), np.uint8), "GIF")]),
            ("601 gif", [_pil(np.zeros((601, 1), np.uint8), "GIF")]),
            ("600 jpeg", [_pil(np.zeros((20, 30), np.uint8), "JPEG")]),
            ("601 jpeg", [_pil(np.zeros((601, 1), np.uint8), "JPEG")]),
            ("600 webp", [_pil(np.zeros((20, 30, 3), np.uint8), "WEBP")]),
            ("601 webp", [_pil(np.zeros((601, 1, 3), np.uint8), "WEBP")]),
            ("600 bmp", [_pil(np.zeros((20, 30, 3), np.uint8), "BMP")]),
            ("601 bmp", [_pil(np.zeros((1, 601, 3), np.uint8), "BMP")]),
        ],
        tmp_path / "work",
    )
    for name, result in served.items():
        if name.startswith("600"):
            assert "error" not in result, result["error"]
        else:
            assert "has 601 pixels, over the limit of 600 pixels" in result["error"]


def test_limits_agree_and_bad_limits_are_refused(model):
    from keras_vit.export import pixel_limit
    from keras_vit.export.signatures import ServingGraph
    from keras_vit.recipes import export as export_recipe

    assert pixel_limit.DEFAULT_MAX_PIXELS == Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT
    assert export_recipe.LARGEST_MAX_PIXELS == pixel_limit.LARGEST_MAX_PIXELS
    for bad in (0, -1, True, 2.0, 2**30 + 1, "100"):
        with pytest.raises(ValueError, match="`max_pixels` must be an integer"):
            ServingGraph(model, max_pixels=bad)


def _gif_frames_read_in_order(data: bytes):
    """`(frame pixels, widest, tallest)`: giflib's reading, block by block."""
    if len(data) < 13:
        return None
    packed = data[10]
    at = 13 + (3 * 2 ** ((packed & 7) + 1) if packed & 0x80 else 0)
    pixels = widest = tallest = 0

    def skip_sub_blocks(at):
        while at < len(data) and data[at]:
            at += 1 + data[at]
        return at + 1 if at < len(data) else None

    while at is not None and at < len(data):
        kind = data[at]
        if kind == 0x21:
            at = skip_sub_blocks(at + 2)
        elif kind == 0x2C and at + 9 < len(data):
            w, h = struct.unpack("<HH", data[at + 5 : at + 9])
            pixels, widest, tallest = pixels + w * h, max(widest, w), max(tallest, h)
            table = 3 * 2 ** ((data[at + 9] & 7) + 1) if data[at + 9] & 0x80 else 0
            at = skip_sub_blocks(at + 11 + table)
        else:
            break  # The trailer, or a byte that starts no block.
    return pixels, widest, tallest


def test_gif_frames_found_as_a_sequential_reader_finds_them():
    """The pointer-jumping walk against a plain loop, on real animated GIFs,
    their truncations and random mutations of their bytes."""
    from keras_vit.export.pixel_limit import image_sizes

    read = tf.function(image_sizes, input_signature=[tf.TensorSpec([None], tf.string)])
    rng = np.random.default_rng(3)
    gifs = []
    for n in range(6):
        frames = [
            Image.fromarray(rng.integers(0, 256, (20 + 7 * n, 31, 3), np.uint8))
            for _ in range(1 + n)
        ]
        buffer = io.BytesIO()
        frames[0].save(
            buffer, "GIF", save_all=True, append_images=frames[1:],
            comment=b"x" * (n * 100), interlace=bool(n % 2),
        )  # fmt: skip
        gifs.append(buffer.getvalue())
    gifs.append(gif_of_zeros([(3, 700), (900, 2), (5, 5)], screen=(4, 4)))
    cases = []
    for data in gifs:
        cases.append(data)
        cases += [data[:cut] for cut in rng.integers(13, len(data), 5)]
        for _ in range(10):
            mutated = bytearray(data)
            for at in rng.integers(13, len(data), 3):
                mutated[at] = rng.choice([0x00, 0x21, 0x2C, 0x3B, rng.integers(256)])
            cases.append(bytes(mutated))
    sizes = read(tf.constant(cases))  # All at once: a batch of GIFs.
    for i, data in enumerate(cases):
        frames, widest, tallest = _gif_frames_read_in_order(data)
        screen = struct.unpack("<HH", data[6:10])
        expected = max(frames, widest * tallest, screen[0] * screen[1])
        assert int(sizes["pixels"][i]) == min(expected, 2**30 + 1), i


@pytest.mark.parametrize("kind", sorted(valid_images()))
def test_header_sizes_are_pillows(kind):
    from keras_vit.export.pixel_limit import image_sizes

    data = valid_images()[kind]
    size = {key: value[0] for key, value in image_sizes([data]).items()}
    with Image.open(io.BytesIO(data)) as image:
        assert (int(size["width"]), int(size["height"])) == image.size
        pixels = image.size[0] * image.size[1]
    if kind == "gif animated":  # Its three frames together, as giflib reads.
        pixels = max(pixels, _gif_frames_read_in_order(data)[0])
        assert pixels > image.size[0] * image.size[1]
    assert int(size["pixels"]) == pixels
    assert bool(size["readable"])
