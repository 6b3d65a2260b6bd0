"""The run engine: one skeleton that every training recipe runs (TensorFlow).

A recipe (`recipes.train`, `recipes.pretrain_masked`) is a `Recipe`: the
steps in which it differs (its splits, its model, its monitors, its
finishing steps); `run(recipe, config)` does the rest, in this order:

1. `setup`: strategy (first: TPU and multi-worker strategies must exist
   before TensorFlow uses a device), chief, seed, precision. The result
   (`keras_vit.recipes.rundir.Setup`) is a context manager: it releases the
   run directory's lock, and an interruption or a full disk leaving it
   carries where the run stopped and how to go on.
2. `rundir.resume_or_start`: the lock, then the backup to resume from (or a
   fresh start). It only decides: nothing in the directory changes yet.
3. Everything that can refuse the command, each `ValueError` a one-line
   `ConfigError`: the recipe's splits (`Recipe.data`), its model, built in
   the strategy's scope (`Recipe.model`), the streams, normalised by the
   model's input contract (`keras_vit.recipes.streams`), the optimizer
   (`compile_and_restore`: the backup restored into it) and the callbacks
   (`Recipe.monitors`, `run_callbacks`).
4. `rundir.make_room` and `rundir.write_config`: what step 2 decided.
5. `fit`: `model.fit` from the resumed epoch with the crash-safe callbacks;
   raises `RunDiverged` (after writing `results.json`) when the loss became
   non-finite. A backup of the last epoch skips it: training had finished.
6. `Recipe.finish`: evaluate, save the models, then `rundir.finished`
   (`results.json`, and only then the backup goes).

Example:

```python
result = run(train.RECIPE, config)  # what `recipes.train.run(config)` does
result["workdir"], result["history"]
```
"""

from __future__ import annotations

import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import data
from keras_vit import paths
from keras_vit import training
from keras_vit.finetune import layer_decay_multipliers
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.recipes import rundir
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import RunConfig
from keras_vit.recipes.configs.base import fingerprint
from keras_vit.recipes.recipe import Recipe
from keras_vit.recipes.recipe import Streams
from keras_vit.recipes.rundir import RunDiverged
from keras_vit.recipes.rundir import Setup
from keras_vit.recipes.rundir import Trained
from keras_vit.recipes.rundir import WorkerLost
from keras_vit.recipes.streams import eval_data
from keras_vit.recipes.streams import training_data
from keras_vit.recipes.termination import raise_if_terminated
from keras_vit.training.backup import restore
from keras_vit.training.callbacks import flush_summaries


def run(
    recipe: Recipe,
    config: RunConfig,
    callbacks: tuple = (),
    *,
    fresh: bool = False,
    allow_changes: bool = False,
) -> dict:
    """Runs `recipe` as `config` says (see the module docstring).

    Args:
        recipe: The recipe.
        config: Its config.
        callbacks: Extra Keras callbacks, before the backup's commit.
        fresh: Set what a previous run left in the run directory aside
            (to `old-<UTC time>/` in it) and start again.
        allow_changes: Resume from a backup made with another config.

    Returns:
        What `recipe.finish` returns, with `history` (per-epoch logs of the
        epochs this call trained), `workdir`, `model` and `seconds`.

    Raises:
        ConfigError: A config value that cannot be used, or the backup
            belongs to another config.
        RunFinished: The run directory holds this config's finished run.
        WorkdirBusy: Another live run uses the run directory.
        RunDiverged: The loss became non-finite (`results.json` says where).
        keras_vit.atomic.DiskFull: The disk filled up; what was written
            before stays whole, and the same call resumes.
    """
    with setup(config, recipe.name) as run_:
        state = rundir.resume_or_start(
            config,
            run_,
            fresh=fresh,
            allow_changes=allow_changes,
            finishing=recipe.finishing(config),
        )
        start_epoch = 0 if state is None else state.epoch
        # Everything that can refuse the command comes before the run
        # directory changes (`make_room`): a refused command changes nothing.
        try:  # A dataset or model argument that cannot be used: one line.
            sources = recipe.data(config, run_)
            # The model before the streams: they feed it pixels prepared by
            # its input contract (that of the checkpoint it starts from).
            with run_.strategy.scope():
                model = recipe.model(config, run_, sources)
                loss = recipe.loss(config)
            streams = _streams(recipe, config, run_, sources, model, start_epoch)
            compile_and_restore(
                model, config, run_, streams.steps, streams.train, state, **loss
            )
            built = None
            if start_epoch < config.epochs:  # Else nothing is trained.
                monitors = recipe.monitors(config, run_, sources, streams)
                metric = recipe.metric
                built = run_callbacks(
                    config,
                    run_,
                    monitor=f"val_{metric}" if streams.validation else metric,
                    training_monitor=monitors.training,
                    fewshot=monitors.fewshot,
                    extra=callbacks,
                )
        except ValueError as error:
            raise ConfigError(str(error)) from error
        rundir.make_room(run_)
        rundir.write_config(config, run_)
        trained = fit(
            model,
            config,
            run_,
            streams.train,
            steps=streams.steps,
            state=state,
            callbacks=lambda: built,
            validation_data=streams.validation,
        )
        result = recipe.finish(config, run_, model, sources, streams, trained)
        return {
            "history": trained.history,
            **result,
            "workdir": run_.workdir,
            "model": model,
            "seconds": run_.seconds,
        }


