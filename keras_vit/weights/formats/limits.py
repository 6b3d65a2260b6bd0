"""Bounded reading: what a checkpoint file may cost in memory.

A checkpoint file states the shapes of its arrays before their bytes, and
a reader that trusts them allocates whatever they claim: a few hundred
bytes of header can ask for terabytes, a zip record of one megabyte can
inflate to a gigabyte, and overlapping or repeated views can turn a small
file into many copies of itself. Every reader of `keras_vit.weights.formats`
therefore checks each claim against a `ReadBudget` before allocating it:

- When the model is known (`ReadBudget.for_model`: `load_weights`,
  `ViT(weights=...)`, `init_from`, `export --weights`), a read may allocate
  at most **the sizes of the files it reads plus the model's parameter
  bytes** (its variables' elements at float32 or wider). A checkpoint of
  the model fits: its arrays are the model's parameters, stored in the file.
- When no model is known (`read_npz(path)`, `read_safetensors(path)`, a
  `keras-vit convert` before the variant is known, an `.npz` of images),
  the stated cap is **4 times the sizes of the files plus 64 MiB**
  (`ReadBudget.default`): 4 times, as a float8 file read as float32 grows
  4-fold; 64 MiB, so that a small file of broadcast buffers or compressed
  images still reads.

A claim past the budget is refused in one `CheckpointError` line naming the
file, the key and the claimed shape and bytes, before anything is
allocated. The budget counts what a reader allocates (arrays, inflated zip
records); a memory-mapped file's own pages are not counted.

The helpers here are shared by the readers: `read_member` (a zip record,
its declared size checked before inflating), `array_bytes` (the bytes a
claimed shape needs, in Python integers that cannot overflow) and
`parse_json` (a JSON header, refusing `Infinity`, `NaN` and nesting deeper
than Python's parser can take, in one line).

Example:

```python
budget = ReadBudget.for_model(model)
tensors = read_safetensors("model.safetensors", budget=budget)
```
"""

from __future__ import annotations

import json
import math
import os
import zipfile
import zlib

import numpy as np

from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import TruncatedFileError

# Without a model: files may grow this many times their size (float8 read
# as float32), plus `DEFAULT_SLACK_BYTES`.
DEFAULT_GROWTH = 4
DEFAULT_SLACK_BYTES = 64 << 20
# Zip records are inflated this many bytes at a time (a whole record is
# never asked of the decompressor at once).
_CHUNK_BYTES = 1 << 20
# What a reader's messages say of a file that breaks its budget.
_REFUSED = "the file is corrupt or not a checkpoint of this model"


class ReadBudget:
    """The bytes one load may allocate while reading its checkpoint files.

    The limit is `growth` times the sizes of the files read so far plus
    `allowance`; each reader adds its file (`add_file`) and charges each
    array before allocating it (`take`). One budget is shared by every file
    of a load (the shards of a sharded checkpoint).

    Args:
        allowance: Bytes allowed beyond the files' sizes.
        basis: What `allowance` is, for messages (e.g. "the 1.2 MB of
            parameters of 'vit'").
        growth: How many times its size each file may take. Defaults to 1.

    Example:

    ```python
    budget = ReadBudget(1 << 20, "1 MiB for a test")
    budget.add_file("weights.npz")
    budget.take(4096, "weights.npz", "the array 'cls' (1024,) float32")
    ```
    """

    def __init__(self, allowance: int, basis: str, *, growth: int = 1):
        self.allowance = int(allowance)
        self.basis = basis
        self.growth = int(growth)
        self.file_bytes: dict[str, int] = {}
        self.used = 0

    @classmethod
    def for_model(cls, model) -> ReadBudget:
        """The files' sizes plus `model`'s parameter bytes (see the module)."""
        allowance = model_bytes(model)
        name = getattr(model, "name", "the model")
        return cls(allowance, f"the {allowance} parameter bytes of {name!r}")

    @classmethod
    def default(cls) -> ReadBudget:
        """The cap without a model: 4 times the files' sizes plus 64 MiB."""
        return cls(
            DEFAULT_SLACK_BYTES,
            f"{DEFAULT_SLACK_BYTES >> 20} MiB (the cap when no model is given)",
            growth=DEFAULT_GROWTH,
        )

    @property
    def limit(self) -> int:
        """The bytes this load may allocate in all."""
        return self.growth * sum(self.file_bytes.values()) + self.allowance

    @property
    def left(self) -> int:
        """The bytes still allowed."""
        return self.limit - self.used

    def add_file(self, path: str | os.PathLike) -> None:
        """Counts a file this load reads (its size raises the limit once)."""
        path = os.fspath(path)
        if path not in self.file_bytes:
            self.file_bytes[path] = os.path.getsize(path)

    def take(self, nbytes: int, path: str | os.PathLike, what: str) -> None:
        """Charges `nbytes` for `what` (a key and its claimed shape).

        Raises:
            CheckpointError: `nbytes` is more than is left, in one line.
        """
        if nbytes > self.left:
            times = f"{self.growth} times " if self.growth != 1 else ""
            files = "the file" if len(self.file_bytes) == 1 else "the files"
            raise CheckpointError(
                f"{os.fspath(path)!r}: {what} needs {nbytes} bytes, more than "
                f"reading it may allocate ({times}the {sum(self.file_bytes.values())} "
                f"bytes of {files} plus {self.basis}: {self.limit} bytes, "
                f"{max(self.left, 0)} left); {_REFUSED}."
            )
        self.used += nbytes

    def release(self, nbytes: int) -> None:
        """Gives back `nbytes` taken for something no longer held."""
        self.used -= nbytes


