"""The recipes' config classes and shipped configs: `RunConfig`, `load_config`.

`RunConfig` holds what every recipe shares (run, data, augmentation, model,
optimisation, distribution, monitoring); `TrainConfig` (`recipes.train`) and
`PretrainConfig` (`recipes.pretrain_masked`) extend it with their own fields
only. A config module (`recipes/configs/<name>.py`) defines `get_config()`
returning one of them; its docstring gives the command, the hardware, the
expected accuracy and the time. The command line changes any field with
`--set key=value`: the value is a Python literal (`ast.literal_eval`), or a
bare word for text fields (`--set dataset=cifar100`), checked against the
field's type; `image_size` also takes `224`, `224,320` or `224x320`. A
field holding a frozen dataclass (`encoder`; a wing's, e.g. `keras-vit
compare`'s `analysis`) is set field by field: `--set encoder.pooling=gap`,
`--set analysis.hessian_top_k=3` (an encoder option also by its own name;
`keras_vit.recipes.config_values` reads and checks these values).

Values are checked when a config is made (ranges, choices): a wrong one
raises `ConfigError` naming the field, before any run starts.

The defaults are the paper's pre-training recipe (Adam β = (0.9, 0.999),
weight decay 0.1, linear warm-up then cosine decay, gradient clipping at
global norm 1).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
from operator import attrgetter

from keras_vit import plugins
from keras_vit.models import architectures
from keras_vit.models.options import LORA_TARGETS
from keras_vit.models.options import EncoderOptions
from keras_vit.recipes.config_values import BARE_NAMES as BARE_NAMES
from keras_vit.recipes.config_values import ConfigError as ConfigError
from keras_vit.recipes.config_values import check_type as check_type
from keras_vit.recipes.config_values import nested_fields as nested_fields
from keras_vit.recipes.config_values import one_of as one_of
from keras_vit.recipes.config_values import override as override
from keras_vit.recipes.config_values import parse_image_size as parse_image_size
from keras_vit.recipes.config_values import positive_or_none as positive_or_none
from keras_vit.recipes.config_values import size_ok
from keras_vit.recipes.config_values import within

# The choices of keras_vit.training, repeated here so that a config is
# checked without importing TensorFlow (tests/test_cli.py checks they agree).
OPTIMIZERS = ("adamw", "adam", "sgd")
SCHEDULES = ("cosine", "linear", "constant")
STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker", "tpu")
PRECISIONS = (False, True, "auto", "float32", "bfloat16", "float16")
# The largest seed: NumPy's legacy global seed (`np.random.seed`, which
# `keras.utils.set_random_seed` calls) takes 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1

# Fields a resumed run may change freely: where and how verbosely it runs,
# and what it reports. Every other field is part of the backup's fingerprint.
RUN_ONLY_FIELDS = frozenset(
    {
        "name",
        "workdir",
        "data_dir",
        "verbose",
        "strategy",
        "jit_compile",
        "steps_per_execution",
        "tensorboard_update_freq",
        "profile_steps",
        "monitor_images",
        "fewshot_every",
        "fewshot_shots",
        "fewshot_examples",
        "fewshot_dataset",
        "fewshot_train_split",
        "fewshot_test_split",
        "fewshot_test_examples",
        "eval_batch_size",
        "export_savedmodel",
        "remat",  # Same numbers, less memory: a backup resumes either way.
    }
)


# The `keras_vit.ViT` arguments (besides the encoder options, passed whole)
# each recipe passes from its config, by name.
VIT_FIELDS = ("image_size", "channels")
TRAIN_VIT_FIELDS = (
    *VIT_FIELDS,
    "representation_size",
    "patch_size",
    "dynamic_image_size",
    "dynamic_image_pad",
    "position_resample",
)
# The `TrainConfig` model fields that not every architecture takes: one of
# another architecture (its `ModelArchitecture.run_fields` say which it
# takes; an encoder option as `encoder.<name>`) is left at its default.
ARCHITECTURE_FIELDS = (
    *TRAIN_VIT_FIELDS[len(VIT_FIELDS) :],
    "init_from",
    "lora_rank",
    "layer_decay",
)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What every recipe's run shares.

    Attributes are grouped as run, data, augmentation, model, optimisation,
    distribution and monitoring; each is documented where it is defined.
    """

    # -- run ---------------------------------------------------------------
    name: str = "run"  # Run name; the default workdir is runs/<name>.
    workdir: str | None = None  # Run directory (logs, checkpoints, results).
    seed: int = 0  # Seeds the model initialisation, the data order and augmentation.

    # -- data --------------------------------------------------------------
    # "digits", "glyphs", "folder:PATH" or a TFDS name; "" in a config that
    # needs the user's own data (the command line must give it).
    dataset: str = "digits"
    data_dir: str | None = None  # TFDS data directory.
    train_split: str = "train"  # The training split; a slice such as "train[:90%]".
    # Training and evaluation resolution: an int or (height, width).
    image_size: int | tuple[int, int] = 224
    channels: int = 3  # Colour channels of the model's input.
    global_batch_size: int = 512  # Summed over replicas and workers.
    shuffle_buffer: int = 10_000  # Training examples shuffled at a time.

    # -- augmentation (keras_vit.data.Augmentation) ------------------------
    crop_area_range: tuple[float, float] = (0.05, 1.0)  # Inception crop; (1, 1) = off.
    crop_aspect_range: tuple[float, float] = (0.75, 4 / 3)  # Of the Inception crop.
    random_flip: bool = True  # Random horizontal flips of training images.
    randaugment_ops: int = 0  # keras_vit.data.RandAugment ops per image; 0 = off.
    randaugment_magnitude: float = 0.5  # In [0, 1]: the reference's level / 10.

    # -- model (keras_vit.ViT's arguments) ---------------------------------
    variant: str = "B/16"  # See keras_vit.VARIANTS; e.g. "Ti/16", "R50+B/16".
    # Every encoder option (tokens, blocks, dropouts, pooling, ...): see
    # keras_vit.EncoderOptions. The command line sets one by its own name,
    # e.g. --set qk_norm=true or --set encoder.pooling=gap.
    encoder: EncoderOptions = dataclasses.field(
        default=EncoderOptions(), metadata={BARE_NAMES: True}
    )

    # -- optimisation ------------------------------------------------------
    optimizer: str = "adamw"  # "adamw", "adam" or "sgd".
    learning_rate: float = 1e-3  # Peak, reached at the end of the warm-up.
    end_learning_rate: float = 0.0  # Reached at the last step.
    schedule: str = "cosine"  # "cosine", "linear" or "constant" after warm-up.
    warmup_steps: int = 10_000  # Capped at the run's total steps.
    weight_decay: float = 0.1  # Decoupled; biases, norms, tokens excluded.
    beta_1: float = 0.9  # Adam's first-moment decay.
    beta_2: float = 0.999  # Adam's second-moment decay.
    momentum: float = 0.9  # SGD only.
    global_clipnorm: float | None = 1.0  # Gradient clipping at this global norm.
    ema_momentum: float | None = None  # Polyak averaging, e.g. 0.9999.
    epochs: int = 300  # Training epochs.
    steps_per_epoch: int | None = None  # Defaults to examples // batch.

    # -- distribution and speed --------------------------------------------
    strategy: str = "auto"  # auto, default, one_device, mirrored, multi_worker, tpu.
    # "auto"/True: bfloat16 on TPU and on CPUs with AVX512_BF16 or AMX,
    # float16 on GPU, float32 on other CPUs; "bfloat16"/"float16": always.
    mixed_precision: bool | str = False
    jit_compile: bool | str = "auto"  # "auto": XLA on GPU/TPU, off on CPU.
    steps_per_execution: int = 1  # Training steps per call into the graph.

    # -- monitoring --------------------------------------------------------
    verbose: int = 1  # 1: progress bar, 2: one line per epoch, 0: silent.
    tensorboard_update_freq: str | int = "epoch"  # Or a step count.
    profile_steps: tuple[int, int] | None = None  # Steps to profile, e.g. (10, 15).
    monitor_images: int = 4  # Example and attention-map images; 0 = none.
    fewshot_every: int = 0  # Few-shot linear eval every N epochs; 0 = off.
    fewshot_shots: tuple[int, ...] = (1, 5, 10, 25)  # Images per class.

    def __post_init__(self):
        for name, value in self._checks():
            if value is not True:  # `name` may be nested: "analysis.images".
                raise ConfigError(f"{name}={attrgetter(name)(self)!r}: {value}")

    def resolved_workdir(self) -> str:
        """`workdir`, or `runs/<name>` when it is unset."""
        return self.workdir or os.path.join("runs", self.name)

    def _checks(self):
        """Yields `(field, True or what is wrong)`."""
        # NumPy's and TensorFlow's global seeds (`keras.utils.set_random_seed`).
        yield "seed", within(self.seed, 0, MAX_SEED)
        yield "epochs", self.epochs >= 1 or "must be at least 1"
        yield "steps_per_epoch", positive_or_none(self.steps_per_epoch)
        yield "global_batch_size", self.global_batch_size >= 1 or "must be positive"
        yield "image_size", size_ok(self.image_size)
        yield "channels", self.channels >= 1 or "must be positive"
        yield (
            "encoder",
            isinstance(self.encoder, EncoderOptions)
            or "must be a keras_vit.EncoderOptions",
        )
        yield "shuffle_buffer", self.shuffle_buffer >= 1 or "must be positive"
        low, high = self.crop_area_range
        yield "crop_area_range", 0 < low <= high <= 1 or "needs 0 < low <= high <= 1"
        low, high = self.crop_aspect_range
        yield "crop_aspect_range", 0 < low <= high or "needs 0 < low <= high"
        yield "randaugment_ops", self.randaugment_ops >= 0 or "must be >= 0"
        yield "randaugment_magnitude", within(self.randaugment_magnitude, 0, 1)
        yield (
            "encoder",
            self.encoder.pooling is not None
            or "pooling=None gives no image representation to train on",
        )
        yield "optimizer", one_of(self.optimizer, OPTIMIZERS)
        yield "learning_rate", self.learning_rate > 0 or "must be positive"
        yield "end_learning_rate", self.end_learning_rate >= 0 or "must be >= 0"
        yield "schedule", one_of(self.schedule, SCHEDULES)
        yield "warmup_steps", self.warmup_steps >= 0 or "must be >= 0"
        yield "weight_decay", self.weight_decay >= 0 or "must be >= 0"
        for name in ("beta_1", "beta_2", "momentum"):
            yield name, within(getattr(self, name), 0, 1, high_open=True)
        yield "global_clipnorm", positive_or_none(self.global_clipnorm)
        yield (
            "ema_momentum",
            (
                self.ema_momentum is None
                or within(self.ema_momentum, 0, 1, high_open=True)
            ),
        )
        yield "strategy", one_of(self.strategy, STRATEGIES)
        yield "mixed_precision", one_of(self.mixed_precision, PRECISIONS)
        yield "jit_compile", one_of(self.jit_compile, (True, False, "auto"))
        yield "steps_per_execution", self.steps_per_execution >= 1 or "must be >= 1"
        yield "verbose", one_of(self.verbose, (0, 1, 2))
        yield (
            "tensorboard_update_freq",
            (
                self.tensorboard_update_freq in ("epoch", "batch")
                or (
                    isinstance(self.tensorboard_update_freq, int)
                    and self.tensorboard_update_freq >= 1
                )
                or "must be 'epoch', 'batch' or a positive step count"
            ),
        )
        yield "monitor_images", self.monitor_images >= 0 or "must be >= 0"
        yield "fewshot_every", self.fewshot_every >= 0 or "must be >= 0"
        yield (
            "fewshot_shots",
            (
                (len(self.fewshot_shots) > 0 and min(self.fewshot_shots) >= 1)
                or "needs one or more positive shot counts"
            ),
        )


