"""The steps the training recipes share (imports TensorFlow; load it lazily).

`recipes.train` and `recipes.pretrain_masked` are each a short sequence of
these steps:

1. `setup`: strategy (first: TPU and multi-worker strategies must exist
   before TensorFlow uses a device), chief, seed, precision.
2. `resume_or_start`: the newest whole backup, checked against the config's
   fingerprint (or a fresh start; `fresh=True` sets an old backup aside).
3. `training_data`: the training source and its seeded stream, starting at
   the resumed epoch.
4. `compile_model`: the warm-up/decay schedule and the optimizer, compiled
   inside the strategy's scope; then `restore` the backup into it.
5. `fit`: `model.fit` from the resumed epoch with the crash-safe callbacks;
   raises `RunDiverged` (after writing `results.json`) when the loss became
   non-finite.

Files are written whole or not at all (`keras_vit.atomic`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import atomic
from keras_vit import data
from keras_vit import training
from keras_vit.training.backup import backup_dir_of
from keras_vit.training.backup import differences
from keras_vit.training.backup import latest_backup
from keras_vit.training.backup import restore
from keras_vit.training.backup import set_aside
from recipes.configs.base import ConfigError
from recipes.configs.base import RunConfig
from recipes.configs.base import fingerprint


class RunDiverged(RuntimeError):
    """The loss became non-finite; the message says where and how to resume."""


@dataclasses.dataclass
class Setup:
    """Where and how a run executes (the result of `setup`)."""

    strategy: tf.distribute.Strategy
    chief: bool
    task: str
    workdir: str
    policy: str
    say: object
    started: float
    # Unreadable files left out of any split, each listed once (results.json).
    skipped_files: list[str] = dataclasses.field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Seconds since the run started."""
        return time.time() - self.started

    @property
    def on_tpu(self) -> bool:
        return isinstance(self.strategy, tf.distribute.TPUStrategy)

    @property
    def backup_dir(self) -> str:
        return backup_dir_of(self.workdir, self.chief, self.task)


def setup(config: RunConfig, recipe: str) -> Setup:
    """Strategy, chief, seed and precision of a run; says what it picked."""
    started = time.time()
    strategy = training.select_strategy(config.strategy)
    chief = training.is_chief(strategy)
    say = printer(recipe, config.verbose and chief)
    keras.utils.set_random_seed(config.seed)
    policy, why = training.resolve_precision(config.mixed_precision, strategy)
    keras.config.set_dtype_policy(policy)
    replicas = strategy.num_replicas_in_sync
    per_replica = data.per_replica_batch_size(config.global_batch_size, replicas)
    say(
        f"Strategy: {training.describe(strategy)}; batch {config.global_batch_size} "
        f"= {replicas} x {per_replica}; precision {policy} ({why})."
    )
    return Setup(
        strategy,
        chief,
        training.task_name(strategy),
        config.resolved_workdir(),
        policy,
        say,
        started,
    )


def resume_or_start(
    config: RunConfig, run: Setup, *, fresh: bool = False, allow_changes: bool = False
):
    """The backup to resume from (a `BackupState`), or `None` for a fresh run.

    Args:
        config: The run's config; its fingerprint must match the backup's.
        run: The run's `Setup`.
        fresh: Set an existing backup aside (renamed to `backup.old-<time>`)
            and start again.
        allow_changes: Resume even though the config differs from the
            backup's (e.g. a lower `learning_rate` after a divergence).

    Raises:
        ConfigError: The backup belongs to another config (one line naming
            the differing keys and saying how to start fresh).
    """
    if fresh and os.path.exists(run.backup_dir):
        moved = set_aside(run.backup_dir)
        run.say(f"--fresh: moved the old backup to {moved}.")
    state = latest_backup(run.backup_dir, say=print)
    if state is None:
        if run.chief:
            start_fresh(run.workdir)
        return None
    changed = differences(state.fingerprint, fingerprint(config))
    if changed and not allow_changes:
        stored = state.fingerprint
        detail = ", ".join(
            f"{key} {stored.get(key, '<absent>')!r} -> "
            f"{getattr(config, key, '<absent>')!r}"
            for key in changed
        )
        raise ConfigError(
            f"the backup in {run.backup_dir} (epoch {state.epoch}) belongs to "
            f"another config: {detail}; rerun with --fresh to start again, or "
            "--allow-changes to resume with the new values"
        )
    note = f" with changed {', '.join(changed)}" if changed else ""
    where = f"{run.backup_dir} at epoch {state.epoch + 1}"
    run.say(f"Resuming from the backup in {where}{note}.")
    return state