def budget_for(budget: ReadBudget | None, path: str | os.PathLike) -> ReadBudget:
    """`budget` (or `ReadBudget.default()` when `None`), counting `path`."""
    budget = ReadBudget.default() if budget is None else budget
    budget.add_file(path)
    return budget


def model_bytes(model) -> int:
    """A model's parameter bytes: its variables' elements at float32 or wider."""
    total = 0
    for variable in model.weights:
        try:
            itemsize = np.dtype(str(variable.dtype)).itemsize
        except TypeError:  # bfloat16 and others NumPy does not name
            itemsize = 4
        total += math.prod(int(d) for d in variable.shape) * max(itemsize, 4)
    return total


def array_bytes(shape, itemsize: int) -> int:
    """The bytes of an array of `shape`: Python integers, so never overflowing."""
    return math.prod(int(d) for d in shape) * int(itemsize)


# What `zipfile` raises for a record it cannot inflate: a bad CRC or header
# (BadZipFile), a corrupt deflate stream (zlib.error), an encrypted record
# (RuntimeError), an unknown compression method (NotImplementedError), a
# truncated file (EOFError, OSError).
MEMBER_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    OSError,
    EOFError,
    RuntimeError,
    NotImplementedError,
    ValueError,
)


def read_member(
    archive: zipfile.ZipFile,
    info: zipfile.ZipInfo,
    path: str | os.PathLike,
    budget: ReadBudget,
) -> bytearray:
    """The bytes of one zip record, its declared size charged before inflating.

    The declared (uncompressed) size is charged to `budget` first; the
    record is then inflated a chunk at a time into a buffer of that size,
    and one byte more is asked for: a record that yields more than it
    declares is refused (Python's `zipfile` already stops at the declared
    size and checks the CRC; asking here makes the bound independent of
    that).

    Raises:
        CheckpointError: the record is past the budget, unreadable, or
            inflates to another size than it declares. One line.

    Example:

    ```python
    with zipfile.ZipFile(path) as archive:
        data = read_member(archive, archive.getinfo("a/data.pkl"), path, budget)
    ```
    """
    declared = info.file_size
    budget.take(declared, path, f"the zip record {info.filename!r}")
    buffer = bytearray(declared)
    with open_member(archive, info, path) as stream:
        filled = read_into(stream, memoryview(buffer), path, info.filename)
        extra = read_into(stream, memoryview(bytearray(1)), path, info.filename)
    if filled != declared or extra:
        more = "more than" if extra else f"{filled} bytes, not"
        raise TruncatedFileError(
            f"{os.fspath(path)!r}: the zip record {info.filename!r} holds {more} "
            f"the {declared} bytes it declares; the file is truncated or corrupt."
        )
    return buffer


def open_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path):
    """`archive.open(info)`, a record that cannot be opened one line."""
    try:
        return archive.open(info)
    except MEMBER_ERRORS as error:
        raise member_error(path, info.filename, error) from None


def read_into(stream, view: memoryview, path, name: str) -> int:
    """Fills `view` from a zip record's stream, a chunk at a time.

    No more than `len(view)` bytes are ever asked of the decompressor, and
    never more than `_CHUNK_BYTES` at once, so that a record that inflates
    past its claim costs at most a chunk.

    Returns:
        The bytes read: `len(view)`, or fewer when the record ends first.

    Raises:
        CheckpointError: the record is unreadable (a bad CRC, a corrupt
            stream, an encrypted record). One line.
    """
    filled = 0
    try:
        while filled < len(view):
            chunk = stream.read(min(_CHUNK_BYTES, len(view) - filled))
            if not chunk:
                break
            view[filled : filled + len(chunk)] = chunk
            filled += len(chunk)
    except MEMBER_ERRORS as error:
        raise member_error(path, name, error) from None
    return filled


def member_error(path, name: str, error: BaseException) -> CheckpointError:
    """One line for a zip record that cannot be read."""
    text = " ".join(str(error).split())[:200] or type(error).__name__
    return TruncatedFileError(
        f"{os.fspath(path)!r}: the zip record {name!r} is unreadable ({text}); "
        "the file is truncated or corrupt."
    )


def parse_json(
    data: bytes, path: str | os.PathLike, what: str, *, constants: bool = False
):
    """Parses a JSON header strictly, every failure one `CheckpointError` line.

    Python's `json` accepts `Infinity`, `-Infinity` and `NaN`, reads
    `1e400` as an infinite float, and raises `RecursionError` for deep
    nesting; all are refused here (the first two unless `constants`), as
    are non-UTF-8 bytes and integers too long for Python to convert.

    Args:
        data: The JSON text's bytes.
        path: The file, for messages.
        what: What the JSON is, for messages (e.g. "header").
        constants: Accept `Infinity`, `NaN` and infinite numbers, as Python
            writes them (a Keras `config.json` may hold them). Defaults to
            `False`.

    Example:

    ```python
    header = parse_json(b'{"a": 1}', "model.safetensors", "header")
    ```
    """

    def refuse_constant(name):
        raise ValueError(f"the constant {name} is not JSON")

    def finite_float(text):
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"the number {text[:40]} is not finite")
        return value

    strict = (
        {}
        if constants
        else dict(parse_constant=refuse_constant, parse_float=finite_float)
    )
    try:
        return json.loads(data.decode("utf-8"), **strict)
    except RecursionError:
        problem = "nested deeper than can be parsed"
    except (UnicodeDecodeError, ValueError) as error:
        problem = " ".join(str(error).split())[:200]
    raise CheckpointError(
        f"{os.fspath(path)!r}: unreadable {what}, not valid JSON ({problem}); the "
        "file is corrupt."
    )
