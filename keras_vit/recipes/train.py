r"""The trainer: train from scratch / pre-train, or fine-tune, with `model.fit`.

One script for every recipe; a config (`recipes/configs/<name>.py`) says
which. The same command runs on a laptop CPU, several GPUs, a TPU or several
machines (`TF_CONFIG`): the strategy is picked automatically.

```bash
python -m recipes.train --config digits                  # ~2 min on 2 CPU cores
python -m recipes.train --config cifar10_finetune_b16 \
    --set init_from=imagenet21k --set global_batch_size=256
python -m recipes.train --config my_config.py --set epochs=3 --set strategy=mirrored
```

Run it again with the same command after an interruption (Ctrl-C, a kill,
a full disk): it resumes from the last completed epoch, or, stopped after
training, finishes without training again, and ends where an uninterrupted
run ends (a backup made with another config is refused: `--fresh` starts
again). A finished run is not run again (exit status 3; `--fresh` sets it
aside). Exit status: 0 done; 1 the run failed (diverged: it keeps its last
finite state; a full disk); 2 an argument or config error, or the run
directory is in use by another run; 3 the run had already finished; 130 /
143 interrupted by Ctrl-C / SIGTERM (resumable). Every failure is one line.
See `docs/training.md` for the run directory layout and TensorBoard.
"""

from __future__ import annotations

import sys

from keras_vit.recipes import cli
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import TrainConfig
from keras_vit.recipes.configs.base import shipped_configs


def run(
    config: TrainConfig,
    callbacks: tuple = (),
    *,
    fresh: bool = False,
    allow_changes: bool = False,
) -> dict:
    """Trains (and evaluates, and saves) as `config` says.

    Args:
        config: The run's `TrainConfig`.
        callbacks: Extra Keras callbacks, appended to the recipe's.
        fresh: Set what a previous run left in the run directory aside
            (to `old-<UTC time>/` in it) and start again.
        allow_changes: Resume from a backup made with another config.

    Returns:
        A dict: `history` (per-epoch logs of the epochs this call trained),
        `test` (final metrics or `None`), `workdir`, `model` (the trained
        `keras.Model`, with the averaged weights when EMA is on),
        `seconds`.

    Raises:
        ConfigError: A config value that cannot be used (e.g. `init_from`
            names no file), or the backup belongs to another config.
        RunFinished: The run directory holds this config's finished run.
        WorkdirBusy: Another live run uses the run directory.
        RunDiverged: The loss became non-finite (`results.json` says where).
        keras_vit.atomic.DiskFull: The disk filled up; what was written
            before stays whole, and the same call resumes.
    """
    from keras_vit.models.preprocessing import preprocessing_of
    from keras_vit.recipes import common
    from keras_vit.recipes.configs.base import require_dataset

    require_dataset(config)
    check_init_from(config, urls=True)
    with common.setup(config, "train") as run_:
        state = common.resume_or_start(
            config,
            run_,
            fresh=fresh,
            allow_changes=allow_changes,
            finishing=_finishing_steps(config),
        )
        start_epoch = 0 if state is None else state.epoch
        # Everything that can refuse the command comes before the run
        # directory changes (`make_room`): a refused command changes nothing.
        try:  # A dataset or model argument that cannot be used: one line.
            sources = _sources(config, run_)
            # The model before the pipelines: they feed it pixels prepared by
            # its input contract (that of the checkpoint it starts from).
            model = _built_model(config, run_, sources[0].num_classes)
            preprocessing = preprocessing_of(model)
            steps, train_ds, val_ds, test_ds = _data(
                config, run_, start_epoch, sources, preprocessing
            )
            _compile(config, run_, model, steps, train_ds, state)
            built = None
            if start_epoch < config.epochs:  # Else nothing is trained.
                built = _callbacks(
                    config, run_, sources[0], steps, val_ds, callbacks, preprocessing
                )
        except ValueError as error:
            raise ConfigError(str(error)) from error
        common.make_room(run_)
        common.write_config(config, run_)
        trained = common.fit(
            model,
            config,
            run_,
            train_ds,
            steps=steps,
            state=state,
            callbacks=lambda: built,
            validation_data=val_ds,
        )
        test = _evaluate_and_save(config, run_, model, sources[0], test_ds, trained)
        return {
            "history": trained.history,
            "test": test,
            "workdir": run_.workdir,
            "model": model,
            "seconds": run_.seconds,
        }