@dataclasses.dataclass(frozen=True)
class TrainConfig(RunConfig):
    """Settings of one training or fine-tuning run (`recipes.train`)."""

    # -- data --------------------------------------------------------------
    val_split: str | None = "test"  # Monitored each epoch; None for no validation.
    test_split: str | None = "test"  # Evaluated once at the end; None to skip.
    eval_batch_size: int | None = None  # Defaults to global_batch_size.
    # Central crop at evaluation (1 = none); None: the model's contract (the
    # checkpoint's crop_pct when fine-tuning, else none).
    eval_crop_fraction: float | None = None

    # -- augmentation and loss ---------------------------------------------
    mixup_alpha: float = 0.0  # 0 = off.
    cutmix_factor: float = 0.0  # keras.layers.CutMix factor in (0, 1]; 0 = off.
    label_smoothing: float = 0.0  # Of the one-hot targets, in the loss.

    # -- model -------------------------------------------------------------
    # A registered model family (keras_vit.models.architectures): "vit", or
    # one a wing adds, e.g. Park & Kim's "resnet" (their post-activation
    # ResNet), "preact_resnet" or "alternet"; `variant` then names its row
    # (e.g. "mini", "18", "50"; keras_vit.parkkim.cnn).
    architecture: str = "vit"
    representation_size: int | None = None  # Pre-training tanh "pre-logits" width.
    patch_size: int | None = None  # Overrides the variant's (weights resampled).
    dynamic_image_size: bool = False  # Accept any image size at run time.
    dynamic_image_pad: bool = False  # With it: zero-pad to whole patches.
    position_resample: str = "bilinear"  # How position embeddings are resampled.
    # Initial weights, passed to keras_vit.ViT(weights=...): a keras_vit.weights
    # tag ("imagenet21k", ...), a checkpoint name from_pretrained takes
    # (hf://org/repo, a timm name), an original .npz, a .safetensors file, or
    # our own .keras / .weights.h5 (e.g. a masked-patch encoder.keras). The
    # head is loaded when its class count fits, else zero; position
    # embeddings are resampled. None = random.
    init_from: str | None = None

    # -- fine-tuning add-ons (docs/finetuning.md) ---------------------------
    lora_rank: int | None = None  # LoRA adapters; base frozen, head trained.
    lora_alpha: float = 16.0  # Adapter scale is lora_alpha / lora_rank.
    lora_targets: tuple[str, ...] = ("qkv", "out", "mlp")  # The adapted layers.
    layer_decay: float | None = None  # E.g. 0.75: rate * decay**(depth+1-layer).

    # -- monitoring --------------------------------------------------------
    # Test images of the few-shot eval (its training images: max(shots) per
    # class, drawn with the seed, as recipes.fewshot does).
    fewshot_examples: int = 2_000
    export_savedmodel: bool = False  # Also export a SavedModel for TF Serving.

    def _checks(self):
        yield from super()._checks()
        if self.architecture not in architectures.names():
            plugins.load_plugins()  # It may be a plug-in's.
        families = architectures.names()
        yield "architecture", one_of(self.architecture, families)
        if self.architecture in families:
            yield from _architecture_checks(
                self, architectures.named(self.architecture)
            )
        yield "eval_batch_size", positive_or_none(self.eval_batch_size)
        yield (
            "eval_crop_fraction",
            self.eval_crop_fraction is None
            or within(self.eval_crop_fraction, 0, 1, low_open=True),
        )
        yield "mixup_alpha", self.mixup_alpha >= 0 or "must be >= 0"
        yield "cutmix_factor", within(self.cutmix_factor, 0, 1)
        yield "label_smoothing", within(self.label_smoothing, 0, 1, high_open=True)
        yield "representation_size", positive_or_none(self.representation_size)
        yield "patch_size", positive_or_none(self.patch_size)
        yield (
            "dynamic_image_pad",
            (
                self.dynamic_image_size
                or not self.dynamic_image_pad
                or "needs dynamic_image_size=True"
            ),
        )
        yield "fewshot_examples", self.fewshot_examples >= 1 or "must be positive"
        yield "lora_rank", positive_or_none(self.lora_rank)
        yield "lora_alpha", self.lora_alpha > 0 or "must be positive"
        yield (
            "lora_targets",
            (bool(self.lora_targets) and set(self.lora_targets) <= set(LORA_TARGETS))
            or f"must be a non-empty subset of {LORA_TARGETS}",
        )
        yield (
            "layer_decay",
            self.layer_decay is None or within(self.layer_decay, 0, 1, low_open=True),
        )


