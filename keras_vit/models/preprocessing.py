"""The input contract of a checkpoint: how pixels become a model's inputs.

Every checkpoint was trained and evaluated on images prepared one way: resized
with some interpolation, centre-cropped by some fraction, and normalised with
some per-channel mean and standard deviation. Feeding it pixels prepared
another way costs accuracy without any error (DeiT III and DINOv2 expect
ImageNet's mean/std, the paper's ViT and SigLIP the `[-1, 1]` range). A
`Preprocessing` records that contract; every keras_vit model carries one
(`model.preprocessing`, kept through `.keras` save and load), and everything
that feeds pixels reads it: `include_preprocessing=True`, the recipes' input
pipelines, the serving signatures and exports, `keras_vit.predict`.

The fields follow timm's `pretrained_cfg` (`mean`, `std`, `interpolation`,
`crop_pct`, `crop_mode`, `input_size`), so a timm or Hugging Face config
converts without loss (`from_timm`, `from_transformers`, `to_timm`).

Example:

```python
prep = keras_vit.Preprocessing.from_timm(
    {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225),
     "interpolation": "bicubic", "crop_pct": 0.9, "input_size": (3, 224, 224)}
)
model = keras_vit.ViT("S/16", preprocessing=prep, include_preprocessing=True)
model.preprocessing.describe()
# 'mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225); bicubic resize ...'
```
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping

from keras_vit._export import export

# The per-channel statistics of the published checkpoints, of pixels in
# [0, 1]: the paper's and SigLIP's "Inception" range [-1, 1], and ImageNet's
# (DeiT III, DINOv2). Values as timm's `timm.data.constants`.
INCEPTION_MEAN = (0.5, 0.5, 0.5)
export("keras_vit.models.INCEPTION_MEAN").constant(__name__, "INCEPTION_MEAN")
INCEPTION_STD = (0.5, 0.5, 0.5)
export("keras_vit.models.INCEPTION_STD").constant(__name__, "INCEPTION_STD")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
export("keras_vit.models.IMAGENET_MEAN").constant(__name__, "IMAGENET_MEAN")
IMAGENET_STD = (0.229, 0.224, 0.225)
export("keras_vit.models.IMAGENET_STD").constant(__name__, "IMAGENET_STD")

INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "area", "lanczos3")
# "squash": the whole image is resized to size / crop_fraction, aspect ratio
# not kept; "center": the shorter side is resized to size / crop_fraction,
# aspect kept. Both then cut the central `size` window (timm's crop modes).
CROP_MODES = ("squash", "center")


def _triple(value, name: str) -> tuple[float, float, float]:
    if isinstance(value, numbers.Real):
        value = (value,) * 3
    try:
        values = tuple(float(v) for v in value)
    except TypeError:
        values = ()
    if len(values) != 3:
        raise ValueError(
            f"`{name}` must be three numbers (R, G, B) or one. Received: {value!r}"
        )
    return values


@export("keras_vit.Preprocessing", "keras_vit.models.Preprocessing")
@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How a checkpoint's inputs were prepared from RGB pixels.

    Attributes:
        mean: Per-channel mean `(R, G, B)` of pixels scaled to `[0, 1]`.
        std: Per-channel standard deviation, same scale. The model's input
            is `(pixels / 255 - mean) / std`.
        interpolation: The resize filter: one of `INTERPOLATIONS`.
        crop_fraction: timm's `crop_pct`: images are resized to
            `image_size / crop_fraction` and the central `image_size`
            window is kept. 1.0 keeps the whole resized image.
        crop_mode: `"squash"` (the whole image resized, aspect ratio not
            kept, as the paper's evaluation) or `"center"` (the shorter side
            resized, aspect kept, as timm's default).
        antialias: Whether downscaling filters over the source pixels (as
            PIL, which timm and transformers resize with). The paper's
            evaluation resizes with TensorFlow's plain bilinear (`False`).
        image_size: `(height, width)` the checkpoint was evaluated at, or
            `None` to use the model's input size.
        source: Where the contract was read from (e.g. a timm name), for
            messages and model cards; not compared.

    The defaults are the paper's: `[-1, 1]` inputs, plain bilinear resize of
    the whole image.

    Example:

    ```python
    prep = keras_vit.Preprocessing(mean=keras_vit.models.IMAGENET_MEAN,
                                   std=keras_vit.models.IMAGENET_STD)
    prep.scale, prep.offset  # what the model's Rescaling layer applies
    ```
    """

    mean: tuple[float, float, float] = INCEPTION_MEAN
    std: tuple[float, float, float] = INCEPTION_STD
    interpolation: str = "bilinear"
    crop_fraction: float = 1.0
    crop_mode: str = "squash"
    antialias: bool = False
    image_size: tuple[int, int] | None = None
    source: str = dataclasses.field(default="", compare=False)

    def __post_init__(self):
        mean = _triple(self.mean, "mean")
        std = _triple(self.std, "std")
        if not all(math.isfinite(v) for v in mean):
            raise ValueError(f"`mean` must be finite. Received: {self.mean!r}")
        if not all(math.isfinite(v) and v > 0 for v in std):
            raise ValueError(
                f"`std` must be positive and finite. Received: {self.std!r}"
            )
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"Unknown interpolation {self.interpolation!r}; expected one of "
                f"{list(INTERPOLATIONS)}."
            )
        fraction = self.crop_fraction
        if not (
            isinstance(fraction, numbers.Real)
            and not isinstance(fraction, bool)
            and 0.0 < float(fraction) <= 1.0
        ):
            raise ValueError(
                f"`crop_fraction` must be in (0, 1]. Received: {fraction!r}"
            )
        if self.crop_mode not in CROP_MODES:
            raise ValueError(
                f"Unknown crop_mode {self.crop_mode!r}; expected one of "
                f"{list(CROP_MODES)}."
            )
        size = self.image_size
        if size is not None:
            size = tuple(
                int(s) for s in ((size, size) if isinstance(size, int) else size)
            )
            if len(size) != 2 or min(size) < 1:
                raise ValueError(
                    "`image_size` must be None or a positive (height, width). "
                    f"Received: {self.image_size!r}"
                )
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "std", std)
        object.__setattr__(self, "crop_fraction", float(fraction))
        object.__setattr__(self, "antialias", bool(self.antialias))
        object.__setattr__(self, "image_size", size)
        object.__setattr__(self, "source", str(self.source or ""))

    # -- what the model applies ---------------------------------------------
    @property
    def scale(self) -> tuple[float, float, float]:
        """Per-channel factor on `[0, 255]` pixels: `1 / (255 * std)`."""
        return tuple(1.0 / (255.0 * s) for s in self.std)

    @property
    def offset(self) -> tuple[float, float, float]:
        """Per-channel offset after `scale`: `-mean / std`."""
        return tuple(-m / s for m, s in zip(self.mean, self.std, strict=True))

    @property
    def is_inception(self) -> bool:
        """Whether inputs are `[-1, 1]` (mean and std 0.5 in every channel)."""
        return self.mean == INCEPTION_MEAN and self.std == INCEPTION_STD

    def resize_size(self, image_size) -> tuple[int, int]:
        """The size images are resized to before the central crop.

        timm's rule: `floor(size / crop_fraction)` per side (for "center"
        with a square target, the shorter side's length).
        """
        height, width = (
            (image_size, image_size) if isinstance(image_size, int) else image_size
        )
        return (
            int(math.floor(height / self.crop_fraction)),
            int(math.floor(width / self.crop_fraction)),
        )

    def describe(self) -> str:
        """One line for logs and model cards."""
        mean = ", ".join(f"{v:g}" for v in self.mean)
        std = ", ".join(f"{v:g}" for v in self.std)
        crop = (
            "whole image"
            if self.crop_fraction == 1.0 and self.crop_mode == "squash"
            else f"{self.crop_mode} crop {self.crop_fraction!r}"
        )
        size = (
            ""
            if self.image_size is None
            else f" at {self.image_size[0]}x{self.image_size[1]}"
        )
        aa = ", antialiased" if self.antialias else ""
        return (
            f"mean ({mean}), std ({std}); {self.interpolation} resize{aa}, {crop}{size}"
        )

    # -- serialisation -------------------------------------------------------
    def get_config(self) -> dict:
        """A JSON-able dict; `Preprocessing.from_config` inverts it."""
        config = dataclasses.asdict(self)
        config["mean"] = list(self.mean)
        config["std"] = list(self.std)
        config["image_size"] = (
            None if self.image_size is None else list(self.image_size)
        )
        return config

    @classmethod
    def from_config(cls, config: Mapping) -> Preprocessing:
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise ValueError(
                f"Unknown preprocessing fields {unknown}; known: {sorted(fields)}."
            )
        return cls(**dict(config))

    @classmethod
    def from_timm(cls, cfg: Mapping, source: str = "") -> Preprocessing:
        """Reads timm's `pretrained_cfg` (or a `data_config`).

        Missing fields take timm's defaults (ImageNet mean/std, bicubic,
        `crop_pct` 0.875, centre crop), as `timm.data.resolve_data_config`.
        """
        size = cfg.get("test_input_size") or cfg.get("input_size")
        crop_mode = cfg.get("crop_mode") or "center"
        if crop_mode not in CROP_MODES:
            raise ValueError(
                f"timm crop_mode {crop_mode!r} is not supported; keras_vit "
                f"applies {list(CROP_MODES)}."
            )
        interpolation = cfg.get("interpolation") or "bicubic"
        if interpolation == "random":
            interpolation = "bilinear"
        return cls(
            mean=cfg.get("mean", IMAGENET_MEAN),
            std=cfg.get("std", IMAGENET_STD),
            interpolation=interpolation,
            crop_fraction=float(
                cfg.get("test_crop_pct") or cfg.get("crop_pct") or 0.875
            ),
            crop_mode=crop_mode,
            antialias=True,
            image_size=None if size is None else tuple(size[-2:]),
            source=source,
        )

    def to_timm(self, image_size=None) -> dict:
        """The timm `pretrained_cfg` fields of this contract."""
        size = self.image_size or (
            None if image_size is None else tuple(_pair(image_size))
        )
        cfg = {
            "mean": list(self.mean),
            "std": list(self.std),
            "interpolation": self.interpolation,
            "crop_pct": self.crop_fraction,
            "crop_mode": self.crop_mode,
        }
        if size is not None:
            cfg["input_size"] = [3, int(size[0]), int(size[1])]
        return cfg

    @classmethod
    def from_transformers(cls, processor: Mapping, source: str = "") -> Preprocessing:
        """Reads a transformers `preprocessor_config.json`.

        `ViTImageProcessor` resizes the whole image to `size`;
        `BitImageProcessor` (DINOv2) resizes the shorter side to
        `size["shortest_edge"]` and centre-crops `crop_size`. PIL's filters
        are numbered as in `PIL.Image.Resampling`.
        """
        resample = {0: "nearest", 1: "lanczos3", 2: "bilinear", 3: "bicubic"}
        interpolation = resample.get(int(processor.get("resample", 2)), "bilinear")
        size = processor.get("size") or {}
        crop = processor.get("crop_size") or {}
        mean = processor.get("image_mean", INCEPTION_MEAN)
        std = processor.get("image_std", INCEPTION_STD)
        if not processor.get("do_normalize", True):
            mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
        if processor.get("do_center_crop") and crop and "shortest_edge" in size:
            out = (int(crop["height"]), int(crop["width"]))
            fraction = min(out) / float(size["shortest_edge"])
            return cls(
                mean=mean, std=std, interpolation=interpolation,
                crop_fraction=min(fraction, 1.0), crop_mode="center",
                antialias=True, image_size=out, source=source,
            )  # fmt: skip
        if "height" in size:
            out = (int(size["height"]), int(size["width"]))
        elif "shortest_edge" in size:
            out = (int(size["shortest_edge"]),) * 2
        else:
            out = None
        return cls(
            mean=mean, std=std, interpolation=interpolation, crop_fraction=1.0,
            crop_mode="squash", antialias=True, image_size=out, source=source,
        )  # fmt: skip

    def replace(self, **changes) -> Preprocessing:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