def check_init_from(config: TrainConfig, urls: bool = False) -> None:
    """Raises `ConfigError` (one line) when `init_from` names a missing file.

    A value with a path separator or a checkpoint suffix is a file; other
    values are weights tags, checked when they are loaded. A URL
    (`gs://bucket/pre.npz`) needs TensorFlow's file systems: it is checked
    only with `urls=True` (`run` does, before anything is written; the
    command line's check before TensorFlow is imported passes it over).
    """
    import os

    from keras_vit import paths

    value = config.init_from
    if not value:
        return
    if paths.is_url(value) and not urls:
        return
    if paths.is_url(value):
        try:
            paths.check(value, "init_from")
        except paths.UnsupportedPath as error:
            raise ConfigError(str(error)) from None
    suffixes = (".npz", ".safetensors", ".keras", ".h5", ".pth", ".pth.tar", ".pt")
    looks_like_file = os.sep in value or "/" in value or value.endswith(suffixes)
    if looks_like_file and not paths.isfile(value):
        what = "is a directory, not" if paths.isdir(value) else "names no"
        raise ConfigError(
            f"init_from={value!r} {what} checkpoint file (a .npz, .safetensors, "
            ".keras, .weights.h5 or torch.save .pth file, or a weights tag)"
        )


def _finishing_steps(config: TrainConfig) -> str:
    steps = ["test evaluation"] if config.test_split else []
    steps.append("final.keras")
    if config.export_savedmodel:
        steps.append("saved_model/1")
    return ", ".join([*steps, "results.json"])


def _sources(config: TrainConfig, run_):
    """`(train, validation, test)` sources, the splits checked and described.

    The validation and test sources are `None` when the config has none.
    """
    from keras_vit.recipes import common

    source = common.training_source(config)
    steps = common.steps_per_epoch(config, source)
    val_source = _eval_source(config, config.val_split)
    test_source = _eval_source(config, config.test_split)
    common.check_disjoint(run_, source, [val_source, test_source])
    if val_source is not None and test_source is not None:
        # One split for both is a choice (the quick configs); two that
        # share examples are a mistake: model selection sees the test set.
        if config.val_split != config.test_split:
            from keras_vit import data

            data.check_disjoint(val_source, test_source)
    skipped = (
        f"; {len(source.skipped)} unreadable files skipped" if source.skipped else ""
    )
    run_.say(
        f"Data: {source.name}, {source.num_examples} examples, "
        f"{source.num_classes} classes, {steps} steps/epoch{skipped}."
    )
    return source, val_source, test_source


def _data(config: TrainConfig, run_, start_epoch: int, sources, preprocessing):
    """`(steps, train, validation, test)`: the streams of `_sources`' splits,
    fed to a model whose input contract is `preprocessing`."""
    from keras_vit.recipes import common

    source, val_source, test_source = sources
    _, steps, train_ds = common.training_data(
        config,
        start_epoch,
        source=source,
        preprocessing=preprocessing,
        mixup_alpha=config.mixup_alpha,
        cutmix_factor=config.cutmix_factor,
    )
    val_ds = _eval_data(config, val_source, run_.on_tpu, preprocessing)
    test_ds = _eval_data(config, test_source, run_.on_tpu, preprocessing)
    return steps, train_ds, val_ds, test_ds


def _built_model(config: TrainConfig, run_, num_classes: int):
    """The ViT (or CNN), built and initialised in the strategy's scope."""
    with run_.strategy.scope():
        return build_model(config, num_classes, run_.say)


def _compile(config: TrainConfig, run_, model, steps: int, train_ds, state):
    """Compiles `model` in the strategy's scope and restores the backup."""
    import keras

    from keras_vit.recipes import common

    with run_.strategy.scope():
        loss = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing
        )
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
    common.compile_and_restore(
        model, config, run_, steps, train_ds, state, loss=loss, metrics=metrics
    )
    return model