@dataclasses.dataclass(frozen=True)
class PretrainConfig(RunConfig):
    """Settings of masked patch prediction pre-training (`recipes.pretrain_masked`).

    The defaults are the paper's (Appendix B.1.2). Labels are not used for
    training; `pooling` decides only the few-shot representation.
    """

    # -- run and data (the paper's batch of 4096) --------------------------
    name: str = "masked"
    global_batch_size: int = 4096

    # -- objective ---------------------------------------------------------
    corruption_rate: float = 0.5  # Paper: 50% of the patches.
    mask_rate: float = 0.8  # ... of which 80% [mask],
    random_rate: float = 0.1  # 10% another patch of the image, 10% kept.
    color_bits: int = 3  # 3 bits per channel: 512 colour classes.

    # -- optimisation (Appendix B.1.2) -------------------------------------
    optimizer: str = "adam"  # "adam" or "adamw" (with weight_decay).
    learning_rate: float = 2e-4  # Paper: base learning rate 2e-4.
    weight_decay: float = 0.0
    epochs: int = 14  # Training epochs; the paper's 1M steps are 14 of JFT.

    # -- monitoring --------------------------------------------------------
    fewshot_every: int = 1  # Few-shot linear eval every N epochs; 0 = off.
    fewshot_dataset: str | None = None  # Defaults to `dataset`.
    fewshot_train_split: str = "train"  # The few-shot eval's training images.
    fewshot_test_split: str = "test"  # Its test images.
    fewshot_test_examples: int = 2_000  # Test images it uses, at most.

    def _checks(self):
        yield from super()._checks()
        yield "corruption_rate", within(self.corruption_rate, 0, 1, low_open=True)
        yield "mask_rate", within(self.mask_rate, 0, 1)
        yield (
            "random_rate",
            (
                within(self.random_rate, 0, 1) is True
                and self.mask_rate + self.random_rate <= 1
                or "needs 0 <= random_rate and mask_rate + random_rate <= 1"
            ),
        )
        yield "color_bits", 1 <= self.color_bits <= 8 or "must be in [1, 8]"
        yield (
            "encoder",
            not self.encoder.distillation
            or "a masked-patch model has no distillation token (distillation=True)",
        )
        yield (
            "encoder",
            not self.encoder.fc_norm
            or "a masked-patch model predicts from normalised tokens (fc_norm=True)",
        )
        yield (
            "fewshot_test_examples",
            self.fewshot_test_examples >= 1 or "must be positive",
        )