def start_fresh(workdir: str) -> None:
    """Clears what a previous, finished run left (no backup: not a resume).

    Its logs, results, checkpoints and models go, so that nothing in the
    directory can be mistaken for the new run's (e.g. after it diverges).
    """
    names = ("metrics.csv", "tensorboard", "results.json", "checkpoints")
    for name in (*names, "final.keras", "encoder.keras", "saved_model"):
        path = os.path.join(workdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def training_data(config: RunConfig, start_epoch: int, **augmentation):
    """`(source, steps_per_epoch, dataset)`: the seeded training stream.

    Args:
        config: The run's config (data and augmentation fields).
        start_epoch: The first epoch the stream produces (a resumed run's).
        **augmentation: Recipe-specific `keras_vit.data.Augmentation`
            fields (e.g. `mixup_alpha`).
    """
    source = data.load_source(
        config.dataset, config.train_split, config.data_dir, seed=config.seed
    )
    steps = config.steps_per_epoch or data.full_batches(
        source.num_examples, config.global_batch_size
    )
    dataset = data.train_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.global_batch_size,
        epochs=config.epochs,
        start_epoch=start_epoch,
        steps_per_epoch=steps,
        seed=config.seed,
        channels=config.channels,
        augmentation=data.Augmentation(
            crop_area_range=config.crop_area_range,
            crop_aspect_range=config.crop_aspect_range,
            flip=config.random_flip,
            randaugment_ops=config.randaugment_ops,
            randaugment_magnitude=config.randaugment_magnitude,
            **augmentation,
        ),
        shuffle_buffer=config.shuffle_buffer,
    )
    return source, steps, dataset


def check_disjoint(run: Setup, train_source, other_sources) -> None:
    """Raises `ValueError` when the training split shares files with another.

    Also records every split's unreadable files in `run.skipped_files`.
    """
    skipped = set(train_source.skipped)
    for other in other_sources:
        if other is not None:
            data.check_disjoint(train_source, other)
            skipped.update(other.skipped)
    run.skipped_files = sorted(skipped)


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
    optimizer = training.make_optimizer(
        config.optimizer,
        schedule,
        weight_decay=config.weight_decay,
        momentum=config.momentum,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        global_clipnorm=config.global_clipnorm,
        ema_momentum=config.ema_momentum,
        lr_multipliers=_layer_decay(model, config),
    )
    model.compile(
        optimizer=optimizer,
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
        **kwargs,
    )
    # Outside the first step: otherwise the step is traced twice.
    training.build_optimizer(model)


def _layer_decay(model: keras.Model, config: RunConfig) -> dict | None:
    """Layer-wise rate factors when the config asks for them (fine-tuning)."""
    decay = getattr(config, "layer_decay", None)
    if decay is None:
        return None
    from keras_vit.finetune import layer_decay_multipliers

    return layer_decay_multipliers(model, decay)


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
    config: RunConfig, run: Setup, *, monitor: str, training_monitor, fewshot
):
    """`(guard, callbacks)`: the crash-safe set of `training_callbacks`."""
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
        fingerprint=fingerprint(config),
        guard=guard,
    )
    return guard, callbacks


