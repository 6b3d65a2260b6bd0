"""The model zoo's registry: every ViT family, its constructors and checkpoints.

A family is a published ViT recipe: the paper's ViT and its AugReg
checkpoints, the ResNet hybrids, DeiT, DeiT III, DINOv2, SigLIP, FlexiViT,
... Each lives in one file of `keras_vit.models.zoo` that declares, in one
`Family`:

- its encoder (`EncoderOptions`) and the `keras_vit.ViT` arguments its
  models default to (DINOv2's 518 px, no classifier);
- its input contract (`Preprocessing`), stated once;
- its named constructors (`"DINOv2_S14": "S/14"`), made by
  `Family.constructor` where the family is defined;
- its checkpoints (`TimmWeights` rows for the files timm hosts on the
  Hugging Face Hub, `BucketWeights` rows for the original `.npz` files),
  with revisions, checksums and licences;
- how timm names it (`TimmNames`): its architecture names, the
  architecture a model of the family is written as, and timm's size words
  with their attention heads.

Everything that asks about families (`keras_vit.weights.list_weights`,
`from_pretrained`, the strict loader's family check, `save_pretrained`'s
timm architecture) reads this registry; nothing else lists them.

Example:

```python
from keras_vit.models import zoo

zoo.named("dinov2").options.num_registers  # 4
zoo.named("dinov2").constructors()["DINOv2_S14"]  # 'S/14'
[w.name for w in zoo.checkpoints() if w.family == "deit3"][:1]
# ['deit3_small_patch16_224.fb_in1k']
```
"""

from __future__ import annotations

import dataclasses
import fnmatch
import types
from collections.abc import Mapping

import keras

from keras_vit._export import export
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import option_names
from keras_vit.models.preprocessing import PAPER
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.variants import parse_variant

BUCKET_URL = "https://storage.googleapis.com/vit_models"
HF_URL = "https://huggingface.co"
IMAGENET21K_CLASSES = 21843
IMAGENET1K_CLASSES = 1000