def build_model(config: TrainConfig, num_classes: int, say=print):
    """The ViT of `config`, initialised from `config.init_from` if set (or
    the model of another family that `config.architecture` names, from
    `keras_vit.models.model_family`).

    Every kind of `init_from` (a tag, an `.npz`, a `.safetensors`, our own
    `.keras` / `.weights.h5`) goes through `keras_vit.weights.load_weights`,
    the call `keras_vit.ViT(weights=...)` makes; it is made here so that its
    notes (head kept or zeroed, position embeddings resampled) are printed.
    The model carries the checkpoint's input contract (`model.preprocessing`,
    which `load_weights` adopts), the one the recipe's pipelines apply.
    """
    import keras_vit
    from keras_vit import paths
    from keras_vit.recipes.configs.base import TRAIN_VIT_FIELDS
    from keras_vit.recipes.configs.base import model_arguments
    from keras_vit.weights import load_weights

    if config.architecture != "vit":  # Another registered model family.
        from keras_vit.models import model_family

        return model_family.named(config.architecture).build(config, num_classes)
    model = keras_vit.ViT(
        config.variant,
        num_classes=num_classes,
        **model_arguments(config, TRAIN_VIT_FIELDS),
    )
    if config.init_from:
        from keras_vit.weights.errors import CheckpointError

        try:  # A URL is read from a local copy.
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
        import numpy as np

        from keras_vit import finetune

        finetune.enable_lora(
            model, config.lora_rank, config.lora_alpha, config.lora_targets
        )
        trainable = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
        say(
            f"LoRA rank {config.lora_rank} on {', '.join(config.lora_targets)}: "
            f"{trainable:,} of {model.count_params():,} parameters trainable."
        )
    return model


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
            from keras_vit.recipes import cli

            ckpt = checkpoint.from_model(cli.load_model(init_from))
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


def _file_grid(keys) -> tuple[int, int] | None:
    """The square patch grid of the file's position table, if it is one."""
    import math

    if keys.position_rows is None:
        return None
    # Registers have no row; the class and distillation tokens may have one.
    embedded = int(keys.class_token) + int(keys.distillation)
    for rows in (keys.position_rows - embedded, keys.position_rows):
        side = math.isqrt(max(rows, 0))
        if side and side * side == rows:
            return side, side
    return None


def _callbacks(
    config: TrainConfig,
    run_,
    source,
    steps: int,
    val_ds,
    extra=(),
    preprocessing=None,
):
    """`(guard, callbacks)`: the crash-safe set, monitor and few-shot eval.

    `preprocessing` is the model's input contract (the paper's for `None`).
    """
    from keras_vit.recipes import common

    monitor = None
    if run_.chief and not run_.on_tpu:
        monitor = _training_monitor(
            config, run_.workdir, source, steps, val_ds, preprocessing
        )
    fewshot = None
    if config.fewshot_every:
        fewshot = common.fewshot_callback(
            config,
            dataset=config.dataset,
            train_split=config.train_split,
            test_split=config.test_split or config.val_split or "test",
            max_test_examples=config.fewshot_examples,
            say=run_.say,
            preprocessing=preprocessing,
        )
    return common.run_callbacks(
        config,
        run_,
        monitor="val_accuracy" if val_ds is not None else "accuracy",
        training_monitor=monitor,
        fewshot=fewshot,
        extra=extra,
    )


