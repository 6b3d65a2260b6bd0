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

from keras_vit.models import architectures
from keras_vit.recipes import cli
from keras_vit.recipes.configs.base import TrainConfig
from keras_vit.recipes.configs.base import shipped_configs
from keras_vit.recipes.initialise import check_init_from
from keras_vit.recipes.initialise import initialise
from keras_vit.recipes.recipe import Monitors
from keras_vit.recipes.recipe import Recipe
from keras_vit.recipes.recipe import Sources


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
            names no file, or a checkpoint name that cannot be found: not
            in the Hub cache offline, or no such repository), or the backup
            belongs to another config.
        RunFinished: The run directory holds this config's finished run.
        WorkdirBusy: Another live run uses the run directory.
        RunDiverged: The loss became non-finite (`results.json` says where).
        keras_vit.atomic.DiskFull: The disk filled up; what was written
            before stays whole, and the same call resumes.

    Example:

    ```python
    config = override(load_config("digits"), ["epochs=1", "variant=test/4"])
    result = run(config)  # result["test"]["accuracy"], result["workdir"]
    ```
    """
    from keras_vit.recipes import engine

    check_init_from(config, urls=True, resolve=True)
    return engine.run(
        RECIPE, config, callbacks, fresh=fresh, allow_changes=allow_changes
    )


def build_model(config: TrainConfig, num_classes: int, say=print):
    """The model of `config`, as a run starts it.

    The architecture `config.architecture` names builds it
    (`keras_vit.models.architectures`: the ViT's reads the config's model
    fields); then it is started from `config.init_from` and given LoRA
    adapters, as the config says (`keras_vit.recipes.initialise`, which
    prints its notes through `say`). The model carries the input contract
    (`model.preprocessing`; the checkpoint's when fine-tuning), the one the
    recipe's pipelines apply.
    """
    model = architectures.named(config.architecture).build(config, num_classes)
    initialise(model, config, say)
    return model


def _finishing(config: TrainConfig) -> str:
    steps = ["test evaluation"] if config.test_split else []
    steps.append("final.keras")
    if config.export_savedmodel:
        steps.append("saved_model/1")
    return ", ".join([*steps, "results.json"])


def _data(config: TrainConfig, run_) -> Sources:
    """The training, validation and test splits, checked and described
    (`None` for a split the config has not)."""
    from keras_vit import data
    from keras_vit.recipes import streams

    source = streams.training_source(config)
    steps = streams.steps_per_epoch(config, source)
    val_source = _eval_source(config, config.val_split)
    test_source = _eval_source(config, config.test_split)
    streams.check_disjoint(run_, source, [val_source, test_source])
    if val_source is not None and test_source is not None:
        # One split for both is a choice (the quick configs); two that
        # share examples are a mistake: model selection sees the test set.
        if config.val_split != config.test_split:
            data.check_disjoint(val_source, test_source)
    skipped = (
        f"; {len(source.skipped)} unreadable files skipped" if source.skipped else ""
    )
    run_.say(
        f"Data: {source.name}, {source.num_examples} examples, "
        f"{source.num_classes} classes, {steps} steps/epoch{skipped}."
    )
    return Sources(source, val_source, test_source)


def _eval_source(config: TrainConfig, split: str | None):
    if split is None:
        return None
    from keras_vit import data

    return data.load_source(config.dataset, split, config.data_dir, seed=config.seed)


def _model(config: TrainConfig, run_, sources: Sources):
    """The ViT (or another architecture's model), built and initialised."""
    return build_model(config, sources.train.num_classes, run_.say)


def _loss(config: TrainConfig) -> dict:
    """Cross-entropy on the one-hot labels (smoothed), and the accuracy."""
    import keras

    return {
        "loss": keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing
        ),
        "metrics": [keras.metrics.CategoricalAccuracy(name="accuracy")],
    }


def _monitors(config: TrainConfig, run_, sources: Sources, streams) -> Monitors:
    """The TensorBoard monitor (chief) and the few-shot linear evaluation.

    Both see images prepared by the model's input contract
    (`streams.preprocessing`).
    """
    from keras_vit.recipes.streams import fewshot_callback

    monitor = None
    if run_.chief and not run_.on_tpu:
        monitor = _training_monitor(config, run_.workdir, sources.train, streams)
    fewshot = None
    if config.fewshot_every:
        fewshot = fewshot_callback(
            config,
            dataset=config.dataset,
            train_split=config.train_split,
            test_split=config.test_split or config.val_split or "test",
            max_test_examples=config.fewshot_examples,
            say=run_.say,
            preprocessing=streams.preprocessing,
        )
    return Monitors(monitor, fewshot)


def _training_monitor(config: TrainConfig, workdir: str, source, streams):
    """The TensorBoard monitor, probing the first batch of the first epoch.

    That batch is the same whether the run was resumed or not, so the
    gradient-norm curve continues across a resume; an empty stream (or
    validation set) leaves the monitor without that probe (or images). A
    model whose blocks do not all attend (its architecture's
    `has_attention`) gets no attention maps.
    """
    import os

    from keras_vit import training
    from keras_vit.recipes.streams import first_batch

    count = config.monitor_images
    batch = first_batch(
        config,
        source,
        streams.steps,
        preprocessing=streams.preprocessing,
        mixup_alpha=config.mixup_alpha,
        cutmix_factor=config.cutmix_factor,
    )
    probe = examples = attention = None
    if batch is not None:
        images, labels = batch
        probe = (images[:32], labels[:32])
        examples = images[:count] if count else None
        attention = examples
    if count and streams.validation is not None:
        for images, _ in streams.validation.take(1):
            attention = images[:count]
    if not architectures.named(config.architecture).has_attention:
        attention = None
    return training.TrainingMonitor(
        os.path.join(workdir, "tensorboard"),
        probe_batch=probe,
        example_images=examples,
        attention_images=attention,
        max_images=max(count, 1),
    )


def _finish(config: TrainConfig, run_, model, sources, streams, trained) -> dict:
    """Test metrics; `final.keras`, the SavedModel, then `results.json`.

    Every file is written before `results.json` (chief), and the backup is
    discarded only after it: a kill at any instant of this phase leaves the
    backup of the last epoch, and the same command finishes again.
    """
    import os

    from keras_vit import atomic
    from keras_vit.recipes import rundir

    test = None
    if streams.test is not None:
        test = model.evaluate(streams.test, return_dict=True, verbose=0)
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
            class_names = sources.train.class_names
            try:
                export(model, target, class_names=class_names, overwrite=True)
            except Exception as error:  # TensorFlow's writer: ENOSPC in words.
                atomic.raise_if_disk_full(error, target)
                raise
    rundir.finished(run_, trained, sources.train, test=test)
    run_.say(f"Done in {run_.seconds:.0f} s; results in {run_.workdir}.")
    return {"test": test}


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


# Training from scratch and fine-tuning, for `keras_vit.recipes.engine.run`.
RECIPE = Recipe(
    name="train",
    finishing=_finishing,
    data=_data,
    model=_model,
    monitors=_monitors,
    finish=_finish,
    loss=_loss,
    metric="accuracy",
    augmentation=("mixup_alpha", "cutmix_factor"),
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
