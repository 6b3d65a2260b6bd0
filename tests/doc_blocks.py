"""Collects the Python blocks of the Markdown docs and runs them offline.

The conventions, which `tests/test_docs.py` enforces:

- **What runs.** Every fenced block opened with three backticks and
  `python` (or `py`) in `README.md` and `docs/*.md`. Other fences (bash,
  json) are not run.
- **Order.** The blocks of one page run top to bottom in one namespace, as a
  reader runs them: a later block may use names an earlier block made. Each
  page starts from an empty namespace in a fresh temporary working directory.
- **Names the prose assumes** (`images`, `model`, a saved
  `runs/digits/final.keras`): a page's *prelude* (`PRELUDES` below, keyed by
  the page's path) makes them before the page's first block. A prelude never
  supplies a module: a block that uses `keras_vit`, `keras`, `np` or `tf`
  must import it, or an earlier block of its page must.
- **Tiny models, no downloads** (`tiny_world`): while a block runs, every
  size of `keras_vit.VARIANTS` (Ti, S, B, L, H) is a tiny transformer of its
  own width (so a checkpoint still names its variant) and every hybrid
  backbone one bottleneck unit per stage, so `keras_vit.ViT_L16(...)` builds
  in a fraction of a second. A pretrained tag (`weights="imagenet21k"`)
  resolves to a random checkpoint in the original `.npz` layout, written on
  first use into a temporary `$KERAS_HOME`; any real download raises. The
  bundled digits data set keeps its first 128 examples per split, so that a
  block that trains on it (`docs/training.md`) runs in seconds.
- **The tiny world checks itself** (`verify_tiny_world`, run by
  `tests/test_docs.py` before each page): inside it, `keras_vit.ViT_B16()`,
  `keras_vit.ViT("L/16")` and `keras_vit.ViT("R50+B/16")` must have fewer
  than a million parameters, or `NotTinyError` says the patch is not in
  effect. Were it not, the pages would build real ViT-B/L models, hundreds of
  MB to GBs each. As a second net, the weights that layers create inside
  `tiny_world` are counted (`Layer.add_weight`); past `MAX_WEIGHTS` (60M,
  less than one real ViT-B/16) the block fails with `NotTinyError` before the
  memory is spent.
- **Nothing from outside is initialised inside.** A test that counts a model
  in `keras.StatelessScope(initialize_variables=False)` (as
  `tests/test_models.py` does for every zoo size, ViT-H/14 and DINOv2-g/14
  included) leaves Keras a list of variables to initialise, and the next
  symbolic call through `backend.compute_output_spec` (keras-hub's layers,
  `docs/migrating.md`) allocates all of them: 6.5 billion parameters, 24 GiB,
  after `tests/test_models.py`. `tiny_world` sets that list aside while it is
  active and puts it back on exit (and `tests/conftest.py` empties it after
  every test).
- **Blocks that truly cannot run** (a TF Serving server, a GPU) carry
  `<!-- doc-test: skip REASON -->` on the line before the fence. The reason
  is required; the test reports each skip.

Example:

```python
blocks = collect_blocks(REPO)
namespace = {}
with tiny_world(tmp_path / "keras_home"):
    run_block(blocks[0], namespace)
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import math
import os
import re
import textwrap
import types
from collections.abc import Callable
from collections.abc import Iterator
from unittest import mock

import keras
import numpy as np

from keras_vit import keras_internals
from keras_vit.weights.formats.safetensors import write_safetensors  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)```[ \t]*(?P<lang>[\w+-]*)[^`]*$")
_FENCE_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_PYTHON = ("python", "py", "python3")
_SKIP = re.compile(r"^\s*<!--\s*doc-test:\s*skip\b(?P<reason>.*?)-->\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced Python block of a Markdown page.

    Attributes:
        page: The page's path relative to the repository, e.g. `"README.md"`.
        line: Line number (1-based) of the block's first code line.
        code: The code, dedented to the fence's indentation.
        skip: The reason of a `doc-test: skip` marker, or `None`.
        path: The page's file, for tracebacks; defaults to `page`.
    """

    page: str
    line: int
    code: str
    skip: str | None = None
    path: str | None = None

    @property
    def name(self) -> str:
        """`"docs/models.md:42"`: where the block starts."""
        return f"{self.page}:{self.line}"


