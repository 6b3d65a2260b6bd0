r"""Masked patch prediction pre-training (paper §4.6, Appendix B.1.2).

Half of the patch embeddings of each image are corrupted (80% [mask], 10%
another patch of the image, 10% kept) and the model predicts the 3-bit mean
colour (512 classes) of each corrupted patch (`keras_vit.masked_patch`). The
optimizer is the paper's: Adam β = (0.9, 0.999), linear warm-up, cosine
decay, gradient clipping at global norm 1. Few-shot linear accuracy is
logged each epoch, as the paper used it to compare self-supervised settings.

```bash
python -m recipes.pretrain_masked --config digits            # CPU, minutes
python -m recipes.pretrain_masked --config b16_paper --set dataset=imagenet2012
# then fine-tune the encoder with recipe 2:
python -m recipes.train --config digits \
    --set init_from=runs/masked_digits/encoder.keras
```

The run directory (`runs/<name>` unless `--set workdir=...`) holds, like
`recipes.train`'s: `tensorboard/`, `metrics.csv`, `checkpoints/{best,last}
.keras`, `backup/` (an interrupted run started again with the same command
resumes), `config.json`, `results.json`, and

- `final.keras`: the whole pre-training model (`MaskedPatchModel`);
- `encoder.keras`: the encoder alone as a `keras_vit.ViT(include_top=False)`,
  the file to fine-tune from (`init_from=`), or to evaluate with
  `python -m recipes.fewshot --model .../encoder.keras`.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import sys
import time
import typing

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit import data
from keras_vit import training
from keras_vit.fewshot import FewShotCallback
from keras_vit.masked_patch import masked_patch_model
from keras_vit.masked_patch import transfer_encoder
from recipes.configs.base import check_type
from recipes.fewshot import few_shot_pools
from recipes.common import printer
from recipes.common import resume_or_start


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """Settings of a masked-patch pre-training run (defaults: the paper's)."""

    # -- run ---------------------------------------------------------------
    name: str = "masked"  # The default workdir is runs/<name>.
    workdir: str | None = None
    seed: int = 0  # Model initialisation, data order, augmentation, corruption.

    # -- data (labels are not used for training) ---------------------------
    dataset: str = "digits"  # "digits", "folder:PATH" or a TFDS name.
    data_dir: str | None = None
    train_split: str = "train"
    image_size: int = 224
    channels: int = 3
    global_batch_size: int = 4096  # Paper: 4096.
    shuffle_buffer: int = 10_000
    crop_area_range: tuple[float, float] = (0.05, 1.0)  # Inception crop.
    crop_aspect_range: tuple[float, float] = (0.75, 4 / 3)
    random_flip: bool = True

    # -- model and objective -----------------------------------------------
    variant: str = "B/16"
    pooling: str = "token"  # Of the few-shot representation only.
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    corruption_rate: float = 0.5  # Paper: 50% of the patches.
    mask_rate: float = 0.8  # ... of which 80% [mask],
    random_rate: float = 0.1  # 10% another patch of the image, 10% kept.
    color_bits: int = 3  # 3 bits per channel: 512 colour classes.

    # -- optimisation (Appendix B.1.2) -------------------------------------
    optimizer: str = "adam"  # "adam" or "adamw" (with weight_decay).
    learning_rate: float = 2e-4  # Paper: base learning rate 2e-4.
    end_learning_rate: float = 0.0
    schedule: str = "cosine"  # Paper: cosine decay.
    warmup_steps: int = 10_000  # Paper: 10k warm-up steps.
    weight_decay: float = 0.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    global_clipnorm: float | None = 1.0
    epochs: int = 14  # Paper: 1M steps, about 14 epochs of JFT.
    steps_per_epoch: int | None = None  # Defaults to examples // batch.

    # -- distribution and speed --------------------------------------------
    strategy: str = "auto"
    mixed_precision: bool | str = False
    jit_compile: bool | str = "auto"

    # -- monitoring --------------------------------------------------------
    verbose: int = 1
    tensorboard_update_freq: str | int = "epoch"
    monitor_images: int = 4  # Example images and attention maps; 0 = none.
    fewshot_every: int = 1  # Few-shot linear eval every N epochs; 0 = off.
    fewshot_dataset: str | None = None  # Defaults to `dataset`.
    fewshot_train_split: str = "train"
    fewshot_test_split: str = "test"
    fewshot_shots: tuple[int, ...] = (1, 5, 10, 25)
    fewshot_test_examples: int = 2_000

    def resolved_workdir(self) -> str:
        return self.workdir or os.path.join("runs", self.name)


def digits() -> PretrainConfig:
    """Ti/4 at 16 px on the bundled digits, CPU-sized (see the docs for times)."""
    return PretrainConfig(
        name="masked_digits",
        dataset="digits",
        image_size=16,
        global_batch_size=64,
        crop_area_range=(0.6, 1.0),
        crop_aspect_range=(0.8, 1.25),
        random_flip=False,
        variant="Ti/4",
        learning_rate=1e-3,
        warmup_steps=200,
        epochs=30,
        verbose=2,
    )


def b16_paper() -> PretrainConfig:
    """ViT-B/16 as in Appendix B.1.2 (the paper used JFT-300M)."""
    return PretrainConfig(
        name="masked_b16",
        dataset="imagenet2012",
        fewshot_train_split="train",
        fewshot_test_split="validation",
    )


CONFIGS = {"digits": digits, "b16_paper": b16_paper}


def override(config: PretrainConfig, assignments: list[str]) -> PretrainConfig:
    """Applies `key=value` overrides (Python literals or bare words), type-checked."""
    hints = typing.get_type_hints(PretrainConfig)
    changes = {}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or key not in hints:
            raise ValueError(
                f"Expected key=value with a key among {sorted(hints)}. "
                f"Received: {assignment!r}"
            )
        try:
            value = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            value = text.strip()
        changes[key] = check_type(key, value, hints[key])
    return dataclasses.replace(config, **changes)


def run(config: PretrainConfig, callbacks: tuple = ()) -> dict:
    """Pre-trains as `config` says; returns history, few-shot results and paths."""
    started = time.time()
    # == Strategy, seeds, precision ==========================================
    strategy = training.select_strategy(config.strategy)
    chief = training.is_chief(strategy)
    task = training.task_name(strategy)
    workdir = config.resolved_workdir()
    say = printer("pretrain_masked", config.verbose and chief)
    keras.utils.set_random_seed(config.seed)
    policy = training.set_precision(config.mixed_precision, strategy)
    say(
        f"Strategy: {training.describe(strategy)}; batch {config.global_batch_size}; "
        f"precision {policy}."
    )

    # == Data ================================================================
    source = data.load_source(
        config.dataset, config.train_split, config.data_dir, seed=config.seed
    )
    steps = config.steps_per_epoch or data.full_batches(
        source.num_examples, config.global_batch_size
    )
    start_epoch = resume_or_start(workdir, chief, task, say)
    train_ds = data.train_dataset(
        source,
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
        shuffle_buffer=config.shuffle_buffer,
    )  # (images, one-hot labels): the labels are ignored.

    # == Model and optimizer, inside the strategy's scope ====================
    total_steps = steps * config.epochs
    with strategy.scope():
        model = masked_patch_model(
            config.variant,
            image_size=config.image_size,
            pooling=config.pooling,
            dropout_rate=config.dropout_rate,
            drop_path_rate=config.drop_path_rate,
            channels=config.channels,
            corruption_rate=config.corruption_rate,
            mask_rate=config.mask_rate,
            random_rate=config.random_rate,
            color_bits=config.color_bits,
            seed=config.seed,
        )
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
            beta_1=config.beta_1,
            beta_2=config.beta_2,
            global_clipnorm=config.global_clipnorm,
        )
        model.compile(optimizer=optimizer, jit_compile=config.jit_compile)
    training.prepare_multi_worker_fit(model, strategy, train_ds)
    say(
        f"Model: {model.name}, {model.count_params():,} parameters, "
        f"{config.image_size}px; {source.name}, {steps} steps/epoch, "
        f"{total_steps} steps."
    )

    # == Callbacks ===========================================================
    fewshot = _fewshot_callback(config, say) if config.fewshot_every else None
    monitor = None
    if (
        chief
        and config.monitor_images
        and not isinstance(strategy, tf.distribute.TPUStrategy)
    ):
        images = next(iter(train_ds.take(1)))[0][: config.monitor_images]
        monitor = training.TrainingMonitor(
            os.path.join(workdir, "tensorboard"),
            example_images=images,
            attention_images=images,
            max_images=config.monitor_images,
        )
    callback_list = training.training_callbacks(
        workdir,
        chief=chief,
        task=task,
        monitor="loss",
        update_freq=config.tensorboard_update_freq,
        training_monitor=monitor,
        metric_callbacks=[fewshot] if fewshot else [],
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
        callbacks=[*callback_list, *callbacks],
        verbose=config.verbose,
        shuffle=False,  # train_dataset shuffles, per epoch and seeded.
    )

    # == Save the model and its encoder ======================================
    encoder = keras_vit.ViT(
        config.variant,
        image_size=config.image_size,
        include_top=False,
        pooling=config.pooling,
        channels=config.channels,
        name=f"{model.name}_encoder",
    )
    transfer_encoder(model, encoder)
    final = {k: v[-1] for k, v in history.history.items() if v}
    seconds = time.time() - started
    if chief:
        model.save(os.path.join(workdir, "final.keras"))
        encoder.save(os.path.join(workdir, "encoder.keras"))
        summary = {
            "final": final,
            "epochs": config.epochs,
            "seconds": round(seconds, 1),
            "strategy": training.describe(strategy),
            "precision": policy,
        }
        with open(os.path.join(workdir, "results.json"), "w") as f:
            json.dump(summary, f, indent=2)
        say("Final: " + ", ".join(f"{k} {v:.4f}" for k, v in final.items()))
        say(
            f"Done in {seconds:.0f} s; encoder for fine-tuning: "
            f"{os.path.join(workdir, 'encoder.keras')}."
        )
    return {
        "history": history.history,
        "final": final,
        "workdir": workdir,
        "model": model,
        "encoder": encoder,
        "seconds": seconds,
    }