def write_config(config: RunConfig, run: Setup) -> None:
    """`config.json` (chief only), written atomically after the resume check."""
    if run.chief:
        atomic.write_json(
            os.path.join(run.workdir, "config.json"), dataclasses.asdict(config)
        )


def fit(
    model,
    config: RunConfig,
    run: Setup,
    dataset,
    *,
    steps,
    start_epoch,
    callbacks,
    guard,
    **kwargs,
):
    """`model.fit` from `start_epoch`; raises `RunDiverged` if it diverged."""
    history = model.fit(
        dataset,
        epochs=config.epochs,
        initial_epoch=start_epoch,
        steps_per_epoch=steps,
        callbacks=callbacks,
        shuffle=False,  # The pipeline shuffles, reproducibly.
        verbose=config.verbose,
        **kwargs,
    )
    if guard.diverged:
        where = guard.diverged
        if run.chief:
            write_results(
                run,
                {
                    "status": "diverged",
                    "diverged": where,
                    "epochs": guard.finished_epochs,
                    "epochs_planned": config.epochs,
                    "seconds": round(run.seconds, 1),
                    "strategy": training.describe(run.strategy),
                    "precision": run.policy,
                },
            )
        resume = (
            f"the backup of epoch {guard.finished_epochs} in {run.backup_dir} is kept: "
            "rerun the same command with a lower --set learning_rate=... "
            "and --allow-changes to resume from it, or with --fresh to start again"
            if guard.finished_epochs
            else "no epoch finished: rerun with a lower --set learning_rate=..."
        )
        raise RunDiverged(
            f"training diverged at epoch {where['epoch']}, step {where['step']} "
            f"(loss {where['loss']}); no weights were saved after it; {resume}"
        )
    return history


def write_results(run: Setup, summary: dict) -> None:
    """`results.json` as strict JSON: non-finite numbers become `null`."""
    atomic.write_json(os.path.join(run.workdir, "results.json"), _finite(summary))


def finished(run: Setup, guard, source, **results) -> None:
    """Writes `results.json` of a finished run and says "Done"."""
    write_results(
        run,
        {
            "status": "finished",
            **results,
            "epochs": guard.finished_epochs,
            "seconds": round(run.seconds, 1),
            "strategy": training.describe(run.strategy),
            "precision": run.policy,
            "train_examples": source.num_examples,
            "skipped_files": run.skipped_files or list(source.skipped),
        },
    )


def fewshot_callback(
    config: RunConfig,
    *,
    dataset: str,
    train_split: str,
    test_split: str,
    max_test_examples: int | None,
    say,
):
    """The few-shot linear evaluation callback: pools drawn and held once."""
    from keras_vit.analysis.fewshot import FewShotCallback
    from recipes.fewshot import few_shot_pools

    train, test, _ = few_shot_pools(
        dataset,
        train_split=train_split,
        test_split=test_split,
        image_size=config.image_size,
        channels=config.channels,
        shots=config.fewshot_shots,
        seed=config.seed,
        data_dir=config.data_dir,
        max_test_examples=max_test_examples,
    )
    pools = []
    for part in (train, test):
        batches = [(x.numpy(), np.argmax(y.numpy(), axis=-1)) for x, y in part]
        pools.append(tuple(np.concatenate(a) for a in zip(*batches, strict=True)))
    say(
        f"Few-shot: {len(pools[0][0])} drawn train images, {len(pools[1][0])} test "
        f"images, every {config.fewshot_every} epoch(s)."
    )
    return FewShotCallback(
        pools[0],
        pools[1],
        shots=config.fewshot_shots,
        every_n_epochs=config.fewshot_every,
        seed=config.seed,
    )


def printer(prefix: str, enabled: bool):
    """Returns `say(message)`, printing `[prefix] message` when `enabled`."""

    def say(message: str) -> None:
        if enabled:
            print(f"[{prefix}] {message}", flush=True)  # noqa: T201

    return say


def _finite(value):
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