class DocCollectionError(ValueError):
    """A page whose blocks cannot be read: an unclosed fence, a bad marker."""


def doc_pages(root: str = REPO) -> list[str]:
    """`README.md` and `docs/*.md`, relative to `root`, in a stable order."""
    pages = ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
    docs = sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    return pages + [os.path.relpath(p, root) for p in docs]


def parse_blocks(page: str, text: str, path: str | None = None) -> list[Block]:
    """The Python blocks of one page's Markdown `text` (read from `path`).

    Raises:
        DocCollectionError: for an unclosed fence, or a skip marker without a
            reason or not followed by a Python block.
    """
    lines = text.splitlines()
    blocks, i, pending_skip = [], 0, None
    while i < len(lines):
        line = lines[i]
        marker = _SKIP.match(line)
        if marker:
            reason = marker.group("reason").strip()
            if not reason:
                raise DocCollectionError(
                    f"{page}:{i + 1}: skip marker without a reason"
                )
            pending_skip = (i + 1, reason)
            i += 1
            continue
        opening = _FENCE_OPEN.match(line)
        if opening is None:
            if pending_skip and line.strip():
                raise DocCollectionError(
                    f"{page}:{pending_skip[0]}: skip marker not followed by a block"
                )
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and not _FENCE_CLOSE.match(lines[end]):
            end += 1
        if end == len(lines):
            raise DocCollectionError(f"{page}:{i + 1}: fence never closed")
        lang = opening.group("lang").lower()
        if lang in _PYTHON:
            body = "\n".join(lines[start:end])
            code = textwrap.dedent(body) + "\n"
            skip = pending_skip[1] if pending_skip else None
            blocks.append(Block(page, start + 1, code, skip, path))
        elif pending_skip:
            raise DocCollectionError(
                f"{page}:{pending_skip[0]}: skip marker before a {lang or 'plain'} "
                "block; only Python blocks run"
            )
        pending_skip = None
        i = end + 1
    if pending_skip:
        raise DocCollectionError(
            f"{page}:{pending_skip[0]}: skip marker not followed by a block"
        )
    return blocks


def collect_blocks(root: str = REPO) -> list[Block]:
    """Every Python block of `README.md` and `docs/*.md` under `root`."""
    blocks = []
    for page in doc_pages(root):
        path = os.path.join(root, page)
        with open(path, encoding="utf-8") as f:
            blocks += parse_blocks(page, f.read(), path)
    return blocks


def run_block(block: Block, namespace: dict) -> None:
    """Executes `block` in `namespace`; tracebacks point at the page's lines."""
    # Leading newlines make the traceback's line numbers the page's.
    source = "\n" * (block.line - 1) + block.code
    exec(compile(source, block.path or block.page, "exec"), namespace)  # noqa: S102


# --- The tiny world ----------------------------------------------------------

# One distinct tiny row per size, so that a checkpoint's shapes still name its
# variant. Depth 4 keeps "block_3" and `blocks=[-4]` of the docs meaningful.
_TINY_SIZES = {"Ti": 16, "S": 24, "B": 32, "L": 40, "H": 48}
_TINY_RESNET_WIDTH = 32  # GroupNorm has 32 groups.
_DIGITS_EXAMPLES = 128