def require_dataset(config: RunConfig) -> None:
    """Refuses a config without a dataset: one made for the user's own data
    (`dataset=""`, e.g. `folder_finetune`) run without `--set dataset=...`.

    Raises:
        ConfigError: naming the config and the override to give.
    """
    if not config.dataset.strip():
        raise ConfigError(
            f"config {config.name!r} has no dataset: give yours with --set "
            "dataset=folder:DIR (DIR holds one sub-folder of images per class) "
            "or --set dataset=<a TFDS name>"
        )


def model_arguments(config: RunConfig, names=VIT_FIELDS) -> dict:
    """The `keras_vit.ViT` keywords of `config`: the encoder options, whole,
    and the model fields `names`."""
    return {
        "options": config.encoder,
        **{name: getattr(config, name) for name in names},
    }


def flat_fields(config: RunConfig | dict) -> dict:
    """`{field: value}` with the encoder options as fields of their own
    (`qk_norm`, `pooling`, ...), the names the command line uses.

    Takes a config, or the dict `config.json` holds (`dataclasses.asdict`).
    """
    fields = dict(config) if isinstance(config, dict) else dataclasses.asdict(config)
    encoder = fields.pop("encoder", None) or {}
    return {**fields, **encoder}


def fingerprint(config: RunConfig) -> dict:
    """The fields a backup must agree on to be resumed (not `RUN_ONLY_FIELDS`)."""
    return {
        key: value
        for key, value in flat_fields(config).items()
        if key not in RUN_ONLY_FIELDS
    }