@export("keras_vit.weights.PretrainedWeights", "keras_vit.models.zoo.PretrainedWeights")
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
        family: The name of its family (`keras_vit.models.zoo.named`).
        preprocessing: The input contract it was trained and evaluated
            with (`keras_vit.Preprocessing`).
        hub_repo: Its Hugging Face Hub repository (`"timm/<name>"`) when it
            is fetched from there, else `None` (a `vit_models` bucket file).
        license: The licence its publisher states.
        timm_name: Its timm name, for checkpoints timm hosts; also its name.
        revision: The Hub commit its files are read at (`hub_repo`), or
            `None` for the repository's `main`.
        options: The `EncoderOptions` a model needs to take it (its family's,
            with its model's and its own overrides), or `None` when any
            encoder the strict check accepts takes it (the paper's files).
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
    options: EncoderOptions | None = None

    @property
    def pinned(self) -> bool:
        """Whether the file is pinned: a Hub commit (`revision`) and a
        SHA-256 are known, so another file under the same name is refused.
        An unpinned checkpoint is read at its repository's `main`."""
        if self.hub_repo is None:
            return self.sha256 is not None
        return self.revision is not None and self.sha256 is not None

    @property
    def name(self) -> str:
        """The name `keras_vit.from_pretrained` takes: the timm name of a
        checkpoint timm hosts, else `"<model>.<tag>"` (e.g.
        `"vit_b16.augreg_in21k"`)."""
        if self.timm_name is not None:
            return self.timm_name
        return f"{parse_variant(self.variant).name}.{self.tag}"


@export("keras_vit.models.zoo.TimmWeights")
@dataclasses.dataclass(frozen=True)
class TimmWeights:
    """A checkpoint timm hosts on the Hub (`timm/<name>`, `model.safetensors`).

    Attributes:
        tag: keras_vit's tag for it (`weights="deit3_in1k"`), shared by the
            sizes of one release.
        variant: The `keras_vit.ViT` variant.
        name: Its timm name with the pretrained tag, as timm 1.0.31's
            `default_cfgs` list it.
        image_size: Its resolution.
        num_classes: Classes of its head; 0 for a backbone.
        crop_fraction: timm's `crop_pct` where it differs from the family's.
        license: The licence timm's config states, where it differs from the
            family's.
        revision: A pinned Hub commit, or `None` for `main`.
        sha256: The file's SHA-256 where it is known.
        options: Encoder options of this checkpoint alone (e.g. DINOv3's
            `_qkvb` files: `{"qkv_bias": "qv"}`), over its model's.
        contract: `Preprocessing` fields of this checkpoint alone (e.g.
            DINOv3's satellite files' mean and std), over its family's.
    """

    tag: str
    variant: str
    name: str
    image_size: int
    num_classes: int
    crop_fraction: float | None = None
    license: str | None = None
    revision: str | None = None
    sha256: str | None = None
    options: Mapping[str, object] = dataclasses.field(default_factory=dict)
    contract: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def weights(self, family: Family) -> PretrainedWeights:
        contract = family.preprocessing.replace(
            **{
                "crop_fraction": self.crop_fraction
                or family.preprocessing.crop_fraction,
                **self.contract,
                "image_size": (self.image_size, self.image_size),
                "source": f"timm pretrained_cfg of {self.name}",
            }
        )
        return PretrainedWeights(
            tag=self.tag,
            variant=self.variant,
            file_name=f"timm_{self.name}.safetensors",
            url=f"{HF_URL}/timm/{self.name}/resolve/main/model.safetensors",
            image_size=self.image_size,
            num_classes=self.num_classes,
            sha256=self.sha256,
            family=family.name,
            preprocessing=contract,
            hub_repo=f"timm/{self.name}",
            license=self.license or family.license,
            timm_name=self.name,
            revision=self.revision,
            options=family.options_for(self.variant).replace(**self.options),
        )


@export("keras_vit.models.zoo.BucketWeights")
@dataclasses.dataclass(frozen=True)
class BucketWeights:
    """An original `.npz` checkpoint of the public `vit_models` bucket.

    Attributes:
        tag: keras_vit's tag (`weights="imagenet21k"`).
        variant: The `keras_vit.ViT` variant.
        path: The file's path in the bucket, without `.npz`.
        image_size: Its resolution.
        num_classes: Classes of its head.
        representation_size: Width of its `pre_logits` layer, or `None`.
        file_name: Its name in the cache directory (default: the path's
            last part).
        sha256: The file's SHA-256 where it is known.
    """

    tag: str
    variant: str
    path: str
    image_size: int
    num_classes: int
    representation_size: int | None = None
    file_name: str | None = None
    sha256: str | None = None

    def weights(self, family: Family) -> PretrainedWeights:
        return PretrainedWeights(
            tag=self.tag,
            variant=self.variant,
            file_name=self.file_name or f"{self.path.rsplit('/', 1)[-1]}.npz",
            url=f"{BUCKET_URL}/{self.path}.npz",
            image_size=self.image_size,
            num_classes=self.num_classes,
            representation_size=self.representation_size,
            sha256=self.sha256,
            family=family.name,
            preprocessing=family.preprocessing.replace(
                image_size=(self.image_size, self.image_size)
            ),
            license=family.license,
        )


@export("keras_vit.models.zoo.ModelEntry")
@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """A named model of a family whose arguments differ from the family's.

    Attributes:
        variant: The `keras_vit.ViT` variant (a row of `VARIANTS`, or a
            spelled-out size such as `"384x12x1536x6/16"`).
        arguments: `keras_vit.ViT` arguments of this model only, encoder
            options included (e.g. DINOv3-H+'s `mlp="swiglu"`, a PE model's
            image size and rotary reference grid); the caller's keywords
            override them.

    Example:

    ```python
    ModelEntry("1280x32x5120x20/16", {"mlp": "swiglu"})
    ```
    """

    variant: str
    arguments: Mapping[str, object] = dataclasses.field(default_factory=dict)


@export("keras_vit.models.zoo.TimmNames")
@dataclasses.dataclass(frozen=True)
class TimmNames:
    """How timm names the models of a family.

    Attributes:
        architectures: Shell-style patterns of timm architecture names of
            the family (`"deit3_*"`): a timm config naming one gives the
            family's options that keys do not record.
        writer: The timm architecture a model of the family is written as
            (`keras_vit.save_pretrained`; timm re-sizes it by `model_args`),
            or `None` when timm's plain `vit_base_patch16_224` builds it.
        writes_for: The encoder options that need `writer` (timm builds
            them only through this architecture, e.g. DeiT's distillation
            head, DINOv2-g's packed SwiGLU); a model whose options have all
            of them is written as `writer`.
        size_words: timm's size words in these names -> attention heads
            (`"small": 6`): the one figure a fused `qkv` does not record.
        model_class: The timm class of its architectures: `"VisionTransformer"`
            (default) or `"Eva"` (DINOv3, EVA-02, PE, RoPE-ViT), whose
            parameter names and constructor arguments differ.
        separate_swiglu: Its `VisionTransformer` architectures build their
            SwiGLU MLP as timm's `SwiGLU` (gate and value layers apart,
            `mlp.fc1_g`/`mlp.fc1_x`: AIMv2), not `SwiGLUPacked` (one
            `mlp.fc1`: DINOv2-g); `keras_vit.save_pretrained` writes the
            keys so. Defaults to `False`.
    """

    architectures: tuple[str, ...] = ()
    writer: str | None = None
    writes_for: Mapping[str, object] = dataclasses.field(default_factory=dict)
    size_words: Mapping[str, int] = dataclasses.field(default_factory=dict)
    model_class: str = "VisionTransformer"
    separate_swiglu: bool = False


_DOC = """Builds {title} {variant}: `keras_vit.ViT("{variant}", ...)`{options}.

    Every keyword argument of `keras_vit.ViT` is accepted{overrides}.

    Example:

    ```python
    model = keras_vit.{where}{name}()
    ```
    """


@export("keras_vit.models.Family", "keras_vit.models.zoo.Family")
@dataclasses.dataclass(frozen=True)
class Family:
    """A published ViT recipe: encoder, contract, constructors, checkpoints.

    Attributes:
        name: Its key, e.g. `"dinov2"`.
        title: Its name in docs and messages, e.g. `"DINOv2 with registers"`.
        options: The `EncoderOptions` every model of the family is built
            with (the caller's keyword arguments override single options).
        preprocessing: The input contract of its checkpoints, the models'
            default.
        defaults: Other `keras_vit.ViT` arguments its models default to
            (e.g. DINOv2's 518-px input, no classifier).
        models: Its named constructors: `{name: variant}`, or a `ModelEntry`
            for a model with arguments of its own.
        checkpoints: Its checkpoints (`TimmWeights`, `BucketWeights`).
        timm: How timm names it (`TimmNames`).
        license: The licence its checkpoints' publisher states.
        paper: Whether it is the paper's ViT (or hybrid): its constructors
            are `keras_vit.ViT(variant, **kwargs)`, `options=` included,
            and its models take ViT's own default names (`"vit_b16"`).
        exported: Where its constructors are public besides
            `keras_vit.models` (`("keras_vit",)` for the paper's).
    """

    name: str
    title: str
    options: EncoderOptions = dataclasses.field(default_factory=EncoderOptions)
    preprocessing: Preprocessing = PAPER
    defaults: Mapping[str, object] = dataclasses.field(default_factory=dict)
    models: Mapping[str, str | ModelEntry] = dataclasses.field(default_factory=dict)
    checkpoints: tuple[TimmWeights | BucketWeights, ...] = ()
    timm: TimmNames = dataclasses.field(default_factory=TimmNames)
    license: str | None = "apache-2.0"
    paper: bool = False
    exported: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(
            self, "defaults", types.MappingProxyType(dict(self.defaults))
        )
        models = {
            name: entry if isinstance(entry, ModelEntry) else ModelEntry(entry)
            for name, entry in self.models.items()
        }
        object.__setattr__(self, "models", types.MappingProxyType(models))
        timm = dataclasses.replace(
            self.timm,
            writes_for=types.MappingProxyType(dict(self.timm.writes_for)),
            size_words=types.MappingProxyType(dict(self.timm.size_words)),
        )
        object.__setattr__(self, "timm", timm)
        unknown = sorted(set(self.timm.writes_for) - set(option_names()))
        if unknown:
            raise ValueError(f"Family {self.name!r}: unknown options {unknown}.")

    def arguments(self) -> dict:
        """The `keras_vit.ViT` keywords the family sets: its encoder options
        that differ from the defaults, then its model defaults.

        Example:

        >>> keras_vit.FAMILIES["deit3"].arguments()
        {'no_embed_class': True, 'layer_scale_init': 1e-06}
        """
        default = EncoderOptions()
        changed = {
            name: getattr(self.options, name)
            for name in option_names()
            if getattr(self.options, name) != getattr(default, name)
        }
        return {**changed, **self.defaults}

    def weights(self) -> tuple[PretrainedWeights, ...]:
        """Its checkpoints as `PretrainedWeights`."""
        return tuple(row.weights(self) for row in self.checkpoints)

    def constructors(self) -> dict[str, str]:
        """`{constructor name: variant}`."""
        return {name: entry.variant for name, entry in self.models.items()}

    def model_arguments(self, variant) -> dict:
        """The arguments of the family's named model of `variant` (`{}` for
        none, or a size without a named model)."""
        for entry in self.models.values():
            if entry.variant == variant:
                return dict(entry.arguments)
        return {}

    def options_for_model(self, name: str) -> EncoderOptions:
        """The encoder options of the named model `name`."""
        own = {
            k: v for k, v in self.models[name].arguments.items() if k in option_names()
        }
        return self.options.replace(**own) if own else self.options

    def options_for(self, variant) -> EncoderOptions:
        """The encoder options of the family's model of `variant`: the
        family's, with the named model's own encoder options."""
        arguments = self.model_arguments(variant)
        own = {k: v for k, v in arguments.items() if k in option_names()}
        return self.options.replace(**own) if own else self.options

    def build(self, variant, **kwargs) -> keras.Model:
        """`variant` with the family's options, defaults and contract.

        Args:
            variant: e.g. `"S/14"` (or a `ModelSpec`).
            **kwargs: Any `keras_vit.ViT` argument, single encoder options
                included; overrides the family's. `options=` is refused
                unless the family is the paper's (it would replace the
                family's options whole).
        """
        return self._build(variant, self.model_arguments(variant), kwargs)

    def _build(self, variant, own: Mapping, kwargs: dict) -> keras.Model:
        """`variant` with the family's arguments, a named model's `own`, then
        the caller's `kwargs`."""
        if "options" in kwargs and not self.paper:
            raise TypeError(
                f"The {self.title} models take single encoder options as "
                "keywords (e.g. qk_norm=True), not `options=`, which would "
                "replace the family's; use keras_vit.ViT(variant, options=...) "
                "for that."
            )
        # The model API through the packages' public (lazy) names: the zoo
        # is a table the weights package reads, so it imports neither the
        # ViT builder nor the weights' sources, which both read the zoo.
        from keras_vit import models
        from keras_vit import weights

        if self.paper:
            return models.ViT(variant, **kwargs)
        arguments = {"options": self.options, **self.defaults}
        arguments.update(own)
        arguments.update(kwargs)
        if "preprocessing" not in kwargs:
            # A checkpoint's own contract first (a tag or Hub name), else the
            # family's.
            contract = None
            if arguments.get("weights") is not None:  # a name is resolved once
                arguments["weights"], contract = weights.sources.resolve_weights(
                    arguments["weights"], variant
                )
            arguments["preprocessing"] = contract or self.preprocessing
        arguments.setdefault("name", self.model_name(variant))
        return models.ViT(variant, **arguments)

    def model_name(self, variant) -> str:
        """E.g. `"dinov2_s14"` (a `ModelSpec` gives `"dinov2_<its size>"`)."""
        prefix = self.name.split("_")[0]
        if not isinstance(variant, str):  # a ModelSpec
            return f"{prefix}_{variant.name.removeprefix('vit_')}"
        size, patch = variant.split("/")
        return f"{prefix}_{size.lower()}{patch}"

    def constructor(self, name: str):
        """The named constructor `name` of `models`, documented.

        Example:

        ```python
        DINOv2_S14 = DINOV2.constructor("DINOv2_S14")
        ```
        """
        entry = self.models[name]
        variant = entry.variant

        def build(**kwargs) -> keras.Model:
            return self._build(variant, entry.arguments, kwargs)

        own = {**self.arguments(), **entry.arguments}
        options = ", ".join(f"{k}={v!r}" for k, v in own.items())
        build.__name__ = build.__qualname__ = name
        build.__doc__ = _DOC.format(
            exported=("keras_vit",),
            title=self.title,
            variant=variant,
            name=name,
            options=f" with {options}" if options else "",
            overrides=""
            if self.paper
            else " but `options`; each overrides the family's",
            where="" if "keras_vit" in self.exported else "models.",
        )
        return build

    def writes(self, options: EncoderOptions) -> bool:
        """Whether a model of `options` needs the family's timm writer."""
        wanted = self.timm.writes_for
        return bool(wanted) and all(
            getattr(options, name) == value for name, value in wanted.items()
        )


# Every registered family, by name, in registration order.
_FAMILIES: dict[str, Family] = {}


@export("keras_vit.models.zoo.register")
def register(family: Family) -> Family:
    """Adds `family` to the zoo (or replaces the one of its name).

    Raises:
        ValueError: one of its constructors or checkpoint names belongs to
            another family.

    Example:

    ```python
    MINE = register(Family("mine", "My ViT", models={"Mine_S16": "S/16"}))
    ```
    """
    others = [f for f in _FAMILIES.values() if f.name != family.name]
    taken = {n: f.name for f in others for n in f.models}
    clash = sorted(set(family.models) & set(taken))
    names = {w.name for f in others for w in f.weights()}
    clash += sorted({w.name for w in family.weights()} & names)
    if clash:
        raise ValueError(f"Family {family.name!r}: {clash} belong to another family.")
    _FAMILIES[family.name] = family
    return family


@export("keras_vit.models.zoo.families")
def families() -> tuple[Family, ...]:
    """The registered families, in registration order."""
    return tuple(_FAMILIES.values())


@export("keras_vit.models.zoo.named")
def named(name: str) -> Family:
    """The family called `name`.

    Raises:
        ValueError: no family has that name; the message lists those that do.
    """
    if name not in _FAMILIES:
        raise ValueError(f"Unknown family {name!r}. Known: {sorted(_FAMILIES)}.")
    return _FAMILIES[name]


@export(
    "keras_vit.family_model",
    "keras_vit.models.family_model",
    "keras_vit.models.zoo.family_model",
)
def family_model(variant, family: str, **kwargs) -> keras.Model:
    """Builds `variant` with the options, defaults and contract of `family`.

    Args:
        variant: e.g. `"S/14"`.
        family: A family's name (`keras_vit.FAMILIES`), e.g. `"dinov2"`.
        **kwargs: Any `keras_vit.ViT` argument but `options`, single
            encoder options included; overrides the family's.

    Raises:
        ValueError: an unknown family (the message lists the known ones).
        TypeError: `options=` is passed: it would replace the family's
            options whole.

    Example:

    ```python
    model = keras_vit.models.family_model("test/4", "dinov2", image_size=16)
    ```
    """
    return named(family).build(variant, **kwargs)


@export("keras_vit.models.zoo.checkpoints")
def checkpoints() -> tuple[PretrainedWeights, ...]:
    """Every family's checkpoints, family by family."""
    return tuple(w for family in families() for w in family.weights())


@export("keras_vit.models.zoo.constructors")
def constructors() -> dict[str, tuple[str, str]]:
    """`{constructor name: (variant, family name)}` of every family."""
    return {n: (e.variant, f.name) for f in families() for n, e in f.models.items()}


@export("keras_vit.models.zoo.timm_heads")
def timm_heads() -> dict[str, int]:
    """timm's size words -> attention heads, over every family."""
    return {w: h for f in families() for w, h in f.timm.size_words.items()}


@export("keras_vit.models.zoo.options_for_timm")
def options_for_timm(architecture: str) -> EncoderOptions | None:
    """The encoder options of timm's `architecture`: those of a checkpoint
    of it, else its family's, else `None`."""
    for weights in checkpoints():
        if weights.timm_name and weights.timm_name.split(".")[0] == architecture:
            return weights.options
    family = family_of_timm(architecture)
    return None if family is None else family.options


@export("keras_vit.models.zoo.family_of_timm")
def family_of_timm(architecture: str) -> Family | None:
    """The family whose timm architecture patterns match `architecture`."""
    return next(
        (
            f
            for f in families()
            if any(fnmatch.fnmatchcase(architecture, p) for p in f.timm.architectures)
        ),
        None,
    )


@export("keras_vit.models.zoo.writer_family")
def writer_family(
    options: EncoderOptions, model_class: str = "VisionTransformer"
) -> Family | None:
    """The family whose timm architecture a model of `options` is written as:
    among the families of timm's `model_class`, the one whose `writes_for`
    options it has, most of them first; `None` when none needs its own."""
    fitting = [
        f for f in families() if f.writes(options) and f.timm.model_class == model_class
    ]
    return max(fitting, key=lambda f: len(f.timm.writes_for), default=None)


@export("keras_vit.models.zoo.writer_architecture")
def writer_architecture(
    options: EncoderOptions, model_class: str = "VisionTransformer"
) -> str:
    """The timm architecture `keras_vit.save_pretrained` writes a model of
    `options` as (timm re-sizes it by the config's `model_args`).

    For timm's `VisionTransformer`: its `writer_family`'s writer, else the
    paper's ViT's. For timm's `Eva`, whose registered arguments a `None` in
    `model_args` cannot undo (timm drops `None` keywords), only an
    architecture that agrees on what is absent (LayerScale, a rotary
    reference grid) can be re-sized into the model: the `writer_family`'s if
    it does, else the agreeing one with the most options in common.

    Raises:
        ValueError: no registered Eva architecture can be made into it.
    """
    family = writer_family(options, model_class)
    if model_class == "VisionTransformer":
        if family is None:
            family = next(f for f in families() if f.paper and f.timm.writer)
        return family.timm.writer
    candidates = [
        f for f in families() if f.timm.model_class == model_class and f.timm.writer
    ]
    fitting = [f for f in candidates if _undoable(f.timm.writer, options)]
    if family in fitting:
        return family.timm.writer
    if not fitting:
        raise ValueError(
            "No timm Eva architecture registered here builds this model "
            "(its LayerScale or rotary reference grid is absent where every "
            "candidate has one); it has no timm layout."
        )
    best = max(fitting, key=lambda f: _shared(options_for_timm(f.timm.writer), options))
    return best.timm.writer


def _undoable(writer: str, options: EncoderOptions) -> bool:
    """Whether `model_args` can turn timm's `writer` into a model of
    `options`: what the model lacks, the writer lacks too."""
    theirs = options_for_timm(writer)
    if theirs is None:
        return False

    def grid(o):
        return None if o.rope is None else o.rope.reference_grid

    return (
        theirs.layer_scale_init is None or options.layer_scale_init is not None
    ) and (grid(theirs) is None or grid(options) is not None)


def _shared(theirs: EncoderOptions | None, options: EncoderOptions) -> int:
    """How many encoder options two option sets share."""
    if theirs is None:
        return -1
    return sum(getattr(theirs, n) == getattr(options, n) for n in option_names())


class FamilyView(Mapping):
    """A read-only `{name: Family}` view of the registry (`keras_vit.FAMILIES`)."""

    def __getitem__(self, name: str) -> Family:
        if name not in _FAMILIES:
            raise KeyError(f"Unknown family {name!r}. Known: {sorted(_FAMILIES)}.")
        return _FAMILIES[name]

    def __iter__(self):
        return iter(dict(_FAMILIES))

    def __len__(self) -> int:
        return len(_FAMILIES)

    def __repr__(self) -> str:
        return f"FAMILIES({sorted(_FAMILIES)})"


class ConstructorView(Mapping):
    """A read-only `{constructor: value}` view of the registry's named models:
    `(variant, family)` of the later families (`keras_vit.FAMILY_MODELS`), or
    the variant of the paper's (`keras_vit.NAMED_MODELS`)."""

    def __init__(self, paper: bool):
        self._paper = paper

    def _rows(self) -> dict:
        return {
            name: entry.variant if self._paper else (entry.variant, family.name)
            for family in families()
            if family.paper == self._paper
            for name, entry in family.models.items()
        }

    def __getitem__(self, name: str):
        return self._rows()[name]

    def __iter__(self):
        return iter(self._rows())

    def __len__(self) -> int:
        return len(self._rows())

    def __repr__(self) -> str:
        return repr(self._rows())


FAMILIES = FamilyView()
export(
    "keras_vit.FAMILIES", "keras_vit.models.FAMILIES", "keras_vit.models.zoo.FAMILIES"
).constant(__name__, "FAMILIES")
FAMILY_MODELS = ConstructorView(paper=False)
export(
    "keras_vit.FAMILY_MODELS",
    "keras_vit.models.FAMILY_MODELS",
    "keras_vit.models.zoo.FAMILY_MODELS",
).constant(__name__, "FAMILY_MODELS")
NAMED_MODELS = ConstructorView(paper=True)
export(
    "keras_vit.NAMED_MODELS",
    "keras_vit.models.NAMED_MODELS",
    "keras_vit.models.zoo.NAMED_MODELS",
).constant(__name__, "NAMED_MODELS")