def _tiny_tables():
    from keras_vit.models import variants

    table = dict(variants.VARIANTS)
    for size, width in _TINY_SIZES.items():
        table[size] = variants.Variant(
            hidden_dim=width, depth=4, mlp_dim=2 * width, num_heads=2
        )
    backbones = {}
    for (name, stride), spec in variants.BACKBONES.items():
        # One unit per stage keeps the stride; R50 and R26 at /32 must differ.
        units = tuple(1 for _ in spec.layers)
        if name == "R50" and len(units) == 4:
            units = units[:-1] + (2,)
        backbones[(name, stride)] = variants.ResNetSpec(units, _TINY_RESNET_WIDTH)
    return types.MappingProxyType(table), types.MappingProxyType(backbones)


def _refuse_download(*args, **kwargs):
    origin = kwargs.get("origin", args[1] if len(args) > 1 else "?")
    raise OSError(f"doc test: no downloads (asked for {origin})")


def synthetic_checkpoint(entry) -> dict[str, np.ndarray]:
    """Random arrays in the original `.npz` layout of a registry `entry`.

    The shapes are those of the (tiny) model the entry describes; call it
    inside `tiny_world`.
    """
    import keras_vit
    from keras_vit.weights.dialects.ours import checkpoint_layout

    model = keras_vit.ViT(
        entry.variant,
        num_classes=entry.num_classes,
        image_size=entry.image_size,
        representation_size=entry.representation_size,
    )
    layout, _ = checkpoint_layout(model)
    rng = np.random.default_rng(len(entry.file_name))
    return {
        key: (0.02 * rng.standard_normal(target.shape)).astype("float32")
        for key, target in layout.items()
    }


def _few_digits(real_digits):
    def digits(split="train"):
        source = real_digits(split)
        n = min(source.num_examples, _DIGITS_EXAMPLES)
        return dataclasses.replace(
            source,
            dataset=source.dataset.take(n),
            num_examples=n,
            files=source.files[:n],
        )

    return digits


# Weight elements the layers may create in one `tiny_world`. The docs' blocks
# need up to 35M (docs/migrating.md: the synthetic ImageNet-21k checkpoints
# keep their real 768 x 21843 head); one real ViT-B/16 is 86M, L/16 304M.
MAX_WEIGHTS = 60_000_000
# What `verify_tiny_world` accepts for one probe model (the tiny B/16: 98k).
MAX_PROBE_PARAMS = 1_000_000
_WHY = (
    "Without it the docs' `ViT_B16(...)`, `ViT_L16(...)`, pretrained tags and "
    "saved models are full-size (ViT-B/16: 86M parameters, ViT-L/16: 304M, "
    "1.2 GB each) and a page builds several: enough to exhaust the memory of "
    "the test machine."
)


class NotTinyError(RuntimeError):
    """A model built inside `tiny_world` is not tiny: the patch is not in effect."""


