"""The pixel limit of `serving_bytes`: an image's size read from its header.

A small encoded image can claim a huge size: a 390 KB PNG of zero rows
decodes to 20000 x 20000 pixels (1.2 GB of RGB), a JPEG header can claim
65500 x 65500 over a few bytes of data, a GIF's LZW data or a lossless
WebP of one colour compresses even more. Decoding first and checking the
size afterwards would already have spent the memory. So `serving_bytes`
reads every image's width and height from its header, with TensorFlow
string ops (the graph runs in TF Serving, without Python), and refuses a
request holding an image of more than `max_pixels` pixels before any
image of it is decoded: the request fails with `INVALID_ARGUMENT` naming
the image, its size and the limit, and the server goes on serving (as it
does for bytes that are not an image: one bad image fails its batch).
The headers of a whole batch are read at once; JPEGs and GIFs then go
through the reads of their own below, one image at a time.

What is read, per format (recognised by its first bytes, in the order
TensorFlow's `DecodeImage` recognises them):

| format | size read from |
|---|---|
| JPEG | the frame header (`tf.io.extract_jpeg_shape`: libjpeg, header only) |
| PNG | the `IHDR` chunk, which must come first |
| GIF | the logical screen, and every frame's image descriptor (see below) |
| BMP | the info header (bytes 18 and 22, as TensorFlow reads them) |
| WebP | the `VP8 ` frame header, the `VP8L` header or the `VP8X` canvas |

TensorFlow's GIF decoder reads every frame of a GIF into memory (giflib's
`DGifSlurp`), then allocates a canvas as wide as its widest frame and as
tall as its tallest. A GIF's pixels are therefore the most of: its
logical screen, that canvas, and the pixels of all its frames together.
Finding the frames means following the GIF's chain of length-prefixed
blocks; it is done without a per-block loop, by pointer jumping (at most
`log2(file size)` rounds of gathers over arrays of the file's length:
about ten bytes of working memory per byte of GIF, for GIFs only).

A header that cannot be read (a truncated file, a PNG whose first chunk is
not `IHDR`, a WebP of an unknown chunk) is refused too, never decoded.
JPEG XL, which TensorFlow 2.21 also decodes, is refused: its size is not
read here (and `keras_vit.predict` does not read it either). Bytes of no
known format pass the check untouched; the decoder then refuses them
("Unknown image file format"), as before.

The default limit is Pillow's (`PIL.Image.MAX_IMAGE_PIXELS`, 89,478,485
pixels), the limit `keras_vit.predict` reads files under.
"""

from __future__ import annotations

import tensorflow as tf

# Pillow's `Image.MAX_IMAGE_PIXELS`: `keras_vit.predict` and the folder
# datasets read files through Pillow, which warns above this size.
DEFAULT_MAX_PIXELS = 89_478_485
# The largest limit: frame sums are added in int32, saturated just above it
# (TensorFlow's own decoders refuse PNGs of 2**29 pixels and more).
LARGEST_MAX_PIXELS = 2**30

# Format codes, in the order `DecodeImage` recognises the formats.
UNKNOWN, JPEG, PNG, GIF, BMP, WEBP, JXL = range(7)
FORMAT_NAMES = ("unknown", "JPEG", "PNG", "GIF", "BMP", "WebP", "JPEG XL")

_HEAD_BYTES = 32  # Every size but a JPEG's and GIF frames' is in them.
_JXL_CONTAINER = b"\x00\x00\x00\x0cJXL \r\n\x87\n"


def check_max_pixels(max_pixels) -> int:
    """`max_pixels` as an int, once checked to be in `[1, 2**30]`.

    Raises:
        ValueError: not an integer in that range.
    """
    if (
        isinstance(max_pixels, bool)
        or not isinstance(max_pixels, int)
        or not 1 <= max_pixels <= LARGEST_MAX_PIXELS
    ):
        raise ValueError(
            f"`max_pixels` must be an integer from 1 to {LARGEST_MAX_PIXELS}. "
            f"Received: max_pixels={max_pixels!r}"
        )
    return int(max_pixels)