# The paper's contract (and every model's default): [-1, 1], plain resize.
PAPER = Preprocessing(source="the paper's ViT")
# The families' contracts, as timm's pretrained configs of their checkpoints
# (`keras_vit.weights.registry` records each checkpoint's own).
IMAGENET = Preprocessing(
    mean=IMAGENET_MEAN, std=IMAGENET_STD, interpolation="bicubic",
    crop_fraction=1.0, crop_mode="center", antialias=True, source="ImageNet mean/std",
)  # fmt: skip
SIGLIP = Preprocessing(
    interpolation="bicubic", crop_fraction=0.9, crop_mode="center",
    antialias=True, source="SigLIP",
)  # fmt: skip


@export("keras_vit.models.preprocessing_of")
def preprocessing_of(model) -> Preprocessing:
    """The input contract `model` carries (`model.preprocessing`), or the
    paper's for a model that carries none (e.g. a plain `keras.Model` made
    from a keras_vit model's layers).

    Example:

    ```python
    preprocessing_of(keras_vit.models.DINOv2_S14(image_size=28)).mean
    # (0.485, 0.456, 0.406)
    ```
    """
    value = getattr(model, "preprocessing", None)
    return value if isinstance(value, Preprocessing) else PAPER


def as_preprocessing(value) -> Preprocessing:
    """`value` as a `Preprocessing`: one already, its config dict, or `None`
    (the paper's)."""
    if value is None:
        return PAPER
    if isinstance(value, Preprocessing):
        return value
    if isinstance(value, Mapping):
        return Preprocessing.from_config(value)
    raise TypeError(
        "`preprocessing` must be a keras_vit.Preprocessing, its config dict or "
        f"None. Received: {type(value).__name__}"
    )