def load_config(name_or_path: str, kind: type = None) -> RunConfig:
    """Returns `get_config()` of `recipes/configs/<name>.py` or of a file path.

    Args:
        name_or_path: A shipped config name (e.g. `"digits"`) or the path to
            a Python file defining `get_config()`.
        kind: The config class the caller runs. Defaults to `TrainConfig`.

    Raises:
        ConfigError: No such config, or one of another kind.
    """
    kind = kind or TrainConfig
    if name_or_path.endswith(".py"):
        if not os.path.isfile(name_or_path):
            raise ConfigError(f"config file {name_or_path!r} does not exist")
        spec = importlib.util.spec_from_file_location("recipe_config", name_or_path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        if name_or_path not in _config_names():
            plugins.load_plugins()  # It may be a plug-in's.
        if name_or_path not in shipped_configs(RunConfig):
            raise ConfigError(
                f"unknown config {name_or_path!r}; shipped: "
                f"{', '.join(shipped_configs(kind))}; or pass a .py file"
                f"{plugins.failure_note()}"
            )
        module = _config_module(name_or_path)
    config = module.get_config()
    if not _is_kind(config, kind):
        raise ConfigError(
            f"config {name_or_path!r} gives a {type(config).__name__}, "
            f"not a {kind.__name__}"
        )
    return config


# Packages whose modules are shipped configs, by name: this one, and those
# a plug-in adds with `register_config_package` (`keras_vit.plugins`).
CONFIG_PACKAGES = ["keras_vit.recipes.configs"]


def register_config_package(package: str) -> None:
    """Makes the modules of `package` shipped configs (each defines
    `get_config()`); a name in two packages is refused."""
    if package in CONFIG_PACKAGES:
        return
    taken = set(_config_names())
    module = importlib.import_module(package)
    clash = sorted(taken & set(_module_names(module)))
    if clash:
        raise ValueError(f"{package}: config names {clash} are already shipped")
    CONFIG_PACKAGES.append(package)


def shipped_configs(kind: type = None) -> list[str]:
    """Names of the shipped configs (`keras_vit/recipes/configs/` and the
    registered packages) of class `kind`.

    `kind` defaults to `TrainConfig`; `RunConfig` lists every config.
    """
    kind = kind or TrainConfig
    modules = _config_names()  # Listed once, not once per config.
    return [
        name
        for name in sorted(modules)
        if _is_kind(importlib.import_module(modules[name]).get_config(), kind)
    ]


def _module_names(package) -> list[str]:
    folder = os.path.dirname(package.__file__)
    return [
        name[:-3]
        for name in os.listdir(folder)
        if name.endswith(".py") and name not in ("__init__.py", "base.py")
    ]


def _config_names() -> dict[str, str]:
    """`{config name: its module}` over every config package."""
    found = {}
    for package in CONFIG_PACKAGES:
        for name in _module_names(importlib.import_module(package)):
            found.setdefault(name, f"{package}.{name}")
    return found


def _config_module(name: str):
    return importlib.import_module(_config_names()[name])


def _is_kind(config, kind) -> bool:
    """`config` is of the recipe's own class (any config for `RunConfig`):
    `recipes.train` does not take a `CompareConfig`, though it extends
    `TrainConfig`."""
    return isinstance(config, kind) if kind is RunConfig else type(config) is kind


def _architecture_checks(config: TrainConfig, architecture):
    """Yields the checks of `config` against its `ModelArchitecture`: the
    variant is one of its rows, and no field it does not take is set."""
    yield "variant", architecture.check_variant(config.variant)
    taken = architecture.run_fields
    if taken is None:  # It takes every field.
        return
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    fields = [
        name
        for name in ARCHITECTURE_FIELDS
        if getattr(config, name) != defaults[name] and name not in taken
    ]
    options = sorted(
        name
        for name in _changed_encoder_fields(config.encoder)
        if f"encoder.{name}" not in taken
    )
    takes = ", ".join(sorted(taken)) or "none of them"
    yield (
        "architecture",
        not fields
        or f"{', '.join(fields)}: not for the {architecture.title} architecture, "
        f"which takes only {takes}",
    )
    yield (
        "encoder",
        not options
        or f"{', '.join(options)}: ViT options; the {architecture.title} "
        f"architecture takes only {takes}",
    )


def _changed_encoder_fields(options: EncoderOptions) -> set[str]:
    """The `EncoderOptions` fields that differ from their defaults."""
    default = EncoderOptions()
    return {
        f.name
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(default, f.name)
    }
