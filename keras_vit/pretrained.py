"""Pretrained models by name: `from_pretrained`, `save_pretrained`, `push_to_hub`.

`from_pretrained(name)` builds the model a checkpoint needs and loads it:
the user names the checkpoint (a timm name, `hf://org/repo`, a name of
`keras_vit.weights.list_weights()` or a saved folder), not the variant.
The model carries the checkpoint's input contract (`model.preprocessing`)
and class names (`model.class_names`).

`save_pretrained(model, folder)` writes a folder that `from_pretrained`
reads back bit-exactly and that timm reads where timm has the
architecture: `config.json` in timm's Hub format plus a `keras_vit` section
(variant, `EncoderOptions`, preprocessing, class names), `model.safetensors`
in timm's key layout, and a `README.md` model card. `push_to_hub` uploads
it with `huggingface_hub`.

Example:

```python
model = keras_vit.from_pretrained("vit_base_patch16_224.augreg2_in21k_ft_in1k")
keras_vit.predict(model, "cat.jpg")
keras_vit.save_pretrained(model, "my-vit")
same = keras_vit.from_pretrained("my-vit")
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import tempfile

import keras
import numpy as np

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.interop.keras_hub import from_keras_hub
from keras_vit.interop.keras_hub import load_preset
from keras_vit.model_card import card_fields
from keras_vit.model_card import render_card
from keras_vit.models import layout as names
from keras_vit.models import zoo
from keras_vit.models.layout import ViTLayout
from keras_vit.models.options import TRAINING_ONLY
from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.models.variants import parse_variant
from keras_vit.models.vit import ViT
from keras_vit.version import __version__
from keras_vit.weights import hub
from keras_vit.weights import keys
from keras_vit.weights import registry
from keras_vit.weights import sources
from keras_vit.weights.blueprint import blueprint
from keras_vit.weights.blueprint import config_options
from keras_vit.weights.blueprint import num_heads_of
from keras_vit.weights.checkpoint import from_model
from keras_vit.weights.checkpoint import from_source
from keras_vit.weights.dialects.timm_args import EVA_EXPRESSED
from keras_vit.weights.dialects.timm_args import eva_args
from keras_vit.weights.dialects.timm_args import needs_eva
from keras_vit.weights.dialects.timm_writer import to_timm
from keras_vit.weights.errors import TruncatedFileError
from keras_vit.weights.formats.safetensors import write_safetensors
from keras_vit.weights.loader import load_weights
from keras_vit.weights.pretrained_cfg import for_timm_folder
from keras_vit.weights.pretrained_cfg import from_source as cfg_of_source

CONFIG = sources.CONFIG
WEIGHTS = hub.SAFETENSORS
MODEL_CARD = "README.md"
# The arguments of `from_pretrained` that override the checkpoint's.
_OVERRIDES = ("num_classes", "image_size", "include_top")


@export("keras_vit.from_pretrained")
def from_pretrained(
    name: str,
    *,
    variant: str | None = None,
    num_classes: int | None = None,
    image_size: int | tuple[int, int] | None = None,
    include_top: bool | None = None,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | os.PathLike | None = None,
    local_files_only: bool | None = None,
    force_download: bool = False,
    resample_method: str | None = None,
    **kwargs,
) -> keras.Model:
    """Builds and loads the model of a checkpoint, found by name.

    Args:
        name: A timm name (`"vit_base_patch16_224.augreg2_in21k_ft_in1k"`,
            `"deit3_small_patch16_224.fb_in22k_ft_in1k"`,
            `"vit_small_patch14_reg4_dinov2.lvd142m"`), a Hub repository
            `"hf://org/repo"` (timm; transformers ViT, DINOv2 or SigLIP
            vision; keras-hub ViT presets), optionally `"@revision"`, a name
            of `keras_vit.weights.list_weights()` (`"vit_b16.augreg_in21k"`),
            a tag with `variant`, or a folder `save_pretrained` wrote (or a
            downloaded repository).
        variant: The variant a bare tag (`"augreg_in21k"`) is looked up for.
        num_classes: Another head width: the head is then zero-initialised
            (fine-tuning). Defaults to the checkpoint's.
        image_size: Another resolution: the position embedding is resampled.
            Defaults to the checkpoint's: for a transformers repository,
            its processor's crop (facebook/dinov2-* record a 518-px position
            table and crop 224 px: the model is built at 224, as `AutoModel`
            resamples the table to its input).
        include_top: Whether to keep the classifier. Defaults to whether the
            checkpoint has one.
        revision: A Hub branch, tag or commit to pin.
        token: A Hub token (private or gated repositories).
        cache_dir: The Hub cache directory; defaults to huggingface_hub's
            (`$HF_HOME/hub`).
        local_files_only: Read the cache only; defaults to `HF_HUB_OFFLINE`.
        force_download: Download the repository's files again even when
            cached (a truncated or corrupt cached file): huggingface_hub's
            `force_download`.
        resample_method: How the position table is resampled to another
            grid (see `keras_vit.resample`). Defaults to the convention of
            the library that wrote the checkpoint: `"timm"` (bicubic,
            antialiased) for timm, `"huggingface"` (bicubic) for
            transformers, `"reference"` (bilinear, corners aligned) for the
            original `.npz` files and the rest.
        **kwargs: Other `keras_vit.ViT` arguments (`include_preprocessing`,
            `dynamic_image_size`, `drop_path_rate`, ...).

    Returns:
        The loaded `keras.Model`, carrying `preprocessing` and
        `class_names`.

    Raises:
        ValueError: an unknown name (the closest known names suggested).
        WeightsNotFoundError: not cached and not downloadable (offline): the
            message names the repository, file and cache directory.
        CheckpointError: weights keras_vit cannot build a model for.

    Example:

    ```python
    model = keras_vit.from_pretrained("vit_small_patch14_reg4_dinov2.lvd142m")
    model.preprocessing.mean  # (0.485, 0.456, 0.406)
    ```
    """
    options = hub.HubOptions(
        revision=revision,
        token=token,
        cache_dir=None if cache_dir is None else os.fspath(cache_dir),
        local_files_only=local_files_only,
        force_download=force_download,
    )
    source = sources.resolve(name, variant=variant, options=options)
    if source.kind == "keras_hub":
        return _from_keras_hub(source, num_classes, image_size, include_top, kwargs)
    config = dict(source.config)
    entry = source.entry
    if source.kind == "tag":  # an original file: the table's variant
        heads = int(parse_variant(entry.variant).variant.num_heads)
    else:
        heads = num_heads_of(source.kind, config, _hidden_dim(source))
    checkpoint = _read(source, _with_pool_heads(heads, source, config))
    plan = blueprint(source.kind, config, checkpoint.params, name, num_heads=heads)
    arguments = plan.arguments()
    if source.kind == "keras_vit":
        arguments.update(_saved_arguments(config["keras_vit"]))
    if entry is not None and entry.family is not None:
        # The family's options the keys do not record (e.g. GELU form).
        arguments["options"] = dataclasses.replace(
            arguments["options"],
            gelu_approximate=zoo.named(entry.family).options.gelu_approximate,
        )
    given = {
        "num_classes": num_classes,
        "image_size": image_size,
        "include_top": include_top,
    }
    for key, value in given.items():
        if value is not None:
            arguments[key] = value
    if num_classes is not None and include_top is None:
        arguments["include_top"] = num_classes > 0
        arguments["num_classes"] = num_classes or 1000
    if (
        image_size is None
        and source.kind == "transformers"
        and not kwargs.get("dynamic_image_size")
    ):
        # The model's size is its processor's crop, which may be smaller
        # than the position table's grid (`AutoModel` resamples it).
        contract_size = source.preprocessing.image_size
        if contract_size is not None:
            arguments["image_size"] = tuple(int(s) for s in contract_size)
    arguments.update(kwargs)
    arguments.setdefault("preprocessing", source.preprocessing)
    model = ViT(plan.spec, **arguments)
    load_weights(
        model,
        checkpoint,
        keep_pre_logits=None if arguments.get("representation_size") else False,
        resample_method=resample_method or sources.resample_convention(source),
    )
    if source.class_names and getattr(model, "class_names", None) is None:
        head = [layer for layer in model.layers if layer.name == names.HEAD]
        if head and int(head[0].units) == len(source.class_names):
            model.class_names = source.class_names
    model._pretrained_source = source  # for save_pretrained's model card
    model.pretrained_cfg = cfg_of_source(source)
    return model


def _read(source, heads):
    """The source's checkpoint; a downloaded file that does not read (cut
    short, corrupt) gets the step that replaces it."""
    try:
        return from_source(source, heads)
    except TruncatedFileError as error:
        if source.kind == "tag" or source.location.startswith("hf://"):
            step = registry.REFETCH.format(name=source.name)
            raise TruncatedFileError(
                f"{error} It is a cached download: {step}"
            ) from error
        raise


def _with_pool_heads(heads, source, config):
    """`heads`, or `{pool: its heads, None: heads}` for a checkpoint whose
    attention pool has heads of its own (PE's 8), as its entry or its timm
    architecture's family says."""
    options = source.entry.options if source.entry is not None else None
    if options is None:
        options = config_options(source.kind, config)
    pool = None if options is None else options.map_heads
    if pool is None or heads is None or pool == heads:
        return heads
    return {None: heads, keys.MAP_ATTENTION: pool}


def _hidden_dim(source) -> int | None:
    args = source.config.get("model_args") or {}
    return args.get("embed_dim") or source.config.get("hidden_size")


def _saved_arguments(ours: dict) -> dict:
    """The exact `keras_vit.ViT` arguments a saved folder records."""
    return dict(
        options=EncoderOptions(**ours["options"]),
        image_size=tuple(ours["image_size"]),
        dynamic_image_size=bool(ours.get("dynamic_image_size", False)),
        position_resample=ours.get("position_resample") or "bilinear",
        name=ours.get("name") or "vit",
    )


def _position_resample(layout) -> str | None:
    """How a dynamic model resamples its position table per input, or `None`
    (a fixed size, or no table)."""
    if not layout.dynamic or not layout.has(names.POSEMB):
        return None
    return layout.position_embedding.get_config()["resample_method"]


def _from_keras_hub(source, num_classes, image_size, include_top, kwargs):
    if num_classes is not None or image_size is not None or include_top is not None:
        raise ValueError(
            "A keras-hub preset is converted as it is: build the model with "
            "keras_vit.ViT and load_weights(model, name) to change its head or size."
        )
    model = from_keras_hub(load_preset(source.folder), **kwargs)
    model.preprocessing = source.preprocessing
    return model


# -- saving ------------------------------------------------------------------

# keras_vit's pooling -> timm's global_pool.
_TIMM_POOL = {"token": "token", "gap": "avg", "map": "map"}


@export("keras_vit.save_pretrained")
def save_pretrained(
    model: keras.Model,
    folder: str | os.PathLike,
    *,
    class_names=None,
    license: str | None = None,  # noqa: A002 - the model card's field
    metrics: dict | None = None,
    recipe: dict | None = None,
    overwrite: bool = False,
    repo_id: str | None = None,
    model_card: dict | None = None,
) -> str:
    """Writes `model` as a folder `from_pretrained` (and timm) reads.

    The folder holds:
    - `config.json`: timm's Hub config (`architecture`, `num_classes`,
      `global_pool`, `model_args`, `pretrained_cfg` with the input contract,
      `label_names`) and a `keras_vit` section with everything needed to
      rebuild the model exactly (variant sizes, `EncoderOptions`, image
      size, preprocessing, class names);
    - `model.safetensors`: the weights in timm's key layout;
    - `README.md`: a model card (`keras_vit.model_card`): front matter the
      Hub reads (`library_name: timm`, `pipeline_tag`, licence, datasets,
      metric names, tags), a keras_vit and a timm snippet that load the
      folder (or `repo_id`), the architecture, source checkpoint,
      preprocessing, licence, and the recipe and metrics when given.

    The folder is written whole or not at all: into a hidden staging folder
    next to it (`.<name>.partial-<pid>-<token>@<host>`), renamed into place
    once complete. Replacing a folder (`overwrite=True`) moves the old one
    aside and deletes it only once the new one is in place; if that fails,
    the old one is put back. Staging folders of killed saves (same host,
    process gone) are removed, and an old folder a killed save had moved
    aside is put back if the folder is missing, by the next save next to
    it (`keras_vit.atomic`). The folder and its files get the permissions
    the umask gives, as `mkdir` and `open` do.

    `folder` may be a URL (`gs://bucket/models/my-vit`, any scheme
    `tf.io.gfile` has): the files are written into a local temporary folder,
    then uploaded one by one, `config.json` last (a folder without it is
    no pretrained folder: the next save there replaces what a killed upload
    left). A scheme with no file system here, or a URL with a slash missing
    (`gs:/bucket`), is refused before anything is written; nothing is ever
    written to a local folder named after a URL.

    Args:
        model: A model built by `keras_vit.ViT` (or `from_pretrained`).
        folder: Where to write (a local folder or a URL); must not exist
            unless `overwrite`.
        class_names: Names of the head's classes; defaults to
            `model.class_names`.
        license: The licence to state; defaults to the source checkpoint's.
        metrics: E.g. `{"top1": 0.81}`, for the model card.
        recipe: The training config, for the model card.
        overwrite: Replace an existing folder.
        repo_id: The Hub repository (`"org/name"`) the card's snippets load
            from; defaults to the folder.
        model_card: Card fields, as timm's `push_to_hf_hub(model_card=...)`
            takes them (`description`, `details`, `citation`, `datasets`,
            `license`, ...: `keras_vit.model_card.CARD_FIELDS`).

    Returns:
        The folder's path.

    Raises:
        FileExistsError: `folder` exists and `overwrite` is `False`.
        keras_vit.atomic.DiskFull: The disk is full (one-line message); the
            folder is left as it was.
        keras_vit.atomic.NotWritable: The file system is read-only, or the
            folder's parent may not be written in (one-line message).
        keras_vit.paths.UnsupportedPath: A URL no file system here takes.
        TypeError, ValueError: Bad `model_card` fields (an unknown one, or a
            licence other than `license`).

    Example:

    ```python
    keras_vit.save_pretrained(model, "my-vit")
    keras_vit.from_pretrained("my-vit")
    ```
    """
    folder = os.fspath(folder)
    fields = card_fields(model_card, license)  # checked before anything is written
    paths.check(folder, "folder")
    url = paths.is_url(folder)
    if url:
        folder = folder.rstrip("/")
        if paths.parent(folder) is None:
            raise ValueError(
                f"{folder!r} is a bucket, not a folder in it: name a folder "
                f"(e.g. {folder + '/my-vit'!r})."
            )
        if _taken_at_url(folder) and not overwrite:
            raise _exists(folder)
    else:
        target = pathlib.Path(os.path.abspath(folder))
        if target.parent.is_dir():  # First, what killed saves left there.
            atomic.remove_stale(target.parent)
        if os.path.lexists(target) and not overwrite:
            raise _exists(folder)
        atomic.check_writable(str(target))
    layout = ViTLayout.of(model)
    config, tensors = _pretrained_files(
        model, layout, class_names, fields.get("license")
    )
    card = render_card(
        config, metrics=metrics, recipe=recipe, repo_id=repo_id, folder=folder,
        fields=fields,
    )  # fmt: skip
    if url:
        _save_to_url(folder, config, tensors, card)
        return folder
    try:
        with atomic.new_folders_removed_on_error(target.parent):
            staging = atomic.staging_dir(target)
            try:
                _write_folder(staging, config, tensors, card)
                atomic.finish(staging)  # Modes per the umask; durable.
                atomic.move_into_place(staging, target, overwrite)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as error:
        atomic.raise_if_disk_full(error, folder)
        atomic.raise_if_not_writable(error, folder)
        raise
    return folder


def _exists(folder: str) -> FileExistsError:
    return FileExistsError(f"{folder!r} exists; pass overwrite=True to replace it.")


def _write_folder(directory, config: dict, tensors: dict, card: str) -> None:
    """The three files of a pretrained folder, written into local `directory`."""
    _write_safetensors(tensors, os.path.join(directory, WEIGHTS))
    with open(os.path.join(directory, MODEL_CARD), "w", encoding="utf-8") as f:
        f.write(card)
    with open(os.path.join(directory, CONFIG), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def _taken_at_url(url: str) -> bool:
    """Whether `url` holds a pretrained folder (its `config.json`, uploaded
    last, is there) or anything else than what a killed upload left."""
    return paths.exists(f"{url}/{CONFIG}") or (
        paths.exists(url) and not _only_ours(url)
    )


def _only_ours(url: str) -> bool:
    """Whether the folder at `url` holds nothing but a pretrained folder's
    files (what a killed upload left): it may then be replaced."""
    ours = {WEIGHTS, MODEL_CARD, CONFIG}
    return paths.isdir(url) and all(
        name in ours or name.startswith(atomic.PARTIAL_PREFIX)
        for name in paths.listdir(url)
    )


def _save_to_url(url: str, config: dict, tensors: dict, card: str) -> None:
    """Writes the folder locally, then uploads it to `url`, `config.json` last.

    An existing folder is first unmarked (its `config.json` deleted), then
    deleted: an object store renames nothing atomically, so a folder there
    is a pretrained folder only once its `config.json` is in it.
    """
    with tempfile.TemporaryDirectory(prefix="keras_vit-") as local:
        try:
            _write_folder(local, config, tensors, card)
        except OSError as error:
            atomic.raise_if_disk_full(error, url, staged_at=local)
            raise
        marker = f"{url}/{CONFIG}"
        if paths.exists(marker):
            paths.remove(marker)
        paths.rmtree(url)
        for name in (WEIGHTS, MODEL_CARD):
            paths.copy_file(os.path.join(local, name), f"{url}/{name}")
        atomic.upload(os.path.join(local, CONFIG), marker)


def _write_safetensors(tensors: dict, path: str) -> None:
    write_safetensors(
        path,
        {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()},
        metadata={"format": "pt"},  # what timm and transformers write
    )


def _pretrained_files(model, layout, class_names, license_):
    options = layout.encoder_options
    block = layout.block(0).get_config()
    embedding = layout.embedding.get_config()
    heads, mlp_dim = int(block["num_heads"]), int(block["mlp_dim"])
    hidden, patch = int(embedding["hidden_dim"]), tuple(embedding["patch_size"])
    depth = layout.depth
    params = from_model(model).params
    eva = needs_eva(options)  # timm's Eva class, not its VisionTransformer
    source = getattr(model, "_pretrained_source", None)
    model_class = "Eva" if eva else "VisionTransformer"
    architecture = zoo.writer_architecture(options, model_class)
    if source is not None and source.kind == "timm":  # keep the source's own
        architecture = source.config.get("architecture", architecture)
    writer = zoo.family_of_timm(architecture)
    separate_swiglu = writer is not None and writer.timm.separate_swiglu
    pool_heads = options.map_heads if options.pooling == "map" else None
    split = heads if not pool_heads else {None: heads, keys.MAP_ATTENTION: pool_heads}
    tensors = to_timm(params, num_heads=split, eva=eva, separate_swiglu=separate_swiglu)
    image_size = layout.native_image_size
    head = layout.head
    num_classes = int(head.units) if head is not None else 0
    class_names = (
        tuple(class_names)
        if class_names is not None
        else getattr(model, "class_names", None)
    )
    if class_names is not None and len(class_names) != num_classes:
        raise ValueError(
            f"{len(class_names)} class names for a model with {num_classes} classes."
        )
    preprocessing = preprocessing_of(model)
    license_ = (
        license_
        or (source.license if source is not None else None)
        or (getattr(model, "pretrained_cfg", None) or {}).get("license")
    )
    representation = params.get("pre_logits/kernel")
    ours = {
        "version": __version__,
        "name": model.name,
        "hidden_dim": hidden,
        "depth": depth,
        "mlp_dim": mlp_dim,
        "num_heads": heads,
        "patch_size": int(patch[0]),
        "image_size": list(image_size),
        "dynamic_image_size": layout.dynamic,
        "position_resample": _position_resample(layout),
        "num_classes": num_classes,
        "representation_size": None
        if representation is None
        else int(representation.shape[-1]),
        "options": _options_config(options),
        "preprocessing": preprocessing.get_config(),
        "class_names": None if class_names is None else list(class_names),
        "source": None if source is None else source.name,
        # How its source resamples a position table (reloading at another size).
        "resample_method": None
        if source is None
        else sources.resample_convention(source),
        "license": license_,
    }
    if eva:
        model_args = {
            **eva_args(options, hidden_dim=hidden, num_heads=heads, mlp_dim=mlp_dim),
            "depth": depth, "patch_size": int(patch[0]), "img_size": list(image_size),
            # A model of any grid: Eva then builds its rotary table per input.
            "dynamic_img_size": layout.dynamic,
        }  # fmt: skip
    else:
        # timm's `SwiGLUPacked` (DINOv2-g) is `mlp_ratio * D` wide before its
        # gate halves it; keras_vit's `mlp_dim` is the width after the gate.
        packed = options.mlp == "swiglu" and not separate_swiglu
        mlp_ratio = (2 if packed else 1) * mlp_dim / hidden
        model_args = {
            "embed_dim": hidden, "depth": depth, "num_heads": heads,
            "mlp_ratio": mlp_ratio, "patch_size": int(patch[0]),
            "img_size": list(image_size), "class_token": options.class_token,
            "reg_tokens": options.num_registers,
            "no_embed_class": options.no_embed_class,
            "qkv_bias": options.qkv_bias, "qk_norm": options.qk_norm,
            "fc_norm": options.fc_norm,
            "global_pool": _TIMM_POOL.get(options.pooling, "token"),
            "init_values": options.layer_scale_init,
        }  # fmt: skip
        if not options.proj_bias:
            model_args["proj_bias"] = False
        if options.gelu_approximate:
            model_args["act_layer"] = "gelu_tanh"
    _refuse_unwritten(options, architecture, eva, model.name)
    full_cfg = _saved_pretrained_cfg(model, preprocessing, image_size, num_classes)
    if license_:
        full_cfg["license"] = license_
    cfg = for_timm_folder(full_cfg)
    ours["pretrained_cfg"] = full_cfg
    config = {
        "architecture": architecture,
        "num_classes": num_classes,
        "num_features": hidden,
        "global_pool": model_args["global_pool"],
        "model_args": model_args,
        "pretrained_cfg": cfg,
    }
    if class_names is not None:
        config["label_names"] = list(class_names)
    config["keras_vit"] = ours
    return config, tensors


# The options the `VisionTransformer`'s `model_args` above write; the others
# are the architecture's own (its family's), or change training only.
_VIT_EXPRESSED = (
    "class_token", "num_registers", "no_embed_class", "qkv_bias", "qk_norm",
    "fc_norm", "pooling", "layer_scale_init", "proj_bias", "gelu_approximate",
)  # fmt: skip


def _refuse_unwritten(options, architecture: str, eva: bool, name: str) -> None:
    """Refuses a model whose timm folder would build another network: an
    option that neither the `model_args` write nor `architecture` has (its
    family's options). An option added to keras_vit later is refused by
    name until the writer learns it."""
    expressed = (*TRAINING_ONLY, *(EVA_EXPRESSED if eva else _VIT_EXPRESSED))
    reference = zoo.options_for_timm(architecture) or EncoderOptions()
    if not options.num_prefix_tokens:  # no prefix: including it changes nothing
        reference = reference.replace(pool_include_prefix=options.pool_include_prefix)
    unwritten = options.departures(expressed, reference)
    if unwritten:
        raise ValueError(
            f"Cannot save {name!r} as a timm folder: timm's {architecture} "
            f"takes no {', '.join(unwritten)} (its model_args cannot say "
            "it). Save it with model.save(...) instead."
        )


# What no longer holds once the resolution changed.
_SIZE_FIELDS = (
    "test_input_size", "test_crop_pct", "min_input_size", "pool_size",
    "test_pool_size", "fixed_input_size",
)  # fmt: skip


def _saved_pretrained_cfg(model, preprocessing, image_size, num_classes) -> dict:
    """The pretrained config a saved folder records: the model's checkpoint's
    (where it came from, its tag and licence, its test size), with the
    model's own contract, size and classes."""
    recorded = dict(getattr(model, "pretrained_cfg", None) or {})
    contract = preprocessing.to_timm(image_size)
    # The model's own size, as timm writes it (the contract may name the
    # checkpoint's evaluation size).
    contract["input_size"] = [3, int(image_size[0]), int(image_size[1])]
    if recorded.get("input_size") != contract["input_size"]:
        for key in _SIZE_FIELDS:
            recorded.pop(key, None)
    recorded.pop("label_offset", None)  # timm's save drops it too
    distilled = ViTLayout.of(model).encoder_options.distillation
    return {
        **recorded,
        **contract,
        "num_classes": num_classes,
        "first_conv": "patch_embed.proj",
        # timm's classifier module(s), named as their keys are
        "classifier": [keys.HEAD, keys.HEAD_DIST] if distilled else keys.HEAD,
    }


def _options_config(options) -> dict:
    return dataclasses.asdict(options)  # a RotaryOptions as its dict


@export("keras_vit.push_to_hub")
def push_to_hub(
    model: keras.Model,
    repo_id: str,
    *,
    token: str | bool | None = None,
    private: bool | None = None,
    revision: str | None = None,
    commit_message: str = "Upload a keras_vit model",
    create_pr: bool = False,
    model_card: dict | None = None,
    **save_kwargs,
) -> str:
    """Saves `model` with `save_pretrained` and uploads it to the Hub.

    The folder is written first (nothing is created on the Hub for a model
    that cannot be saved); then the repository is created when it does not
    exist (`huggingface_hub`'s `create_repo(exist_ok=True)`) and the folder
    uploaded in one commit, or as a pull request (`create_pr=True`), as
    timm's `push_to_hf_hub` does. The card's snippets load the repository:
    `keras_vit.from_pretrained("hf://org/name")` and
    `timm.create_model("hf-hub:org/name", pretrained=True)` (with
    `@revision` when one is given).

    Args:
        model: The model.
        repo_id: `"org/name"` (a bare `"name"`: the token's user's).
        token: A Hub token; defaults to the stored one.
        private: Whether a new repository is private.
        revision: The branch to commit to (or to open the pull request on).
        commit_message: The commit's message.
        create_pr: Open a pull request instead of committing.
        model_card: Card fields, as timm's `push_to_hf_hub(model_card=...)`
            takes them (`description`, `details`, `usage`, `citation`,
            `datasets`, `license`, ...: `keras_vit.model_card.CARD_FIELDS`).
        **save_kwargs: `save_pretrained` arguments (`class_names`,
            `license`, `metrics`, `recipe`).

    Returns:
        The URL of the commit, or of the pull request with `create_pr=True`,
        as `huggingface_hub` reports it.

    Raises:
        TypeError, ValueError: Bad `model_card` fields; nothing is uploaded.

    Example:

    ```python
    keras_vit.push_to_hub(
        model, "me/vit-s16-flowers", metrics={"top1": 0.97}, license="apache-2.0",
        model_card={"description": "ViT-S/16 fine-tuned on Oxford Flowers 102."},
    )
    ```
    """
    huggingface_hub = hub.hub_module()
    save_kwargs.pop("overwrite", None)  # a new folder each time

    def save(name: str, staging: str) -> str:
        card_repo = name if revision in (None, "main") else f"{name}@{revision}"
        folder = os.path.join(staging, name.replace("/", "--"))
        return save_pretrained(
            model, folder, repo_id=card_repo, model_card=model_card, **save_kwargs
        )

    with tempfile.TemporaryDirectory() as staging:
        folder = save(repo_id, staging)
        api = huggingface_hub.HfApi(
            token=token, library_name="keras_vit", library_version=__version__
        )
        created = api.create_repo(repo_id, private=private, exist_ok=True, token=token)
        named = getattr(created, "repo_id", None) or repo_id
        if named != repo_id:  # the owner was implicit: the card names it
            folder = save(named, staging)
        info = api.upload_folder(
            repo_id=named,
            folder_path=folder,
            revision=revision,
            commit_message=commit_message,
            create_pr=create_pr,
            token=token,
        )
    url = getattr(info, "pr_url", None) if create_pr else None
    return str(url or getattr(info, "commit_url", info))
