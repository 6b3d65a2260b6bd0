"""How a training run's model starts: `init_from`'s weights, LoRA adapters.

Steps of `recipes.train` that apply to any architecture that takes them
(its `ModelArchitecture.run_fields`; a config that sets one its
architecture does not take is refused when it is made):

- `check_init_from`: `init_from` names something to load: a file that
  exists, a checkpoint name `keras_vit.from_pretrained` takes (found by
  `keras_vit.weights.resolve`, cached or downloaded, before anything is
  written) or a weights tag;
- `initialise`: the weights of `init_from` loaded into the built model (its
  notes printed: head kept or zeroed, position embeddings resampled), then
  LoRA adapters (`lora_rank`);
- `init_from_misfit`: why a checkpoint does not fit the config's model, in
  the config's terms, with the `--set` overrides that make it fit.

Example:

```python
check_init_from(config, urls=True, resolve=True)
model = architectures.named(config.architecture).build(config, num_classes)
initialise(model, config, say=print)
```
"""

from __future__ import annotations

import math
import os

from keras_vit import paths
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import TrainConfig

# What a checkpoint file's name ends with (a value without a path separator
# is a file by its suffix alone).
_SUFFIXES = (".npz", ".safetensors", ".keras", ".h5", ".pth", ".pth.tar", ".pt")


def check_init_from(
    config: TrainConfig, urls: bool = False, resolve: bool = False
) -> None:
    """Raises `ConfigError` (one line) when `init_from` names nothing to load.

    `init_from` takes what `keras_vit.ViT(weights=...)` and
    `keras_vit.from_pretrained` take:

    - a weights tag (`"augreg_in21k"`): looked up for the config's variant
      and fetched when the model is built (`initialise`);
    - a checkpoint name: `hf://org/repo[@revision]`, `hf-hub:org/repo`, a
      timm name `"<architecture>.<tag>"`, a name of
      `keras_vit.weights.list_weights()`, or a folder holding a
      `config.json`. With `resolve=True` it is found here, through
      `keras_vit.weights.resolve` (the Hub cache, or a download), so that a
      name that cannot be loaded stops the run before anything is written;
    - a file: a value with a path separator or a checkpoint suffix must
      exist. A URL (`gs://bucket/pre.npz`) needs TensorFlow's file systems:
      it is checked only with `urls=True`.

    Anything else is an unknown name, refused with the closest known names.
    `run` passes `urls=True, resolve=True`; the command line's check before
    the run passes them over (they may take time: a download).

    Raises:
        ConfigError: an unknown name, a missing file, a URL no file system
            here can open, or a name whose checkpoint cannot be found (not
            in the Hub cache offline, no such repository, not downloadable:
            `keras_vit.weights.WeightsNotFoundError`'s message, naming the
            repository and the cache).
    """
    value = config.init_from
    if not value:
        return
    if is_checkpoint_name(value):
        if resolve and not _is_tag(value):
            _resolve(value)
        return
    if paths.is_url(value) and not urls:
        return
    if paths.is_url(value):
        try:
            paths.check(value, "init_from")
        except paths.UnsupportedPath as error:
            raise ConfigError(str(error)) from None
    looks_like_file = os.sep in value or "/" in value or value.endswith(_SUFFIXES)
    if looks_like_file and not paths.isfile(value):
        files = "a .npz, .safetensors, .keras, .weights.h5 or torch.save .pth file"
        if paths.isdir(value):
            raise ConfigError(
                f"init_from={value!r} is a directory, not a checkpoint file "
                f"({files}), nor a pretrained folder (it has no config.json)"
            )
        raise ConfigError(
            f"init_from={value!r} names no checkpoint file ({files}) and no "
            "checkpoint name (hf://org/repo, a timm name '<architecture>.<tag>', "
            "a weights tag)"
        )
    if not looks_like_file and not os.path.exists(value):
        from keras_vit.weights.sources import unknown_name_message

        raise ConfigError(f"init_from={value!r}: {unknown_name_message(value)}")


