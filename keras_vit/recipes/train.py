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
    from keras_vit.recipes import common

    check_init_from(config)
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
            source, steps, train_ds, val_ds, test_ds = _data(config, run_, start_epoch)
            model = _model(config, run_, source.num_classes, steps, train_ds, state)
            built = None
            if start_epoch < config.epochs:  # Else nothing is trained.
                built = _callbacks(config, run_, source, steps, val_ds, callbacks)
        except ValueError as error:
            raise ConfigError(str(error).splitlines()[0]) from error
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
        test = _evaluate_and_save(config, run_, model, source, test_ds, trained)
        return {
            "history": trained.history,
            "test": test,
            "workdir": run_.workdir,
            "model": model,
            "seconds": run_.seconds,
        }


def check_init_from(config: TrainConfig) -> None:
    """Raises `ConfigError` (one line) when `init_from` names a missing file.

    A value with a path separator or a checkpoint suffix is a file; other
    values are weights tags, checked when they are loaded.
    """
    import os

    value = config.init_from
    if not value:
        return
    suffixes = (".npz", ".safetensors", ".keras", ".h5", ".pth", ".pth.tar", ".pt")
    looks_like_file = os.sep in value or "/" in value or value.endswith(suffixes)
    if looks_like_file and not os.path.isfile(value):
        what = "is a directory, not" if os.path.isdir(value) else "names no"
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


def _data(config: TrainConfig, run_, start_epoch: int):
    """Training source and stream, validation and test data (splits checked)."""
    from keras_vit.recipes import common

    source, steps, train_ds = common.training_data(
        config,
        start_epoch,
        mixup_alpha=config.mixup_alpha,
        cutmix_factor=config.cutmix_factor,
    )
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
    val_ds = _eval_data(config, val_source, run_.on_tpu)
    test_ds = _eval_data(config, test_source, run_.on_tpu)
    return source, steps, train_ds, val_ds, test_ds


def _model(config: TrainConfig, run_, num_classes: int, steps: int, train_ds, state):
    """The ViT, compiled in the strategy's scope, with the backup restored."""
    import keras

    from keras_vit.recipes import common

    with run_.strategy.scope():
        model = build_model(config, num_classes, run_.say)
        loss = keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing
        )
        metrics = [keras.metrics.CategoricalAccuracy(name="accuracy")]
    common.compile_and_restore(
        model, config, run_, steps, train_ds, state, loss=loss, metrics=metrics
    )
    return model


def build_model(config: TrainConfig, num_classes: int, say=print):
    """The ViT of `config`, initialised from `config.init_from` if set.

    Every kind of `init_from` (a tag, an `.npz`, a `.safetensors`, our own
    `.keras` / `.weights.h5`) goes through `keras_vit.weights.load_weights`,
    the call `keras_vit.ViT(weights=...)` makes; it is made here so that its
    notes (head kept or zeroed, position embeddings resampled) are printed.
    """
    import keras_vit
    from keras_vit.recipes.configs.base import TRAIN_VIT_FIELDS
    from keras_vit.recipes.configs.base import model_arguments
    from keras_vit.weights import load_weights

    if config.architecture != "vit":
        return _cnn(config, num_classes)
    model = keras_vit.ViT(
        config.variant,
        num_classes=num_classes,
        **model_arguments(config, TRAIN_VIT_FIELDS),
    )
    if config.init_from:
        try:
            notes = load_weights(model, config.init_from)
        except OSError as error:  # E.g. removed since `check_init_from`.
            reason = error.strerror or str(error)
            raise ValueError(f"init_from={config.init_from!r}: {reason}") from error
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


def _cnn(config: TrainConfig, num_classes: int):
    """The CNN of Park & Kim's comparison that `config.architecture` names."""
    from keras_vit.models import cnn

    build = {
        "resnet": cnn.ResNet,
        "preact_resnet": cnn.PreActResNet,
        "alternet": cnn.AlterNet,
    }[config.architecture]
    return build(
        config.variant,
        num_classes=num_classes,
        image_size=config.image_size,
        channels=config.channels,
        drop_path_rate=config.encoder.drop_path_rate,
    )


def _callbacks(config: TrainConfig, run_, source, steps: int, val_ds, extra=()):
    """`(guard, callbacks)`: the crash-safe set, monitor and few-shot eval."""
    from keras_vit.recipes import common

    monitor = None
    if run_.chief and not run_.on_tpu:
        monitor = _training_monitor(config, run_.workdir, source, steps, val_ds)
    fewshot = None
    if config.fewshot_every:
        fewshot = common.fewshot_callback(
            config,
            dataset=config.dataset,
            train_split=config.train_split,
            test_split=config.test_split or config.val_split or "test",
            max_test_examples=config.fewshot_examples,
            say=run_.say,
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

    import keras

    from keras_vit import atomic
    from keras_vit.recipes import common

    test = None
    if test_ds is not None:
        test = model.evaluate(test_ds, return_dict=True, verbose=0)
        run_.say("Test: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
    if run_.chief:
        # The inference model alone (no optimizer state): loads with just
        # `import keras_vit`, and holds the averaged weights when EMA is on.
        inference = keras.Model(model.inputs, model.outputs, name=model.name)
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


def _eval_source(config: TrainConfig, split: str | None):
    if split is None:
        return None
    from keras_vit import data

    return data.load_source(config.dataset, split, config.data_dir, seed=config.seed)


def _eval_data(config: TrainConfig, source, on_tpu: bool):
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
    )


def _fits_in_memory(num_examples: int, config: TrainConfig) -> bool:
    """Whether the decoded float32 eval set is small enough to cache (2 GiB)."""
    height, width = (
        (config.image_size, config.image_size)
        if isinstance(config.image_size, int)
        else config.image_size
    )
    return num_examples * height * width * config.channels * 4 <= 2 * 1024**3


def _training_monitor(config: TrainConfig, workdir: str, source, steps: int, val_ds):
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
        description="Train or fine-tune a ViT with model.fit (see docs/training.md).",
    )
    cli.add_run_arguments(parser, shipped_configs(TrainConfig))
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result (see `command`)."""
    return cli.run_command(
        run, TrainConfig, build_parser(), argv, precheck=check_init_from
    )


if __name__ == "__main__":
    main(sys.argv[1:])