def _streams(recipe, config, run_, sources, model, start_epoch) -> Streams:
    """The `Streams` of `sources`, prepared by `model`'s input contract."""
    preprocessing = preprocessing_of(model)
    _, steps, train = training_data(
        config,
        start_epoch,
        source=sources.train,
        preprocessing=preprocessing,
        **{name: getattr(config, name) for name in recipe.augmentation},
    )
    return Streams(
        steps,
        train,
        eval_data(config, sources.validation, run_.on_tpu, preprocessing),
        eval_data(config, sources.test, run_.on_tpu, preprocessing),
        preprocessing,
    )


def setup(config: RunConfig, recipe: str) -> Setup:
    """Strategy, chief, seed and precision of a run; says what it picked.

    Use the result as a context manager: it releases the run directory's
    lock that `resume_or_start` takes.

    Raises:
        ConfigError: A path of the config is a URL that no file system here
            can open (`check_paths`); nothing was written.
    """
    started = time.time()
    rundir.check_paths(config)
    strategy = training.select_strategy(config.strategy)
    chief = training.is_chief(strategy)
    say = rundir.printer(recipe, config.verbose and chief)
    keras.utils.set_random_seed(config.seed)
    policy, why = training.resolve_precision(config.mixed_precision, strategy)
    keras.config.set_dtype_policy(policy)
    replicas = strategy.num_replicas_in_sync
    per_replica = data.per_replica_batch_size(config.global_batch_size, replicas)
    say(
        f"Strategy: {training.describe(strategy)}; batch {config.global_batch_size} "
        f"= {replicas} x {per_replica}; precision {policy} ({why})."
    )
    task = training.task_name(strategy)
    return Setup(
        strategy,
        chief,
        task,
        paths.normalize(config.resolved_workdir()),
        policy,
        say,
        started,
        epochs=config.epochs,
        say_worker=rundir.printer(f"{recipe} {task}", config.verbose),
        fingerprint=fingerprint(config),
        on_tpu=isinstance(strategy, tf.distribute.TPUStrategy),
        workers=_workers(strategy),
        strategy_name=training.describe(strategy),
        all_gather=lambda row: _all_gather(strategy, row),
        stop_errors=(KeyboardInterrupt, OSError, tf.errors.OpError),
    )


