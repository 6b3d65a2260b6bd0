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

Run it again with the same command after an interruption: it resumes from
the last completed epoch and ends where an uninterrupted run ends. See
`docs/training.md` for the run directory layout and TensorBoard.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit import data, training
from recipes.configs.base import TrainConfig, load_config, override, shipped_configs
from recipes.common import printer
from recipes.common import resume_or_start


def run(config: TrainConfig, callbacks: tuple = ()) -> dict:
    """Trains (and evaluates, and saves) as `config` says.

    Args:
        config: The run's `TrainConfig`.
        callbacks: Extra Keras callbacks, appended to the recipe's.

    Returns:
        A dict: `history` (per-epoch logs), `test` (final metrics or
        `None`), `workdir`, `model` (the trained `keras.Model`, with the
        averaged weights when EMA is on), `seconds`.
    """
    started = time.time()
    # == Strategy, seeds, precision ==========================================
    # First: TPU and multi-worker strategies must exist before TF uses devices.
    strategy = training.select_strategy(config.strategy)
    chief = training.is_chief(strategy)
    task = training.task_name(strategy)
    workdir = config.resolved_workdir()
    say = printer("train", config.verbose and chief)
    keras.utils.set_random_seed(config.seed)
    policy = training.set_precision(config.mixed_precision, strategy)
    replicas = strategy.num_replicas_in_sync
    per_replica = data.per_replica_batch_size(config.global_batch_size, replicas)
    say(
        f"Strategy: {training.describe(strategy)}; batch {config.global_batch_size} "
        f"= {replicas} x {per_replica}; precision {policy}."
    )

    # == Data ================================================================
    train_source = data.load_source(
        config.dataset, config.train_split, config.data_dir, seed=config.seed
    )
    steps = config.steps_per_epoch or data.full_batches(
        train_source.num_examples, config.global_batch_size
    )
    start_epoch = resume_or_start(workdir, chief, task, say)
    say(
        f"Data: {train_source.name}, {train_source.num_examples} examples, "
        f"{train_source.num_classes} classes, {steps} steps/epoch"
        + (
            f"; {len(train_source.skipped)} unreadable files skipped."
            if train_source.skipped
            else "."
        )
    )
    train_ds = data.train_dataset(
        train_source,
        image_size=config.image_size,
        global_batch_size=config.global_batch_size,
        epochs=config.epochs,
        start_epoch=start_epoch,
        steps_per_epoch=steps,
        seed=config.seed,
        channels=config.channels,
        area_range=config.crop_area_range,
        aspect_ratio_range=config.crop_aspect_range,
        flip=config.random_flip,
        randaugment_ops=config.randaugment_ops,
        randaugment_magnitude=config.randaugment_magnitude,
        mixup_alpha=config.mixup_alpha,
        cutmix_factor=config.cutmix_factor,
        shuffle_buffer=config.shuffle_buffer,
    )
    on_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    val_ds = _eval_data(config, config.val_split, on_tpu)
    test_ds = _eval_data(config, config.test_split, on_tpu)

    # == Model and optimizer, inside the strategy's scope ====================
    total_steps = steps * config.epochs
    with strategy.scope():
        model = build_model(config, train_source.num_classes, say)
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
        )
        model.compile(
            optimizer=optimizer,
            loss=keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=config.label_smoothing
            ),
            metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
            jit_compile=config.jit_compile,
            steps_per_execution=config.steps_per_execution,
        )
    training.prepare_multi_worker_fit(model, strategy, train_ds)
    say(
        f"Model: {model.name}, {model.count_params():,} parameters, "
        f"{config.image_size}px; {config.optimizer}, {total_steps} steps."
    )

    # == Callbacks ===========================================================
    monitor = None
    if chief and not on_tpu:
        monitor = _training_monitor(config, workdir, train_ds, val_ds)
    callback_list = training.training_callbacks(
        workdir,
        chief=chief,
        task=task,
        ema=config.ema_momentum is not None,
        monitor="val_accuracy" if val_ds is not None else "accuracy",
        update_freq=config.tensorboard_update_freq,
        profile_batch=config.profile_steps or 0,
        training_monitor=monitor,
        metric_callbacks=_fewshot_callbacks(config),
    )
    if chief:
        os.makedirs(workdir, exist_ok=True)
        with open(os.path.join(workdir, "config.json"), "w") as f:
            json.dump(dataclasses.asdict(config), f, indent=2)

    # == Train ===============================================================
    history = model.fit(
        train_ds,
        epochs=config.epochs,
        steps_per_epoch=steps,
        validation_data=val_ds,
        callbacks=[*callback_list, *callbacks],
        shuffle=False,  # The pipeline shuffles, reproducibly.
        verbose=config.verbose,
    )

    # == Evaluate, save ======================================================
    test = None
    if test_ds is not None:
        test = model.evaluate(test_ds, return_dict=True, verbose=0)
        say("Test: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items()))
    seconds = time.time() - started
    if chief:
        # The inference model alone (no optimizer state): loads with just
        # `import keras_vit`, and holds the averaged weights when EMA is on.
        inference = keras.Model(model.inputs, model.outputs, name=model.name)
        inference.save(os.path.join(workdir, "final.keras"))
        if config.export_savedmodel:
            from keras_vit.export import export

            export(
                model,
                os.path.join(workdir, "saved_model", "1"),
                class_names=train_source.class_names,
                overwrite=True,
            )
        summary = {
            "test": test,
            "epochs": config.epochs,
            "seconds": round(seconds, 1),
            "strategy": training.describe(strategy),
            "precision": policy,
            "train_examples": train_source.num_examples,
            "skipped_files": len(train_source.skipped),
        }
        with open(os.path.join(workdir, "results.json"), "w") as f:
            json.dump(summary, f, indent=2)
        say(f"Done in {seconds:.0f} s; results in {workdir}.")
    return {
        "history": history.history,
        "test": test,
        "workdir": workdir,
        "model": model,
        "seconds": seconds,
    }


def build_model(config: TrainConfig, num_classes: int, say=print) -> keras.Model:
    """The ViT of `config`, initialised from `config.init_from` if set.

    Our own `.keras` / `.weights.h5` files are matched by layer name with the
    head left zero-initialised (`keras_vit.training.load_encoder_weights`);
    anything else (a tag such as `"imagenet21k"`, an original `.npz`) goes to
    `keras_vit.weights.load_weights` through `ViT(weights=...)`. Either way,
    position embeddings saved for another resolution are resampled.
    """
    init = config.init_from
    own_file = bool(init) and init.endswith((".keras", ".weights.h5"))
    model = keras_vit.ViT(
        config.variant,
        num_classes=num_classes,
        image_size=config.image_size,
        pooling=config.pooling,
        class_token=config.class_token,
        representation_size=config.representation_size,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        drop_path_rate=config.drop_path_rate,
        channels=config.channels,
        weights=None if own_file else init,
    )
    if own_file:
        report = training.load_encoder_weights(model, init)
        say(
            f"Initialised {len(report.loaded)} layers from {init}"
            + (
                f" (position embeddings resampled: {report.resampled})"
                if report.resampled
                else ""
            )
            + f"; kept fresh: {report.skipped}."
        )
    elif init:
        say(f"Initialised from {init}.")
    return model


def _eval_data(config: TrainConfig, split: str | None, on_tpu: bool):
    if split is None:
        return None
    source = data.load_source(config.dataset, split, config.data_dir, seed=config.seed)
    return data.eval_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.eval_batch_size or config.global_batch_size,
        crop_fraction=config.eval_crop_fraction,
        channels=config.channels,
        drop_remainder=on_tpu,  # TPUs need static shapes.
        cache=source.num_examples <= 10_000,
    )


