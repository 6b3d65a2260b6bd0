"""The known pretrained checkpoints, and where to find them on disk.

Every checkpoint is an original `.npz` file from the public `vit_models`
bucket of google-research/vision_transformer:

- `imagenet21k`: the paper's ImageNet-21k pre-training (21,843 classes, with
  the `pre_logits` layer; the L/32 and H/14 heads were zeroed by the
  authors, so use them for fine-tuning).
- `imagenet21k+imagenet2012`: those models fine-tuned on ImageNet-1k at
  384 px; `imagenet21k+imagenet2012_224` at 224 px (B/16, L/16).
- `augreg_in21k`, `augreg_in21k_ft_in1k`, `augreg_in21k_ft_in1k_384`: the
  "How to train your ViT?" (AugReg) checkpoints, pre-trained on
  ImageNet-21k, and fine-tuned on ImageNet-1k at 224 or 384 px.

The newer families' checkpoints are timm's `.safetensors` files on the
Hugging Face hub (`https://huggingface.co/timm/<name>`), as listed in
timm's `default_cfgs` (timm 1.0.31):

- `deit3_in1k`, `deit3_in21k_ft_in1k`: DeiT III S/B/L at /16, 224 px
  (`deit3_*_patch16_224.fb_in1k`, `.fb_in22k_ft_in1k`); build the model
  with `keras_vit.models.DeiT3_*`.
- `dinov2_lvd142m`: DINOv2 with 4 registers, S/B/L/g at /14, 518 px, no
  head (`vit_*_patch14_reg4_dinov2.lvd142m`); `keras_vit.models.DINOv2_*`.
- `siglip_webli`, `siglip_v2_webli`: SigLIP (v1, v2) image towers, B/16
  and So400m/14 at 224 px, no head (`vit_*_siglip_224.webli`,
  `.v2_webli`); `keras_vit.models.SigLIP_*`.

A file is looked up in the Keras cache (`$KERAS_HOME/keras_vit/`, by
default `~/.keras/keras_vit/`), downloaded there with
`keras.utils.get_file` when it is missing, and when that fails (offline)
a `WeightsNotFoundError` says which file to put in which directory.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import os

import keras

from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.preprocessing import PAPER
from keras_vit.models.preprocessing import SIGLIP
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.variants import parse_variant
from keras_vit.weights.errors import WeightsNotFoundError

BASE_URL = "https://storage.googleapis.com/vit_models"
HF_URL = "https://huggingface.co"
CACHE_SUBDIR = "keras_vit"
IMAGENET21K_CLASSES = 21843
IMAGENET1K_CLASSES = 1000


@dataclasses.dataclass(frozen=True)
class PretrainedWeights:
    """One known checkpoint.

    Attributes:
        tag: The name passed as `weights=`, e.g. `"imagenet21k"`.
        variant: The `keras_vit.ViT` variant, e.g. `"B/16"`.
        file_name: The file's name in the cache directory.
        url: Where it is downloaded from.
        image_size: The resolution it was trained at (its position-embedding
            grid is `image_size / patch`).
        num_classes: Classes of its head.
        representation_size: Width of its `pre_logits` layer, or `None`.
        sha256: The file's SHA-256, or `None` where it is not known.
        family: The `keras_vit.models.options.FAMILIES` key of the encoder
            it needs (e.g. `"dinov2"`), or `None` for the paper's ViT.
        preprocessing: The input contract it was trained and evaluated
            with (`keras_vit.Preprocessing`).
        hub_repo: Its Hugging Face Hub repository (`"timm/<name>"`) when it
            is fetched from there, else `None` (a `vit_models` bucket file).
        license: The licence its publisher states.
        timm_name: Its timm name, for checkpoints timm hosts; also its name.
        revision: The Hub commit its files are read at (`hub_repo`), or
            `None` for the repository's `main`.
    """

    tag: str
    variant: str
    file_name: str
    url: str
    image_size: int
    num_classes: int
    representation_size: int | None = None
    sha256: str | None = None
    family: str | None = None
    preprocessing: Preprocessing = PAPER
    hub_repo: str | None = None
    license: str | None = "apache-2.0"
    timm_name: str | None = None
    revision: str | None = None

    @property
    def name(self) -> str:
        """The name `keras_vit.from_pretrained` takes: the timm name of a
        checkpoint timm hosts, else `"<model>.<tag>"` (e.g.
        `"vit_b16.augreg_in21k"`)."""
        if self.timm_name is not None:
            return self.timm_name
        return f"{parse_variant(self.variant).name}.{self.tag}"


def _original(tag, variant, name, image_size, num_classes, representation_size):
    folder = "imagenet21k" if tag == "imagenet21k" else "imagenet21k+imagenet2012"
    return PretrainedWeights(
        tag=tag,
        variant=variant,
        file_name=f"{folder}_{name}.npz",
        url=f"{BASE_URL}/{folder}/{name}.npz",
        image_size=image_size,
        num_classes=num_classes,
        representation_size=representation_size,
        preprocessing=PAPER.replace(image_size=(image_size, image_size)),
    )


def _augreg(tag, variant, name, image_size, num_classes):
    return PretrainedWeights(
        tag=tag,
        variant=variant,
        file_name=f"{name}.npz",
        url=f"{BASE_URL}/augreg/{name}.npz",
        image_size=image_size,
        num_classes=num_classes,
        preprocessing=PAPER.replace(image_size=(image_size, image_size)),
    )


_I1K = "--imagenet2012-steps_20k"
# (variant, upstream AugReg run, fine-tune learning rate at 224, at 384).
# The run names are those of the bucket, as listed by the AugReg release.
_AUGREG = (
    ("Ti/16", "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
     "0.03", "0.03"),
    ("S/16", "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
     "0.03", "0.03"),
    ("S/32", "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
     "0.03", "0.03"),
    ("B/16", "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
     "0.01", "0.01"),
    ("B/8", "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
     "0.01", None),
    ("L/16", "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
     "0.01", "0.01"),
)  # fmt: skip

# Checkpoints of other upstream runs than the table above:
# (tag, variant, file stem, resolution, classes).
_B32, _R26, _R50L = (
    "B_32-i21k-300ep-lr_0.001",
    "R26_S_32-i21k-300ep-lr_0.001",
    ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"),
)
_AUGREG_EXTRA = (
    ("augreg_in21k", "B/32", f"{_B32}-aug_medium1-wd_0.03-do_0.0-sd_0.0",
     224, IMAGENET21K_CLASSES),
    ("augreg_in21k_ft_in1k", "B/32",
     f"{_B32}-aug_medium1-wd_0.03-do_0.0-sd_0.0{_I1K}-lr_0.03-res_224",
     224, IMAGENET1K_CLASSES),
    ("augreg_in21k_ft_in1k_384", "B/32",
     f"{_B32}-aug_light1-wd_0.1-do_0.0-sd_0.0{_I1K}-lr_0.03-res_384",
     384, IMAGENET1K_CLASSES),
    ("augreg_in21k", "R26+S/32", f"{_R26}-aug_light1-wd_0.1-do_0.0-sd_0.0",
     224, IMAGENET21K_CLASSES),
    ("augreg_in21k_ft_in1k", "R26+S/32",
     f"{_R26}-aug_light0-wd_0.03-do_0.1-sd_0.1{_I1K}-lr_0.03-res_224",
     224, IMAGENET1K_CLASSES),
    ("augreg_in21k_ft_in1k_384", "R26+S/32",
     f"{_R26}-aug_light1-wd_0.1-do_0.0-sd_0.0{_I1K}-lr_0.01-res_384",
     384, IMAGENET1K_CLASSES),
    ("augreg_in21k", "R50+L/32", _R50L, 224, IMAGENET21K_CLASSES),
    ("augreg_in21k_ft_in1k", "R50+L/32", f"{_R50L}{_I1K}-lr_0.01-res_224",
     224, IMAGENET1K_CLASSES),
    ("augreg_in21k_ft_in1k_384", "R50+L/32", f"{_R50L}{_I1K}-lr_0.01-res_384",
     384, IMAGENET1K_CLASSES),
)  # fmt: skip


# timm checkpoints of the newer families: (tag, variant, timm name with its
# pretrained tag, resolution, classes, family). Each is the hub repository
# `timm/<name>` holding `model.safetensors`; the family is a key of
# `keras_vit.models.options.FAMILIES`.
_TIMM_FAMILIES = (
    ("deit3_in1k", "S/16", "deit3_small_patch16_224.fb_in1k", 224, 1000, "deit3"),
    ("deit3_in1k", "B/16", "deit3_base_patch16_224.fb_in1k", 224, 1000, "deit3"),
    ("deit3_in1k", "L/16", "deit3_large_patch16_224.fb_in1k", 224, 1000, "deit3"),
    ("deit3_in21k_ft_in1k", "S/16", "deit3_small_patch16_224.fb_in22k_ft_in1k",
     224, 1000, "deit3"),
    ("deit3_in21k_ft_in1k", "B/16", "deit3_base_patch16_224.fb_in22k_ft_in1k",
     224, 1000, "deit3"),
    ("deit3_in21k_ft_in1k", "L/16", "deit3_large_patch16_224.fb_in22k_ft_in1k",
     224, 1000, "deit3"),
    ("dinov2_lvd142m", "S/14", "vit_small_patch14_reg4_dinov2.lvd142m", 518, 0,
     "dinov2"),
    ("dinov2_lvd142m", "B/14", "vit_base_patch14_reg4_dinov2.lvd142m", 518, 0,
     "dinov2"),
    ("dinov2_lvd142m", "L/14", "vit_large_patch14_reg4_dinov2.lvd142m", 518, 0,
     "dinov2"),
    ("dinov2_lvd142m", "g/14", "vit_giant_patch14_reg4_dinov2.lvd142m", 518, 0,
     "dinov2_swiglu"),
    ("siglip_webli", "B/16", "vit_base_patch16_siglip_224.webli", 224, 0, "siglip"),
    ("siglip_webli", "So400m/14", "vit_so400m_patch14_siglip_224.webli", 224, 0,
     "siglip"),
    ("siglip_v2_webli", "B/16", "vit_base_patch16_siglip_224.v2_webli", 224, 0,
     "siglip"),
    ("siglip_v2_webli", "So400m/14", "vit_so400m_patch14_siglip_224.v2_webli",
     224, 0, "siglip"),
)  # fmt: skip


# The input contracts of the timm checkpoints, as timm 1.0.31's
# `pretrained_cfg` of each (resize filter, crop fraction, mean/std).
_TIMM_CONTRACTS = {
    "deit3": IMAGENET,
    "dinov2": IMAGENET,
    "dinov2_swiglu": IMAGENET,
    "siglip": SIGLIP,
}
# Where a checkpoint's crop differs from its family's (crop_pct).
_TIMM_CROPS = {"fb_in1k": 0.9, "webli": 0.9, "v2_webli": 0.9}
# The licences timm's configs state.
_TIMM_LICENSES = {"deit3": "apache-2.0", "dinov2": "apache-2.0",
                  "dinov2_swiglu": "apache-2.0", "siglip": "apache-2.0"}  # fmt: skip


def _timm(tag, variant, name, image_size, num_classes, family):
    crop = _TIMM_CROPS.get(name.split(".")[-1], _TIMM_CONTRACTS[family].crop_fraction)
    contract = _TIMM_CONTRACTS[family].replace(
        crop_fraction=crop,
        image_size=(image_size, image_size),
        source=f"timm pretrained_cfg of {name}",
    )
    return PretrainedWeights(
        tag=tag,
        variant=variant,
        file_name=f"timm_{name}.safetensors",
        url=f"{HF_URL}/timm/{name}/resolve/main/model.safetensors",
        image_size=image_size,
        num_classes=num_classes,
        family=family,
        preprocessing=contract,
        hub_repo=f"timm/{name}",
        license=_TIMM_LICENSES[family],
        timm_name=name,
    )


def _build_table() -> tuple[PretrainedWeights, ...]:
    table = []
    # The paper's checkpoints: (variant, file stem, pre-logits width).
    for variant, name, width in (
        ("B/16", "ViT-B_16", 768),
        ("B/32", "ViT-B_32", 768),
        ("L/16", "ViT-L_16", 1024),
        ("L/32", "ViT-L_32", 1024),
        ("H/14", "ViT-H_14", 1280),
        ("R50+B/16", "R50+ViT-B_16", 768),
    ):
        table.append(
            _original("imagenet21k", variant, name, 224, IMAGENET21K_CLASSES, width)
        )
        if variant != "H/14":  # no public ImageNet-1k fine-tune of H/14
            table.append(
                _original(
                    "imagenet21k+imagenet2012",
                    variant,
                    name,
                    384,
                    IMAGENET1K_CLASSES,
                    None,
                )  # fmt: skip
            )
    for variant, name in (("B/16", "ViT-B_16-224"), ("L/16", "ViT-L_16-224")):
        table.append(
            _original(
                "imagenet21k+imagenet2012_224",
                variant,
                name,
                224,
                IMAGENET1K_CLASSES,
                None,
            )  # fmt: skip
        )
    for variant, run, lr_224, lr_384 in _AUGREG:
        table.append(_augreg("augreg_in21k", variant, run, 224, IMAGENET21K_CLASSES))
        table.append(
            _augreg(
                "augreg_in21k_ft_in1k",
                variant,
                f"{run}{_I1K}-lr_{lr_224}-res_224",
                224,
                IMAGENET1K_CLASSES,
            )  # fmt: skip
        )
        if lr_384 is not None:
            table.append(
                _augreg(
                    "augreg_in21k_ft_in1k_384",
                    variant,
                    f"{run}{_I1K}-lr_{lr_384}-res_384",
                    384,
                    IMAGENET1K_CLASSES,
                )  # fmt: skip
            )
    for tag, variant, name, image_size, classes in _AUGREG_EXTRA:
        table.append(_augreg(tag, variant, name, image_size, classes))
    for row in _TIMM_FAMILIES:
        table.append(_timm(*row))
    return tuple(table)


PRETRAINED_WEIGHTS = _build_table()


def list_weights(pattern: str | None = None) -> list[PretrainedWeights]:
    """The known checkpoints, all or those a pattern selects.

    Args:
        pattern: A variant (`"B/16"`, `"R50+B/16"`), a name or tag, or a
            shell-style wildcard matched against names, tags and variants
            (`"*augreg*"`, `"deit3_*"`, `"*/14"`); `None` for all.

    Returns:
        A list of `PretrainedWeights` (each `.name` loads with
        `keras_vit.from_pretrained`).

    Example:

    >>> [w.tag for w in keras_vit.weights.list_weights("H/14")]
    ['imagenet21k']
    >>> len(keras_vit.weights.list_weights("*dinov2*"))
    4
    """
    if pattern is None:
        return list(PRETRAINED_WEIGHTS)
    return [
        w
        for w in PRETRAINED_WEIGHTS
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
            f"{entry.variant} weights ({entry.sha256}); delete it and retry."
        )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(2**20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(entry: PretrainedWeights, cache_dir: str | os.PathLike | None = None) -> str:
    """The local path of `entry`'s file: cached, or downloaded.

    Args:
        entry: A `PretrainedWeights`.
        cache_dir: Overrides the cache root (see `cache_directory`).

    Returns:
        The path to the `.npz` (or timm `.safetensors`) file.

    Raises:
        WeightsNotFoundError: when the file is not cached and the download
            fails; the message names the file, the URL and the directory.
        ValueError: when a cached file's SHA-256 differs from the known one.
    """
    directory = cache_directory(cache_dir)
    path = os.path.join(directory, entry.file_name)
    if not os.path.exists(path):
        try:
            path = keras.utils.get_file(
                fname=entry.file_name,
                origin=entry.url,
                file_hash=entry.sha256,
                hash_algorithm="sha256",
                cache_subdir=CACHE_SUBDIR,
                cache_dir=os.path.dirname(directory),
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