class _WeightBudget:
    """Counts the weight elements `Layer.add_weight` creates; raises past `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def charge(self, layer, shape) -> None:
        try:
            size = math.prod(int(d) for d in (shape or ()))
        except TypeError:  # an undefined dimension: `add_weight` itself refuses
            return
        self.used += size
        if self.used > self.limit:
            raise NotTinyError(
                f"doc test: {self.used:,} weight elements built inside tiny_world "
                f"(limit {self.limit:,}; the last, {tuple(shape)}, for layer "
                f"{layer.name!r}). A full-size model is being built: the tiny-world "
                "patch of the variant tables does not reach it (or a block needs "
                f"more, then raise doc_blocks.MAX_WEIGHTS). {_WHY}"
            )


_ACTIVE_BUDGET: _WeightBudget | None = None


def _deferred_variables():
    return keras_internals.deferred_variables()


@contextlib.contextmanager
def _set_aside_deferred_variables() -> Iterator[None]:
    """Hides the variables Keras would initialise at the next symbolic call.

    They were created, never allocated, before the tiny world (a model counted
    in `keras.StatelessScope(initialize_variables=False)`); the first
    `backend.compute_output_spec` outside a stateless scope allocates every
    one of them. On exit the list is put back, with any made inside appended.
    """
    outside = keras_internals.deferred_variables()
    keras_internals.set_deferred_variables([])
    try:
        yield
    finally:
        inside = keras_internals.deferred_variables()
        keras_internals.set_deferred_variables(outside + inside)


@contextlib.contextmanager
def _weight_budget(limit: int) -> Iterator[_WeightBudget]:
    global _ACTIVE_BUDGET
    budget, outer = _WeightBudget(limit), _ACTIVE_BUDGET
    real_add_weight = keras.layers.Layer.add_weight

    def add_weight(layer, *args, **kwargs):
        budget.charge(layer, kwargs.get("shape", args[0] if args else None))
        return real_add_weight(layer, *args, **kwargs)

    _ACTIVE_BUDGET = budget
    try:
        with mock.patch.object(keras.layers.Layer, "add_weight", add_weight):
            yield budget
    finally:
        _ACTIVE_BUDGET = outer


def verify_tiny_world() -> None:
    """Builds ViT-B/16, L/16 and R50+B/16 and checks that they are tiny.

    Call it inside `tiny_world`, before a page's blocks: it fails loudly when
    the patch does not reach what a build reads (a module holding its own
    reference to the real table, a cache), and when Keras still holds
    variables from outside waiting to be initialised. The probes' weights do
    not count against the block budget.

    Raises:
        NotTinyError: naming the probe, its size, and why it matters.
    """
    import keras_vit

    budget = _ACTIVE_BUDGET
    if budget is None:
        raise RuntimeError("verify_tiny_world() must run inside tiny_world()")
    pending = _deferred_variables()
    if pending:
        raise NotTinyError(
            f"doc test: {len(pending)} variables created before the tiny world "
            f"(e.g. {pending[0].path!r}) are waiting for Keras to initialise them, "
            "which the first symbolic call of a block would do, full size: "
            f"tiny_world did not set them aside. {_WHY}"
        )
    probes = {
        "keras_vit.ViT_B16()": lambda: keras_vit.ViT_B16(),
        'keras_vit.ViT("L/16")': lambda: keras_vit.ViT("L/16"),
        'keras_vit.ViT("R50+B/16")': lambda: keras_vit.ViT("R50+B/16"),
    }
    used = budget.used
    try:
        for label, build in probes.items():
            try:
                params, cause = build().count_params(), None
            except NotTinyError as error:  # the budget stopped a full-size build
                params, cause = None, error
            if params is None or params >= MAX_PROBE_PARAMS:
                size = "over the weight budget" if params is None else f"{params:,}"
                raise NotTinyError(
                    f"doc test: the tiny-world patch is not in effect: {label} has "
                    f"{size} parameters inside tiny_world (a tiny one has under "
                    f"{MAX_PROBE_PARAMS:,}). Something read at build time is not "
                    "the patched `keras_vit.models.variants.VARIANTS`/`BACKBONES` "
                    f"(a copied table, a cache). {_WHY}"
                ) from cause
    finally:
        budget.used = used


@contextlib.contextmanager
def tiny_world(
    keras_home: str | os.PathLike, max_weights: int | None = None
) -> Iterator[None]:
    """Tiny variants, synthetic pretrained tags and no network (see module).

    Args:
        keras_home: The `$KERAS_HOME` of synthetic checkpoints.
        max_weights: Weight elements the layers may create inside; past it
            `Layer.add_weight` raises `NotTinyError`. Default `MAX_WEIGHTS`.
    """
    from keras_vit.data import datasets
    from keras_vit.models import variants
    from keras_vit.weights import architecture
    from keras_vit.weights import registry

    os.makedirs(keras_home, exist_ok=True)
    tiny_variants, tiny_backbones = _tiny_tables()
    real_fetch = registry.fetch

    def fetch(entry, cache_dir=None):
        path = os.path.join(registry.cache_directory(cache_dir), entry.file_name)
        if not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            partial = path + ".partial.npz"
            np.savez(partial, **synthetic_checkpoint(entry))
            os.replace(partial, path)
        return real_fetch(entry, cache_dir)

    with contextlib.ExitStack() as stack:
        for module in (variants, architecture):
            stack.enter_context(mock.patch.object(module, "VARIANTS", tiny_variants))
            stack.enter_context(mock.patch.object(module, "BACKBONES", tiny_backbones))
        stack.enter_context(mock.patch.object(registry, "fetch", fetch))
        stack.enter_context(
            mock.patch.object(datasets, "digits", _few_digits(datasets.digits))
        )
        stack.enter_context(
            mock.patch.object(keras.utils, "get_file", _refuse_download)
        )
        stack.enter_context(
            mock.patch.dict(os.environ, {"KERAS_HOME": os.fspath(keras_home)})
        )
        stack.enter_context(_fixture_hub(os.path.join(keras_home, "hf_home")))
        stack.enter_context(_set_aside_deferred_variables())
        limit = MAX_WEIGHTS if max_weights is None else max_weights
        stack.enter_context(_weight_budget(limit))
        yield


@contextlib.contextmanager
def _fixture_hub(root: str) -> Iterator[None]:
    """The Hub, offline, as a cache of the tiny fixture repositories: the
    names the docs load (`from_pretrained("vit_base_patch16_224....")`)
    give tiny models, and any other name fails as offline."""
    from helpers import hub_cache
    from huggingface_hub import constants

    cache = (
        hub_cache(root)
        if not os.path.isdir(os.path.join(root, "hub"))
        else (os.path.join(root, "hub"))
    )
    with (
        mock.patch.object(constants, "HF_HUB_CACHE", cache),
        mock.patch.object(constants, "HF_HUB_OFFLINE", True),
    ):
        yield


# --- Files the docs name -----------------------------------------------------


def timm_checkpoint(
    variant: str, image_size: int, num_classes: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """Random tensors with the keys and shapes of a timm `VisionTransformer`.

    Sizes come from `keras_vit.VARIANTS`, so inside `tiny_world` this is the
    tiny model's checkpoint. Plain ViTs with a class token only.
    """
    from keras_vit.models import parse_variant

    spec = parse_variant(variant)
    d, m, p = spec.variant.hidden_dim, spec.variant.mlp_dim, spec.patch_size
    tokens = (image_size // p) ** 2 + 1
    rng = np.random.default_rng(seed)

    def rand(*shape):
        return (0.02 * rng.standard_normal(shape)).astype("float32")

    out = {
        "patch_embed.proj.weight": rand(d, 3, p, p),
        "patch_embed.proj.bias": rand(d),
        "cls_token": rand(1, 1, d),
        "pos_embed": rand(1, tokens, d),
        "norm.weight": 1 + rand(d),
        "norm.bias": rand(d),
        "head.weight": rand(num_classes, d),
        "head.bias": rand(num_classes),
    }
    for i in range(spec.variant.depth):
        b = f"blocks.{i}."
        out |= {
            b + "norm1.weight": 1 + rand(d),
            b + "norm1.bias": rand(d),
            b + "attn.qkv.weight": rand(3 * d, d),
            b + "attn.qkv.bias": rand(3 * d),
            b + "attn.proj.weight": rand(d, d),
            b + "attn.proj.bias": rand(d),
            b + "norm2.weight": 1 + rand(d),
            b + "norm2.bias": rand(d),
            b + "mlp.fc1.weight": rand(m, d),
            b + "mlp.fc1.bias": rand(m),
            b + "mlp.fc2.weight": rand(d, m),
            b + "mlp.fc2.bias": rand(d),
        }
    return out


def _images(batch: int, size: int, seed: int = 0) -> np.ndarray:
    """`(batch, size, size, 3)` float32 in `[-1, 1]`."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, size, size, 3)).astype("float32")