def _workers(strategy: tf.distribute.Strategy) -> int:
    """The workers of a multi-worker run (1 under any other strategy)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    spec = strategy.cluster_resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("chief", [])) + len(spec.get("worker", [])))


def _all_gather(strategy: tf.distribute.Strategy, row: list[int]) -> np.ndarray:
    """Every replica's `row`, stacked: one collective over the strategy.

    Raises:
        WorkerLost: The collective failed (another worker stopped).
    """
    value = tf.constant(np.asarray(row, np.int64)[None])

    @tf.function
    def gather():
        def step():
            return tf.distribute.get_replica_context().all_gather(value, axis=0)

        return strategy.run(step)

    try:
        result = gather()
    except tf.errors.OpError as error:
        raise WorkerLost(
            "another worker stopped before the workers agreed on the epoch to "
            f"resume from ({type(error).__name__}); nothing was changed: see "
            "its output, then start every worker again with the same command"
        ) from None
    return strategy.experimental_local_results(result)[0].numpy()


def compile_model(model: keras.Model, config: RunConfig, total_steps: int, **kwargs):
    """Compiles `model` with the config's schedule and optimizer.

    Call it inside the strategy's scope. `kwargs` go to `model.compile`
    (loss, metrics).
    """
    schedule = training.WarmupDecay(
        config.learning_rate,
        total_steps=total_steps,
        warmup_steps=min(config.warmup_steps, total_steps),
        decay=config.schedule,
        end_learning_rate=config.end_learning_rate,
    )
    decay = getattr(config, "layer_decay", None)  # Fine-tuning's rate factors.
    optimizer = training.make_optimizer(
        config.optimizer,
        schedule,
        weight_decay=config.weight_decay,
        momentum=config.momentum,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        global_clipnorm=config.global_clipnorm,
        ema_momentum=config.ema_momentum,
        lr_multipliers=None if decay is None else layer_decay_multipliers(model, decay),
    )
    model.compile(
        optimizer=optimizer,
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
        **kwargs,
    )
    # Outside the first step: otherwise the step is traced twice.
    training.build_optimizer(model)


def compile_and_restore(
    model: keras.Model, config: RunConfig, run: Setup, steps: int, dataset, state,
    **kwargs,
) -> None:  # fmt: skip
    """Compiles `model` (built in the strategy's scope) and restores `state`.

    `kwargs` go to `model.compile` (loss, metrics); `dataset` is the training
    stream (`prepare_multi_worker_fit` builds the model from its first batch).
    """
    total_steps = steps * config.epochs
    with run.strategy.scope():
        compile_model(model, config, total_steps, **kwargs)
    training.prepare_multi_worker_fit(model, run.strategy, dataset)
    if state is not None:
        with run.strategy.scope():
            restore(model, state)
    run.say(
        f"Model: {model.name}, {model.count_params():,} parameters, "
        f"{config.image_size}px; {config.optimizer}, {steps} steps/epoch, "
        f"{total_steps} steps."
    )


def run_callbacks(
    config: RunConfig,
    run: Setup,
    *,
    monitor: str,
    training_monitor,
    fewshot,
    extra=(),
):
    """`(guard, callbacks)`: the crash-safe set of `training_callbacks`.

    `extra` callbacks (a caller's) go before the last one, the backup's
    commit, so that an epoch is committed after everything it wrote.
    """
    guard = training.DivergenceGuard()
    callbacks = training.training_callbacks(
        run.workdir,
        chief=run.chief,
        task=run.task,
        ema=config.ema_momentum is not None,
        monitor=monitor,
        update_freq=config.tensorboard_update_freq,
        profile_batch=config.profile_steps or 0,
        training_monitor=training_monitor,
        metric_callbacks=[fewshot] if fewshot is not None else [],
        fingerprint=run.fingerprint,
        guard=guard,
    )
    return guard, [*callbacks[:-1], *extra, callbacks[-1]]


def fit(
    model, config: RunConfig, run: Setup, dataset, *, steps, state, callbacks, **kwargs
):
    """`model.fit` from the resumed epoch; the `Trained` result.

    Args:
        model: The compiled model, with `state` restored.
        config: The run's config.
        run: The run's `Setup`.
        dataset: The training stream (from the resumed epoch).
        steps: Steps per epoch.
        state: The `BackupState` resumed from, or `None`.
        callbacks: A function returning `(guard, callbacks)`; called only
            when there are epochs left to train.
        **kwargs: More `model.fit` arguments (`validation_data`).

    A backup of the last epoch trains nothing: the model already holds the
    trained state, and gets its final values (the averaged weights with
    EMA), as `model.fit` gives them when it ends.

    Raises:
        RunDiverged: The loss became non-finite (after `results.json`
            recorded where).
    """
    start_epoch = 0 if state is None else state.epoch
    if start_epoch >= config.epochs:
        with run.strategy.scope():
            model.optimizer.finalize_variable_values(model.trainable_variables)
        run.phase = "finishing"
        return Trained({}, state.epoch, dict(state.logs))
    guard, callback_list = callbacks()
    run.phase, run.epoch = "training", start_epoch
    try:
        history = model.fit(
            dataset,
            epochs=config.epochs,
            initial_epoch=start_epoch,
            steps_per_epoch=steps,
            callbacks=[_Progress(run), *callback_list],
            shuffle=False,  # The pipeline shuffles, reproducibly.
            verbose=config.verbose,
            **kwargs,
        )
    except BaseException:  # Ctrl-C, SIGTERM, a full disk: `fit` closes nothing.
        flush_summaries(callback_list)
        raise
    if guard.diverged:
        _diverged(config, run, guard)
    run.phase = "finishing"
    logs = {key: values[-1] for key, values in history.history.items() if values}
    return Trained(history.history, guard.finished_epochs, logs)


def _diverged(config: RunConfig, run: Setup, guard) -> None:
    """Records where the loss became non-finite, then raises `RunDiverged`."""
    run.phase = "diverged"
    where = guard.diverged
    if run.chief:
        rundir.write_results(
            run,
            {
                "status": "diverged",
                "diverged": where,
                "epochs": guard.finished_epochs,
                "epochs_planned": config.epochs,
                "seconds": round(run.seconds, 1),
                "strategy": run.strategy_name,
                "precision": run.policy,
            },
        )
    same = "the same command without --fresh" if run.fresh else "the same command"
    resume = (
        f"the backup of epoch {guard.finished_epochs} in {run.backup_dir} is kept: "
        f"rerun {same} with a lower --set learning_rate=... "
        "and --allow-changes to resume from it, or with --fresh to start again"
        if guard.finished_epochs
        else "no epoch finished: rerun with a lower --set learning_rate=..."
    )
    raise RunDiverged(
        f"training diverged at epoch {where['epoch']}, step {where['step']} "
        f"(loss {where['loss']}); no weights were saved after it; {resume}"
    )


class _Progress(keras.callbacks.Callback):
    """Keeps `Setup.epoch` current, for the line an interruption prints.

    At each step it also raises a SIGTERM whose `Terminated` Python
    swallowed (`termination.raise_if_terminated`).
    """

    def __init__(self, run: Setup):
        super().__init__()
        self.run = run

    def on_epoch_begin(self, epoch, logs=None):
        raise_if_terminated()
        self.run.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        raise_if_terminated()

    def on_test_batch_end(self, batch, logs=None):
        raise_if_terminated()