def _evaluate_and_save(config: TrainConfig, run_, model, source, test_ds, trained):
    """Test metrics; `final.keras`, the SavedModel, then `results.json`.

    Every file is written before `results.json` (chief), and the backup is
    discarded only after it: a kill at any instant of this phase leaves the
    backup of the last epoch, and the same command finishes again.
    """
    import os

    from keras_vit import atomic
    from keras_vit.recipes import common

    test = None
    if test_ds is not None:
        test = model.evaluate(test_ds, return_dict=True, verbose=0)
        run_.say("Test: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
    if run_.chief:
        # The inference model alone (no optimizer state): loads with just
        # `import keras_vit`, holds the averaged weights when EMA is on, and
        # keeps the input contract (`model.preprocessing`) in its config.
        inference = _inference_model(model)
        atomic.save_model(inference, os.path.join(run_.workdir, "final.keras"))
        if config.export_savedmodel:
            from keras_vit.export import export

            target = os.path.join(run_.workdir, "saved_model", "1")
            try:
                export(model, target, class_names=source.class_names, overwrite=True)
            except Exception as error:  # TensorFlow's writer: ENOSPC in words.
                atomic.raise_if_disk_full(error, target)
                raise
    common.finished(run_, trained, source, test=test)
    run_.say(f"Done in {run_.seconds:.0f} s; results in {run_.workdir}.")
    return test


def _inference_model(model):
    """A new functional model over `model`'s layers, with its input contract."""
    import keras

    from keras_vit.models.functional import OptimizerFirstModel
    from keras_vit.models.preprocessing import preprocessing_of

    if not hasattr(type(model), "preprocessing"):  # E.g. a CNN: a plain model.
        return keras.Model(model.inputs, model.outputs, name=model.name)
    inference = OptimizerFirstModel(model.inputs, model.outputs, name=model.name)
    inference.preprocessing = preprocessing_of(model)
    return inference


def _eval_source(config: TrainConfig, split: str | None):
    if split is None:
        return None
    from keras_vit import data

    return data.load_source(config.dataset, split, config.data_dir, seed=config.seed)


def _eval_data(config: TrainConfig, source, on_tpu: bool, preprocessing=None):
    """The evaluation stream of `source`, by the model's contract
    `preprocessing` (its resize filter, crop and normalisation), the crop
    replaced by `eval_crop_fraction` when the config sets one."""
    if source is None:
        return None
    from keras_vit import data

    return data.eval_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.eval_batch_size or config.global_batch_size,
        crop_fraction=config.eval_crop_fraction,
        channels=config.channels,
        drop_remainder=on_tpu,  # TPUs need static shapes.
        cache=_fits_in_memory(source.num_examples, config),
        preprocessing=preprocessing,
    )


def _fits_in_memory(num_examples: int, config: TrainConfig) -> bool:
    """Whether the decoded float32 eval set is small enough to cache (2 GiB)."""
    height, width = (
        (config.image_size, config.image_size)
        if isinstance(config.image_size, int)
        else config.image_size
    )
    return num_examples * height * width * config.channels * 4 <= 2 * 1024**3


def _training_monitor(
    config: TrainConfig, workdir: str, source, steps: int, val_ds, preprocessing=None
):
    """The TensorBoard monitor, probing the first batch of the first epoch.

    That batch is the same whether the run was resumed or not, so the
    gradient-norm curve continues across a resume; an empty stream (or
    validation set) leaves the monitor without that probe (or images).
    """
    import os

    from keras_vit import training
    from keras_vit.recipes import common

    count = config.monitor_images
    batch = common.first_batch(
        config,
        source,
        steps,
        preprocessing=preprocessing,
        mixup_alpha=config.mixup_alpha,
        cutmix_factor=config.cutmix_factor,
    )
    probe = examples = attention = None
    if batch is not None:
        images, labels = batch
        probe = (images[:32], labels[:32])
        examples = images[:count] if count else None
        attention = examples
    if count and val_ds is not None:
        for images, _ in val_ds.take(1):
            attention = images[:count]
    if config.architecture != "vit":  # CNNs have no attention maps.
        attention = None
    return training.TrainingMonitor(
        os.path.join(workdir, "tensorboard"),
        probe_batch=probe,
        example_images=examples,
        attention_images=attention,
        max_images=max(count, 1),
    )


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("train"),
        description="Train or fine-tune a ViT with model.fit (see docs/training.md).\n"
        "Without --config it runs 'digits' (a small ViT from scratch on the bundled\n"
        "digits). Your own images: --config folder_finetune --set\n"
        "dataset=folder:DIR fine-tunes a pretrained ViT-S/16 on DIR (one sub-folder\n"
        "of images per class); a --set dataset=... without --config is refused.",
    )
    cli.add_run_arguments(
        parser,
        shipped_configs(TrainConfig),
        kind=TrainConfig,
        dataset_hint="pass --config folder_finetune to fine-tune a pretrained "
        "ViT-S/16 on an image folder (--set dataset=folder:DIR), or --config "
        "digits to train the small digits ViT from scratch on it",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result (see `command`)."""
    return cli.run_command(
        run, TrainConfig, build_parser(), argv, precheck=check_init_from
    )


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