def _jpeg(size: int = 64, seed: int = 0) -> bytes:
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


# --- Preludes: the names each page's prose assumes ---------------------------


def _models_prelude() -> dict:
    import keras_vit

    model = keras_vit.ViT_B16(num_classes=10)
    posemb = model.get_layer("posembed_input").get_weights()[0]  # (1, 197, D)
    return {
        "model": model,
        "model_224": model,
        "images": _images(2, 224),
        "posemb": posemb,
    }


def _weights_prelude() -> dict:
    return {"images": _images(2, 224)}


def _analysis_prelude() -> dict:
    import keras_vit

    # The digits model of `python -m recipes.train --config digits`.
    model = keras_vit.ViT(
        "test/2", num_classes=10, image_size=16, pooling="gap", class_token=False
    )
    os.makedirs("runs/digits", exist_ok=True)
    model.save("runs/digits/final.keras")
    return {"images": _images(4, 16)}


def _self_supervision_prelude() -> dict:
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x_train, x_test = _images(50, 224, seed=1), _images(10, 224, seed=2)
    y_train, y_test = np.repeat([0, 1], 25), np.repeat([0, 1], 5)
    features = rng.standard_normal((50, 8)).astype("float32")
    labelled = tf.data.Dataset.from_tensor_slices(
        (_images(4, 224), np.array([0, 1, 0, 1]))
    )
    return {
        "images_dataset": tf.data.Dataset.from_tensor_slices(_images(4, 224)).batch(2),
        "x_train": x_train,
        "y_train": y_train,
        "x_test": x_test,
        "y_test": y_test,
        "train_features": features,
        "train_labels": y_train,
        "test_features": features[:10],
        "test_labels": y_test,
        "train": labelled.batch(2),
    }


