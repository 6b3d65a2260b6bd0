"""The known pretrained checkpoints, and where to find them on disk.

The checkpoints are those the model zoo's families declare
(`keras_vit.models.zoo`): the paper's and AugReg's original `.npz` files
from the public `vit_models` bucket of google-research/vision_transformer,
and timm's `.safetensors` files on the Hugging Face Hub
(`https://huggingface.co/timm/<name>`) for DeiT, DeiT III, DINOv2, SigLIP
and FlexiViT. Each family's file lists its tags, timm names, licences and
input contracts.

A file is looked up in the Keras cache (`$KERAS_HOME/keras_vit/`, by
default `~/.keras/keras_vit/`), downloaded there with
`keras.utils.get_file` when it is missing, and when that fails (offline)
a `WeightsNotFoundError` says which file to put in which directory.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Sequence

import keras

from keras_vit._export import export
from keras_vit.models import zoo
from keras_vit.models.zoo import timm_catalog
from keras_vit.models.zoo.registry import BUCKET_URL as BASE_URL  # noqa: F401
from keras_vit.models.zoo.registry import HF_URL  # noqa: F401
from keras_vit.models.zoo.registry import PretrainedWeights
from keras_vit.weights.errors import WeightsNotFoundError

CACHE_SUBDIR = "keras_vit"
# The step that replaces a bad cached file (huggingface_hub re-links a
# cached blob of the same name: deleting the link does not help).
REFETCH = (
    "download it again: keras_vit.from_pretrained({name!r}, force_download=True) "
    "(command line: keras-vit predict, validate or convert --force-download)."
)


class _Checkpoints(Sequence):
    """Every family's checkpoints, read from the zoo when asked (a family
    registered later is listed too)."""

    def __getitem__(self, index):
        return zoo.checkpoints()[index]

    def __len__(self) -> int:
        return len(zoo.checkpoints())

    def __iter__(self):  # One reading of the zoo, not one per row.
        return iter(zoo.checkpoints())


PRETRAINED_WEIGHTS: Sequence[PretrainedWeights] = _Checkpoints()
export("keras_vit.weights.PRETRAINED_WEIGHTS").constant(__name__, "PRETRAINED_WEIGHTS")


@export("keras_vit.weights.list_weights")
def list_weights(
    pattern: str | None = None, *, family: str | None = None
) -> list[PretrainedWeights]:
    """Every checkpoint `keras_vit.from_pretrained` loads by name, all or
    those a pattern selects.

    The package's own table (the original `.npz` files and the zoo's timm
    checkpoints, `PRETRAINED_WEIGHTS`), then every other timm checkpoint
    keras_vit builds (`keras_vit.models.zoo.timm_catalog`: timm's
    `list_models(pretrained=True)` over the ViT and EVA architectures,
    each checked against timm). Each row has its family, variant (sizes),
    licence, input contract (`preprocessing`) and `pinned`: whether its Hub
    revision and SHA-256 are known. None of the Hub rows is pinned: they
    are read at their repository's `main` (pin one with
    `from_pretrained(name, revision=...)`).

    Args:
        pattern: A variant (`"B/16"`, `"R50+B/16"`), a name or tag, or a
            shell-style wildcard matched against names, tags and variants
            (`"vit_tiny*"`, `"*augreg*"`, `"deit3_*"`, `"*/14"`); `None`
            for all.
        family: Only this family's (`keras_vit.models.zoo.named`), e.g.
            `"dinov2"` or `"vit"`.

    Returns:
        A list of `PretrainedWeights` (each `.name` loads with
        `keras_vit.from_pretrained`).

    Example:

    >>> [w.name for w in keras_vit.weights.list_weights("vit_tiny_patch16_224*")]
    ['vit_tiny_patch16_224.augreg_in21k', 'vit_tiny_patch16_224.augreg_in21k_ft_in1k']
    >>> [w.tag for w in keras_vit.weights.list_weights("H/14", family="vit")][:1]
    ['imagenet21k']
    """
    rows = list(PRETRAINED_WEIGHTS)
    listed = {w.name for w in rows}
    rows += [w for w in timm_catalog.checkpoints() if w.name not in listed]
    if family is not None:
        known = {f.name for f in zoo.families()} | {w.family for w in rows}
        if family not in known:
            raise ValueError(
                f"Unknown family {family!r}; known: {sorted(known - {None})}."
            )
        rows = [w for w in rows if w.family == family]
    if pattern is None:
        return rows
    return [
        w
        for w in rows
        if any(fnmatch.fnmatchcase(f, pattern) for f in (w.name, w.tag, w.variant))
    ]


def find_name(name: str) -> PretrainedWeights | None:
    """The checkpoint whose `name` is `name`, or `None`."""
    return next((w for w in PRETRAINED_WEIGHTS if w.name == name), None)


def is_tag(weights) -> bool:
    """Whether `weights` names a known tag (rather than a file)."""
    tags = {w.tag for w in PRETRAINED_WEIGHTS}
    return isinstance(weights, str) and weights in tags


def find(tag: str, variant: str | None) -> PretrainedWeights:
    """The checkpoint `tag` of `variant`.

    Raises:
        ValueError: for an unknown tag, or a tag that has no checkpoint of
            this variant (the message lists what exists).
    """
    matches = [w for w in PRETRAINED_WEIGHTS if w.tag == tag]
    if not matches:
        tags = sorted({w.tag for w in PRETRAINED_WEIGHTS})
        raise ValueError(
            f"Unknown weights {tag!r}: not a known tag and not an existing "
            f"file. Known tags: {tags}."
        )
    for entry in matches:
        if entry.variant == variant:
            return entry
    variants = [w.variant for w in matches]
    raise ValueError(
        f"There are no {tag!r} weights for a {variant or 'custom'} model. "
        f"{tag!r} exists for: {variants}."
    )


@export("keras_vit.weights.cache_directory")
def cache_directory(cache_dir: str | os.PathLike | None = None) -> str:
    """The directory checkpoints are cached in.

    `cache_dir/keras_vit` when given, else `$KERAS_HOME/keras_vit`, else
    `~/.keras/keras_vit`, as `keras.utils.get_file` uses.
    """
    if cache_dir is None:
        cache_dir = os.environ.get("KERAS_HOME") or os.path.join(
            os.path.expanduser("~"), ".keras"
        )
    return os.path.join(os.fspath(cache_dir), CACHE_SUBDIR)


def check_sha256(entry: PretrainedWeights, path: str) -> None:
    """Raises `ValueError` when `path` is not `entry`'s file (its SHA-256
    is known and differs); nothing when it matches or is not known."""
    if entry.sha256 is not None and _sha256(path) != entry.sha256:
        raise ValueError(
            f"{path!r} does not have the SHA-256 of the {entry.tag!r} "
            f"{entry.variant} weights ({entry.sha256}); "
            + REFETCH.format(name=entry.name)
        )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(
    entry: PretrainedWeights,
    cache_dir: str | os.PathLike | None = None,
    *,
    force_download: bool = False,
) -> str:
    """The local path of `entry`'s file: cached, or downloaded.

    Args:
        entry: A `PretrainedWeights`.
        cache_dir: Overrides the cache root (see `cache_directory`).
        force_download: Download the file again even when it is cached.

    Returns:
        The path to the `.npz` (or timm `.safetensors`) file.

    Raises:
        WeightsNotFoundError: when the file is not cached and the download
            fails; the message names the file, the URL and the directory.
        ValueError: when a cached file's SHA-256 differs from the known one.
    """
    directory = cache_directory(cache_dir)
    path = os.path.join(directory, entry.file_name)
    if not os.path.exists(path) or force_download:
        try:
            path = keras.utils.get_file(
                fname=entry.file_name,
                origin=entry.url,
                file_hash=entry.sha256,
                hash_algorithm="sha256",
                cache_subdir=CACHE_SUBDIR,
                cache_dir=os.path.dirname(directory),
                force_download=force_download,
            )
        except Exception as error:  # offline, DNS, HTTP errors, ...
            raise WeightsNotFoundError(
                f"The {entry.tag!r} weights of {entry.variant} are not cached "
                f"and could not be downloaded ({type(error).__name__}: "
                f"{error}). Download {entry.url} and save it as "
                f"{entry.file_name!r} in the directory {directory!r} (or set "
                "KERAS_HOME to the directory that holds keras_vit/)."
            ) from error
    check_sha256(entry, path)
    return path