def _training_monitor(config, workdir, train_ds, val_ds):
    count = config.monitor_images
    images, labels = next(iter(train_ds.take(1)))
    probe = (images[:32], labels[:32])
    attention = None
    if count:
        source = val_ds if val_ds is not None else train_ds
        attention = next(iter(source.take(1)))[0][:count]
    return training.TrainingMonitor(
        os.path.join(workdir, "tensorboard"),
        probe_batch=probe,
        example_images=images[:count] if count else None,
        attention_images=attention,
        max_images=max(count, 1),
    )


def _fewshot_callbacks(config: TrainConfig) -> list:
    if not config.fewshot_every:
        return []
    from keras_vit.fewshot import FewShotCallback

    pools = []
    for split in (config.train_split, config.test_split or config.val_split):
        source = data.load_source(config.dataset, split, config.data_dir)
        dataset = data.eval_dataset(
            source,
            image_size=config.image_size,
            global_batch_size=256,
            channels=config.channels,
        )
        images, labels = [], []
        for x, y in dataset.unbatch().take(config.fewshot_examples).batch(256):
            images.append(x.numpy())
            labels.append(np.argmax(y.numpy(), axis=-1))
        pools.append((np.concatenate(images), np.concatenate(labels)))
    return [
        FewShotCallback(
            pools[0],
            pools[1],
            shots=config.fewshot_shots,
            every_n_epochs=config.fewshot_every,
            seed=config.seed,
        )
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.train",
        description="Train or fine-tune a ViT with model.fit (see docs/training.md).",
    )
    parser.add_argument(
        "--config",
        default="digits",
        help=f"A shipped config ({', '.join(shipped_configs())}) or a .py file "
        "defining get_config(). Defaults to digits.",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a config field, e.g. --set epochs=3 --set "
        "dataset=cifar100 --set crop_area_range='(0.5, 1.0)'. Repeatable.",
    )
    parser.add_argument(
        "--strategy",
        default=None,
        help="Force a distribution strategy: "
        + ", ".join(training.STRATEGIES)
        + " (same as --set strategy=...).",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result."""
    args = parse_args(argv)
    assignments = list(args.set)
    if args.strategy:
        assignments.append(f"strategy={args.strategy}")
    try:
        config = override(load_config(args.config), assignments)
    except ValueError as error:
        sys.exit(f"error: {error}")
    return run(config)


if __name__ == "__main__":
    main()