def _serving_prelude() -> dict:
    import keras_vit

    keras_vit.ViT_B16(num_classes=10).save("vit_b16_cifar10.keras")
    with open("cat.jpg", "wb") as f:
        f.write(_jpeg())
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
             "horse", "ship", "truck"]  # fmt: skip
    pixels = np.random.default_rng(0).integers(0, 256, (1, 224, 224, 3), np.uint8)
    return {"cifar10_names": names, "jpeg_bytes": _jpeg(seed=1), "batch": pixels}


def _migrating_prelude() -> dict:
    from keras_vit.weights import registry

    # timm's `vit_small_patch16_224` file as the Hub serves it (model.safetensors).
    write_safetensors("model.safetensors", timm_checkpoint("S/16", 224, 1000))
    # vit-keras's copy of the original ImageNet-21k B/16 file.
    arrays = synthetic_checkpoint(registry.find("imagenet21k", "B/16"))
    np.savez("ViT-B_16_imagenet21k.npz", **arrays)
    return {}


def _readme_prelude() -> dict:
    import keras_vit

    # A run's own model, as `recipes.train` writes it.
    os.makedirs("my_run", exist_ok=True)
    keras_vit.ViT("B/16", num_classes=10).save("my_run/final.keras")
    with open("cat.jpg", "wb") as f:
        f.write(_jpeg())
    return {}


def _predict_prelude() -> dict:
    for name, seed in (("cat.jpg", 0), ("dog.jpg", 1)):
        with open(name, "wb") as f:
            f.write(_jpeg(seed=seed))
    return {}


PRELUDES: dict[str, Callable[[], dict]] = {
    "README.md": _readme_prelude,
    "docs/models.md": _models_prelude,
    "docs/weights.md": _weights_prelude,
    "docs/analysis.md": _analysis_prelude,
    "docs/self_supervision.md": _self_supervision_prelude,
    "docs/serving.md": _serving_prelude,
    "docs/migrating.md": _migrating_prelude,
    "docs/predict.md": _predict_prelude,
}