def _fewshot_callback(config: PretrainConfig, say) -> FewShotCallback:
    """Few-shot pools materialised once (drawn train images, a test slice)."""
    train, test, _ = few_shot_pools(
        config.fewshot_dataset or config.dataset,
        train_split=config.fewshot_train_split,
        test_split=config.fewshot_test_split,
        image_size=config.image_size,
        channels=config.channels,
        shots=config.fewshot_shots,
        seed=config.seed,
        data_dir=config.data_dir,
        max_test_examples=config.fewshot_test_examples,
    )
    pools = []
    for dataset in (train, test):
        batches = [(x.numpy(), np.argmax(y.numpy(), axis=-1)) for x, y in dataset]
        pools.append(tuple(np.concatenate(part) for part in zip(*batches, strict=True)))
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


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.pretrain_masked",
        description="Masked patch prediction pre-training "
        "(see docs/self_supervision.md).",
    )
    parser.add_argument(
        "--config",
        default="digits",
        help=f"One of {sorted(CONFIGS)}. Defaults to digits.",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a field, e.g. --set epochs=3. Repeatable.",
    )
    parser.add_argument(
        "--strategy",
        default=None,
        help="Force a strategy: " + ", ".join(training.STRATEGIES) + ".",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result."""
    args = parse_args(argv)
    assignments = list(args.set)
    if args.strategy:
        assignments.append(f"strategy={args.strategy}")
    if args.config not in CONFIGS:
        sys.exit(f"error: unknown config {args.config!r}; known: {sorted(CONFIGS)}.")
    try:
        config = override(CONFIGS[args.config](), assignments)
    except ValueError as error:
        sys.exit(f"error: {error}")
    return run(config)


if __name__ == "__main__":
    main()