def image_sizes(image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
    """Encoded images' formats and sizes, read from their headers only.

    The whole batch at once: the first 32 bytes of every image hold every
    size but a JPEG's (read by `tf.io.extract_jpeg_shape`) and a GIF's
    frames (`_gif_frames`), which only those images go through.

    Args:
        image_bytes: A `(batch,)` `tf.string` tensor of encoded images.

    Returns:
        A dict of `(batch,)` tensors: `format` (int32, one of the codes
        above), `width` and `height` (int64; a GIF's logical screen),
        `pixels` (int64, saturated at `2**30 + 1`; for a GIF the most of
        its screen, its canvas and all its frames together) and `readable`
        (bool: False when the header of a known format is truncated or
        damaged, and for JPEG XL). A JPEG whose header libjpeg cannot read
        raises `InvalidArgumentError` ("Invalid JPEG data") when run.

    Example:

    ```python
    sizes = image_sizes(tf.stack([tf.io.read_file("cat.png")]))
    int(sizes["width"][0]), int(sizes["height"][0])
    ```
    """
    image_bytes = tf.convert_to_tensor(image_bytes, tf.string)
    length = tf.cast(tf.strings.length(image_bytes), tf.int64)  # (B,)
    head_bytes = _head(image_bytes)  # (B,) strings of 32 bytes
    kind = _format(head_bytes, length)  # (B,)
    head = _head_values(head_bytes)  # (B, 32) int64

    def matches(at: int, magic: bytes):
        expected = tf.constant(list(magic), tf.int64)
        return tf.reduce_all(tf.equal(head[:, at : at + len(magic)], expected), -1)

    sizes = {}  # format -> (width, height, readable), each (B,)
    # PNG: `IHDR` first, width and height big-endian.
    sizes[PNG] = (
        _big_endian(head, 16, 4),
        _big_endian(head, 20, 4),
        (length >= 24) & matches(12, b"IHDR"),
    )
    # GIF: the logical screen (its frames below).
    sizes[GIF] = (
        _little_endian(head, 6, 2),
        _little_endian(head, 8, 2),
        length >= 13,
    )
    # BMP: as TensorFlow reads it: signed 32-bit, a negative height (rows
    # top-down) counting as its absolute value.
    sizes[BMP] = (
        tf.abs(_signed(_little_endian(head, 18, 4), 32)),
        tf.abs(_signed(_little_endian(head, 22, 4), 32)),
        length >= 26,
    )
    # WebP: "VP8 ", a key frame's start code, then 14-bit width and height;
    # "VP8L", its signature byte, then 14-bit width - 1 and height - 1;
    # "VP8X", the canvas: 24-bit width - 1 and height - 1.
    lossy = matches(12, b"VP8 ") & (length >= 30) & matches(23, b"\x9d\x01\x2a")
    lossless = matches(12, b"VP8L") & (length >= 25) & tf.equal(head[:, 20], 0x2F)
    extended = matches(12, b"VP8X") & (length >= 30)
    bits = _little_endian(head, 21, 4)
    sizes[WEBP] = (
        tf.where(
            lossy,
            _little_endian(head, 26, 2) % 16384,
            tf.where(lossless, 1 + bits % 16384, 1 + _little_endian(head, 24, 3)),
        ),
        tf.where(
            lossy,
            _little_endian(head, 28, 2) % 16384,
            tf.where(
                lossless, 1 + (bits // 16384) % 16384, 1 + _little_endian(head, 27, 3)
            ),
        ),
        lossy | lossless | extended,
    )
    # JPEG: libjpeg reads the header, for the JPEGs only.
    jpeg = tf.where(tf.equal(kind, JPEG))  # (J, 1)
    shapes = tf.map_fn(
        lambda contents: tf.io.extract_jpeg_shape(contents, output_type=tf.int64),
        tf.gather_nd(image_bytes, jpeg),
        fn_output_signature=tf.TensorSpec([3], tf.int64),
    )  # (J, 3): height, width, channels
    zeros = tf.zeros_like(length)
    sizes[JPEG] = (
        tf.tensor_scatter_nd_update(zeros, jpeg, shapes[:, 1]),
        tf.tensor_scatter_nd_update(zeros, jpeg, shapes[:, 0]),
        tf.ones_like(length, tf.bool),
    )
    # JPEG XL: not read, refused.
    sizes[JXL] = (zeros, zeros, tf.zeros_like(length, tf.bool))

    width, height = zeros, zeros
    readable = tf.ones_like(length, tf.bool)  # Unknown bytes: the decoder's.
    for code, (w, h, ok) in sizes.items():
        this = tf.equal(kind, code)
        width = tf.where(this, w, width)
        height = tf.where(this, h, height)
        readable = tf.where(this, ok, readable)
    # Each side is at most 2**32; clipped to 2**31, the product cannot wrap.
    pixels = _saturated(tf.minimum(width, 2**31) * tf.minimum(height, 2**31))
    # A GIF's frames, for the GIFs whose screen could be read.
    gif = tf.where(tf.equal(kind, GIF) & readable)  # (G, 1)
    packed = head[:, 10]
    two = tf.constant(2, tf.int64)
    color_table = tf.where(packed >= 128, 3 * tf.bitwise.left_shift(two, packed % 8), 0)
    frames = tf.map_fn(
        lambda item: _gif_frames(*item),
        (tf.gather_nd(image_bytes, gif), tf.gather_nd(13 + color_table, gif)),
        fn_output_signature=tf.TensorSpec([], tf.int64),
    )  # (G,)
    pixels = tf.tensor_scatter_nd_max(pixels, gif, frames)
    return {
        "format": kind,
        "width": width,
        "height": height,
        "pixels": pixels,
        "readable": readable,
    }


def check_pixels(image_bytes: tf.Tensor, max_pixels: int, signature: str) -> tf.Tensor:
    """Returns `image_bytes`, once every image's size is read and allowed.

    Fails, when run, with an `InvalidArgumentError` (the request alone)
    when an image has more than `max_pixels` pixels, a truncated or damaged
    header of a known format, or is JPEG XL, naming the first such image,
    e.g. `serving_bytes: image 1 (a 20000x20000 PNG) has 400000000 pixels,
    over the limit of 89478485 pixels (max_pixels); it was not decoded`.
    Bytes of no known format pass: the decoder refuses them.

    Args:
        image_bytes: A `(batch,)` `tf.string` tensor of encoded images.
        max_pixels: The most pixels an image may have (see `image_sizes`).
        signature: The signature's name, for the message.

    Example:

    ```python
    image_bytes = check_pixels(image_bytes, DEFAULT_MAX_PIXELS, "serving_bytes")
    images = tf.map_fn(decode_image, image_bytes, fn_output_signature=tf.uint8)
    ```
    """
    max_pixels = check_max_pixels(max_pixels)
    sizes = image_sizes(image_bytes)
    allowed = tf.equal(sizes["format"], UNKNOWN) | (
        sizes["readable"] & (sizes["pixels"] <= max_pixels)
    )  # (B,)
    ok = tf.reduce_all(allowed)
    message = tf.cond(  # Written only for a refusal.
        ok,
        lambda: tf.constant(""),
        lambda: _refusal(sizes, allowed, max_pixels, signature),
    )
    assertion = tf.debugging.Assert(ok, [message])
    with tf.control_dependencies([assertion]):
        return tf.identity(image_bytes)  # Nothing decodes before the check.


def _refusal(sizes, allowed, max_pixels, signature) -> tf.Tensor:
    """`check_pixels`' message, for the first image it refuses."""
    index = tf.argmin(tf.cast(allowed, tf.int32), output_type=tf.int64)
    size = {key: value[index] for key, value in sizes.items()}
    kind = size["format"]
    name = tf.gather(tf.constant(FORMAT_NAMES), kind)
    where = tf.strings.join([f"{signature}: image ", tf.strings.as_string(index)])
    area = size["width"] * size["height"]
    frames = tf.where(size["pixels"] > area, " in all its frames", "")
    count = tf.where(
        size["pixels"] > LARGEST_MAX_PIXELS,
        f"more than {LARGEST_MAX_PIXELS}",
        tf.strings.as_string(size["pixels"]),
    )
    too_large = tf.strings.join(
        [
            where,
            " (a ",
            tf.strings.as_string(size["width"]),
            "x",
            tf.strings.as_string(size["height"]),
            " ",
            name,
            ") has ",
            count,
            " pixels",
            frames,
            f", over the limit of {max_pixels} pixels (max_pixels); it was not decoded",
        ]
    )
    unreadable = tf.strings.join(
        [
            where,
            " has a truncated or damaged ",
            name,
            " header: its size cannot be read, so it was not decoded",
        ]
    )
    not_served = tf.strings.join(
        [where, " is a JPEG XL image; served formats: JPEG, PNG, GIF, BMP, WebP"]
    )
    return tf.where(
        tf.equal(kind, JXL),
        not_served,
        tf.where(size["readable"], too_large, unreadable),
    )


# Reading the header ----------------------------------------------------------


def _head(image_bytes: tf.Tensor) -> tf.Tensor:
    """The first 32 bytes of each image, zeros past its end: `(B,)`."""
    padded = tf.strings.join(
        [tf.strings.substr(image_bytes, 0, _HEAD_BYTES), b"\x00" * _HEAD_BYTES]
    )
    return tf.strings.substr(padded, 0, _HEAD_BYTES)


def _head_values(head: tf.Tensor) -> tf.Tensor:
    """`_head`'s bytes as int64 values: `(B, 32)`."""
    values = tf.cast(tf.io.decode_raw(head, tf.uint8), tf.int64)
    return tf.reshape(values, [-1, _HEAD_BYTES])


def _format(head: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """Each image's format code: TensorFlow's magic bytes, in its order
    (int32, `(B,)`)."""

    def starts_with(magic: bytes, at: int = 0):
        return (length >= at + len(magic)) & tf.equal(
            tf.strings.substr(head, at, len(magic)), magic
        )

    riff = starts_with(b"RIFF") & starts_with(b"WEBP", 8) & (length > 12)
    jxl = starts_with(b"\xff\x0a") | starts_with(_JXL_CONTAINER)
    kind = tf.fill(tf.shape(length), UNKNOWN)
    # From the last to the first: the first match wins, as in TensorFlow.
    for code, match in (
        (JXL, jxl),
        (WEBP, riff),
        (BMP, starts_with(b"BM")),
        (GIF, starts_with(b"GIF8")),
        (PNG, starts_with(b"\x89PNG\r\n\x1a\n")),
        (JPEG, starts_with(b"\xff\xd8\xff")),
    ):
        kind = tf.where(match, code, kind)
    return kind


def _little_endian(head: tf.Tensor, at: int, count: int) -> tf.Tensor:
    """An unsigned little-endian integer of `count` bytes (int64, `(B,)`)."""
    value = tf.zeros_like(head[:, 0])
    for i in reversed(range(count)):
        value = value * 256 + head[:, at + i]
    return value


def _big_endian(head: tf.Tensor, at: int, count: int) -> tf.Tensor:
    value = tf.zeros_like(head[:, 0])
    for i in range(count):
        value = value * 256 + head[:, at + i]
    return value


def _signed(value: tf.Tensor, bits: int) -> tf.Tensor:
    return tf.where(value >= 2 ** (bits - 1), value - 2**bits, value)


def _saturated(pixels: tf.Tensor) -> tf.Tensor:
    """Pixel counts above the largest limit, all as `LARGEST_MAX_PIXELS + 1`."""
    return tf.minimum(pixels, LARGEST_MAX_PIXELS + 1)


# A GIF's frames ---------------------------------------------------------------


def _gif_frames(contents: tf.Tensor, first_block: tf.Tensor) -> tf.Tensor:
    """The pixels of a GIF's frames, int64: the most of all its frames'
    pixels together and its canvas (widest frame x tallest frame).

    After the logical screen and its colour table, a GIF is a chain of
    blocks: an extension (`0x21`, a label, then data sub-blocks), an image
    (`0x2C`, a 9-byte descriptor with the frame's size, a colour table, a
    code size byte, then data sub-blocks) or the trailer (`0x3B`). Data
    sub-blocks are a length byte and that many bytes, ended by a length of
    0. Where a block starts is known only once the previous one has been
    followed, which a loop would do one sub-block at a time (a graph loop
    costs microseconds per step: seconds for a hostile GIF of one-byte
    sub-blocks). Instead each position's successor is computed for all
    positions at once, and chains are followed by pointer jumping: after
    `k` rounds of `next = next[next]` every position knows its successor
    `2**k` steps on, so `log2(file size)` rounds reach the end of any
    chain. First for the sub-block chains (the data of every block), then,
    summing frame sizes on the way, for the chain of blocks, among the
    positions whose byte starts a block only. A block that is not one of
    the three, or runs past the end, ends the chain (giflib stops there
    too, with an error, after reading the frames before it).

    Hand-written because no TensorFlow op reads GIF frame sizes without
    decoding them (`tf.io.decode_gif` is what must not run on a bomb).
    """
    data = tf.cast(tf.io.decode_raw(contents, tf.uint8), tf.int32)  # (n,)
    n = tf.size(data)
    position = tf.range(n)  # (n,)
    # 1. Where the chain of data sub-blocks from each position ends: at its
    #    zero length byte, or at `n` when it runs past the end.
    end = tf.where(data == 0, position, tf.minimum(position + 1 + data, n))
    end = _jump(tf.concat([end, [n]], 0))  # (n + 1,); `n` ends at itself.
    # 2. The positions that may start a block, and the end (`n`).
    starts_block = (data == 0x21) | (data == 0x2C) | (data == 0x3B)
    starts_block = tf.concat([starts_block, [True]], 0)  # (n + 1,)
    block = tf.cast(tf.where(starts_block)[:, 0], tf.int32)  # (m,) positions
    slot = tf.cumsum(tf.cast(starts_block, tf.int32)) - 1  # (n + 1,)
    padded = tf.concat([data, tf.zeros([12], tf.int32)], 0)  # (n + 12,)

    def byte(offset):
        return tf.gather(padded, block + offset)  # (m,)

    kind = byte(0)
    is_image = (kind == 0x2C) & (block + 9 < n)  # A whole descriptor.
    packed = byte(9)
    color_table = tf.where(packed >= 128, 3 * tf.bitwise.left_shift(2, packed % 8), 0)
    image_data = tf.minimum(block + 11 + color_table, n)
    after_image = tf.gather(end, image_data) + 1
    after_extension = tf.gather(end, tf.minimum(block + 2, n)) + 1
    following = tf.where(
        kind == 0x21,
        after_extension,
        tf.where(is_image, after_image, tf.where(kind == 0x3B, block, n)),
    )
    following = tf.minimum(following, n)  # (m,) positions
    # A block followed by a byte that starts no block goes to the end.
    following = tf.where(tf.gather(starts_block, following), following, n)
    successor = tf.gather(slot, following)  # (m,) slots; the end's is itself.
    width = tf.where(is_image, byte(5) + 256 * byte(6), 0)  # (m,)
    height = tf.where(is_image, byte(7) + 256 * byte(8), 0)
    area = _saturated(tf.cast(width, tf.int64) * tf.cast(height, tf.int64))
    area = tf.cast(area, tf.int32)
    # 3. Sums and maxima along the chain of blocks.
    cap = LARGEST_MAX_PIXELS + 1

    def step(i, successor, area, width, height):
        # Saturated: `area + later` stays below 2**31 (both are <= cap).
        area = tf.minimum(area + tf.gather(area, successor), cap)
        width = tf.maximum(width, tf.gather(width, successor))
        height = tf.maximum(height, tf.gather(height, successor))
        return i + 1, tf.gather(successor, successor), area, width, height

    rounds = _bit_length(tf.size(block))
    _, _, area, width, height = tf.while_loop(
        lambda i, *_: i < rounds,
        step,
        (tf.constant(0), successor, area, width, height),
    )
    first = tf.cast(tf.minimum(first_block, tf.cast(n, tf.int64)), tf.int32)
    first = tf.where(starts_block[first], slot[first], slot[n])
    canvas = tf.cast(width[first], tf.int64) * tf.cast(height[first], tf.int64)
    return tf.maximum(tf.cast(area[first], tf.int64), _saturated(canvas))


def _bit_length(value: tf.Tensor) -> tf.Tensor:
    """Rounds of pointer jumping that reach `value` steps on (int32)."""
    bits = tf.math.log(tf.cast(value, tf.float64) + 1.0) / tf.math.log(
        tf.constant(2.0, tf.float64)
    )
    return tf.cast(tf.math.ceil(bits), tf.int32) + 1


def _jump(successor: tf.Tensor) -> tf.Tensor:
    """Where each chain of `successor` ends (its first fixed point).

    Rounds of `successor[successor]` until nothing moves: at most
    `log2(len(successor))` of them, fewer when the chains are short.
    """

    def step(_, successor):
        later = tf.gather(successor, successor)
        return tf.reduce_any(later != successor), later

    _, successor = tf.while_loop(
        lambda moved, _: moved, step, (tf.constant(True), successor)
    )
    return successor