def is_checkpoint_name(value) -> bool:
    """Whether `init_from` is a name the weights library looks up (a tag, a
    timm name, `hf://org/repo`, a pretrained folder) rather than a file or
    a URL of a file system."""
    from keras_vit.weights.sources import is_name

    if not isinstance(value, str) or not value:
        return False
    return _is_tag(value) or is_name(value)


def _is_tag(value: str) -> bool:
    """A weights tag (`"augreg_in21k"`), as the loader tells one: no file of
    that name here."""
    from keras_vit.weights.registry import is_tag

    return is_tag(value) and not os.path.exists(value)


def _resolve(name: str) -> None:
    """Finds checkpoint `name` (`keras_vit.weights.resolve`) or raises
    `ConfigError` with the library's one-line reason."""
    from keras_vit.weights.errors import WeightsNotFoundError
    from keras_vit.weights.sources import resolve

    try:
        resolve(name)
    except (ValueError, ImportError, WeightsNotFoundError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ConfigError(f"init_from={name!r}: {reason}") from None


def initialise(model, config: TrainConfig, say=print) -> None:
    """Starts `model` as `config` says: from `init_from`, then with LoRA.

    Every kind of `init_from` (a tag, a checkpoint name such as
    `hf://org/repo` or a timm name, an `.npz`, a `.safetensors`, our own
    `.keras` / `.weights.h5`) goes through `keras_vit.weights.load_weights`,
    the call `keras_vit.ViT(weights=...)` makes; it is made here so that its
    notes (head kept or zeroed, position embeddings resampled) are printed.
    The model takes the checkpoint's input contract (`model.preprocessing`,
    which `load_weights` adopts), the one the recipe's pipelines apply.

    Raises:
        ValueError: `init_from` cannot be read, or does not fit the model
            (`init_from_misfit` says why and how to make it fit).
    """
    if config.init_from:
        from keras_vit.weights import load_weights
        from keras_vit.weights.errors import CheckpointError

        try:  # A name is the library's to find; a URL is read from a local copy.
            if is_checkpoint_name(config.init_from):
                notes = load_weights(model, config.init_from)
            else:
                with paths.local_copy(config.init_from) as local:
                    notes = load_weights(model, local)
        except OSError as error:  # E.g. removed since `check_init_from`.
            reason = error.strerror or str(error)
            raise ValueError(f"init_from={config.init_from!r}: {reason}") from error
        except CheckpointError as error:
            raise ValueError(init_from_misfit(config, model, error)) from error
        say(f"Initialised from {config.init_from}.")
        for note in notes or ():
            say(f"  {note}")
    if config.lora_rank:
        from keras_vit import finetune

        finetune.enable_lora(
            model, config.lora_rank, config.lora_alpha, config.lora_targets
        )
        trainable = sum(math.prod(v.shape) for v in model.trainable_weights)
        say(
            f"LoRA rank {config.lora_rank} on {', '.join(config.lora_targets)}: "
            f"{trainable:,} of {model.count_params():,} parameters trainable."
        )


def init_from_misfit(config: TrainConfig, model, error: Exception) -> str:
    """Why `config.init_from` does not fit the model `config` builds, in the
    config's terms, and the `--set` overrides that make it fit.

    What differs is read off the checkpoint's keys and shapes and those the
    model expects (`keras_vit.weights.architecture`): the class token (and
    with it the pooling), the other tokens and encoder options, the sizes
    (`variant`), the `pre_logits` layer; the position grid is named too
    (it is resampled, so it never needs a change). A figure the file does
    not record (the heads of a timm or Hugging Face file) is not named.

    Returns:
        A message: a first line with the overrides, one line per difference,
        then `error`'s own message (the keys and shapes).
    """
    from keras_vit.models.variants import VARIANTS
    from keras_vit.weights import architecture
    from keras_vit.weights.dialects.ours import checkpoint_layout

    layout, _ = checkpoint_layout(model)
    ours = {k: t.shape for k, t in layout.items()}
    read = _read_init_from(config.init_from, model, layout)
    what = (
        f"init_from={config.init_from!r} does not fit the model of config "
        f"{config.name!r}"
    )
    if read is None:
        return f"{what}:\n{error}"
    shapes, heads_recorded = read
    lines, fixes = [], []
    file_keys = architecture.encoder_keys(shapes)
    model_keys = architecture.encoder_keys(ours)
    _token_misfits(file_keys, model_keys, lines, fixes)
    _class_row_misfit(file_keys, config, lines, fixes)
    file_arch = architecture.describe(shapes, heads_recorded=heads_recorded)
    model_arch = architecture.describe(ours)
    differ = architecture.differences(model_arch, file_arch)
    if differ:
        terms = {
            "hidden_dim": "width",
            "depth": "depth",
            "num_heads": "attention heads",
            "mlp_dim": "MLP width",
            "patch_size": "patch size",
            "backbone": "hybrid backbone",
        }
        for field in differ:
            mine, theirs = getattr(model_arch, field), getattr(file_arch, field)
            if field == "patch_size":
                mine, theirs = "x".join(map(str, mine)), "x".join(map(str, theirs))
            elif field == "backbone":
                mine, theirs = model_arch.name, file_arch.name
            lines.append(
                f"{terms[field]}: the file's {theirs}, the config's {mine} "
                f"(variant {config.variant!r})"
            )
        spelled = file_arch.spelled(heads="H")
        fixes.append(f"--set variant={spelled or file_arch.name}")
        if "patch_size" in differ and config.patch_size is not None:
            fixes.append("--set patch_size=None")  # It overrides the variant's.
        if file_arch.num_heads is None and spelled:
            rows = [
                f"{row}/{file_arch.patch_size[0]} has these sizes and "
                f"{VARIANTS[row].num_heads} heads"
                for row in file_arch.rows_like()
            ]
            lines.append(
                "attention heads: the file does not record them; H is the number "
                "it was trained with" + (f" ({'; '.join(rows)})" if rows else "")
            )
    if model_keys.representation_size and not file_keys.representation_size:
        lines.append(
            f"pre_logits: the file has none, the config's representation_size "
            f"is {config.representation_size}"
        )
        fixes.append("--set representation_size=None")
    grid = _file_grid(file_keys)
    if grid is not None and lines and grid != _file_grid(model_keys):
        size = (
            f" ({grid[0] * file_arch.patch_size[0]}x"
            f"{grid[1] * file_arch.patch_size[1]} px at its patch size)"
            if file_arch.patch_size
            else ""
        )
        lines.append(
            f"position grid: the file's {grid[0]}x{grid[1]}{size}; resampled to "
            "the config's image_size, which needs no change"
        )
    if not fixes:
        return f"{what}:\n{error}"
    items = "\n".join(f"- {line}" for line in lines)
    return f"{what}; to fine-tune from it: {' '.join(fixes)}\n{items}\n{error}"


def _read_init_from(init_from: str, model, layout):
    """`(shapes, heads_recorded)` of `init_from` in the original layout, read
    without fitting it to `model` where the source allows; `None` if the
    file cannot be read apart from the model."""
    from keras_vit.weights import checkpoint

    try:
        if init_from.endswith(".keras"):  # A whole model: its exact layout.
            from keras_vit.loading import load_model

            ckpt = checkpoint.from_model(load_model(init_from))
        else:
            ckpt = checkpoint.read_checkpoint(init_from, model, layout)
    except (ValueError, OSError, KeyError, TypeError):
        return None
    shapes = {k: tuple(v.shape) for k, v in ckpt.params.items()}
    return shapes, ckpt.heads_recorded


def _token_misfits(theirs, mine, lines: list, fixes: list) -> None:
    """Adds the tokens and encoder options on which the file's keys
    (`theirs`) and the model's (`mine`) differ, with their overrides."""
    if theirs.class_token != mine.class_token:
        has = ("has one", "has none")
        lines.append(
            f"class token: the file {has[not theirs.class_token]}, the config's "
            f"encoder {has[not mine.class_token]}"
        )
        fixes.append(
            "--set encoder.class_token=true --set encoder.pooling=token"
            if theirs.class_token
            else "--set encoder.class_token=false --set encoder.pooling=gap"
        )
    if theirs.map_pooling != mine.map_pooling:
        pooling = "token" if theirs.class_token else "gap"
        lines.append(
            "pooling: the file "
            + ("pools with an attention head (map)" if theirs.map_pooling else
               "has no attention-pooling head")
            + ", the config's encoder "
            + ("does" if mine.map_pooling else "does not")
        )  # fmt: skip
        fixes.append(
            f"--set encoder.pooling={'map' if theirs.map_pooling else pooling}"
        )
    uses = ("uses it", "does not")
    options = (  # (option, what it is, how to say yes / no)
        ("distillation", "distillation token", ("has one", "has none")),
        ("num_registers", "register tokens", None),
        ("qk_norm", "QK-norm", uses),
        ("qkv_bias", "query/key/value biases", ("has them", "has none")),
        ("fc_norm", "fc_norm (a norm of the pooled features)", uses),
    )
    for name, term, says in options:
        file_value, model_value = getattr(theirs, name), getattr(mine, name)
        if file_value == model_value:
            continue
        if says is None:
            lines.append(f"{term}: the file's {file_value}, the config's {model_value}")
        else:
            lines.append(
                f"{term}: the file {says[not file_value]}, the config's encoder "
                f"{says[not model_value]}"
            )
        fixes.append(f"--set encoder.{name}={str(file_value).lower()}")
    if theirs.layer_scale != mine.layer_scale:
        has = {True: "has it", False: "has none"}
        lines.append(
            f"LayerScale: the file {has[theirs.layer_scale]}, the config's "
            f"encoder {has[mine.layer_scale]}"
        )
        fixes.append(  # Any init value: the file's scales are loaded over it.
            "--set encoder.layer_scale_init=1e-5"
            if theirs.layer_scale
            else "--set encoder.layer_scale_init=None"
        )


def _class_row_misfit(theirs, config: TrainConfig, lines: list, fixes: list) -> None:
    """Adds whether the file's position table has a row for the class token
    (timm's `no_embed_class`: DeiT III, DINOv2, SigLIP have none) where the
    config's encoder says otherwise. Told by the rows: a square grid with
    or without the class token's (and distillation token's) rows."""
    encoder = getattr(config, "encoder", None)
    if not theirs.class_token or theirs.position_rows is None or encoder is None:
        return
    rows = theirs.position_rows
    embedded = int(theirs.class_token) + int(theirs.distillation)
    square = [math.isqrt(max(n, 0)) ** 2 == n for n in (rows, rows - embedded)]
    if square[0] == square[1]:
        return  # The rows do not tell.
    file_has_none = square[0]
    if file_has_none == bool(getattr(encoder, "no_embed_class", False)):
        return
    has = ("has none", "has one")
    lines.append(
        f"position row of the class token: the file's table {has[not file_has_none]}"
        f", the config's encoder {has[file_has_none]}"
    )
    fixes.append(f"--set encoder.no_embed_class={str(file_has_none).lower()}")


def _file_grid(keys) -> tuple[int, int] | None:
    """The square patch grid of the file's position table, if it is one."""
    if keys.position_rows is None:
        return None
    # Registers have no row; the class and distillation tokens may have one.
    embedded = int(keys.class_token) + int(keys.distillation)
    for rows in (keys.position_rows - embedded, keys.position_rows):
        side = math.isqrt(max(rows, 0))
        if side and side * side == rows:
            return side, side
    return None
