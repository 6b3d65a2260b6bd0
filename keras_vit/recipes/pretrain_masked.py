r"""Masked patch prediction pre-training (paper §4.6, Appendix B.1.2).

Half of the patch embeddings of each image are corrupted (80% [mask], 10%
another patch of the image, 10% kept) and the model predicts the 3-bit mean
colour (512 classes) of each corrupted patch (`keras_vit.models.masked_patch`). The
optimizer is the paper's: Adam β = (0.9, 0.999), linear warm-up, cosine
decay, gradient clipping at global norm 1. Few-shot linear accuracy is
logged each epoch, as the paper used it to compare self-supervised settings.

```bash
python -m recipes.pretrain_masked --config masked_digits     # CPU, minutes
python -m recipes.pretrain_masked --config masked_b16_paper --set data_dir=...
# then fine-tune the encoder with recipe 2:
python -m recipes.train --config digits \
    --set init_from=runs/masked_digits/encoder.keras
```

The configs live in `recipes/configs/` (`masked_digits`, `masked_b16_paper`;
`digits` and `b16_paper` name them too) and speak the trainer's config
language (`recipes.configs.base.PretrainConfig`, `--set key=value`, `--fresh`,
`--allow-changes`) and its exit statuses. The run directory (`runs/<name>`
unless `--set workdir=...`) holds, like `recipes.train`'s: `tensorboard/`,
`metrics.csv`, `checkpoints/{best,last}.keras`, `backup/` (an interrupted
run started again with the same command resumes, or finishes without
training again if it was stopped after its last epoch), `config.json`,
`results.json`, and

- `final.keras`: the whole pre-training model (`MaskedPatchModel`);
- `encoder.keras`: the encoder alone as a `keras_vit.ViT(include_top=False)`,
  the file to fine-tune from (`init_from=`), or to evaluate with
  `python -m recipes.fewshot --model .../encoder.keras`.
"""

from __future__ import annotations

import sys

from keras_vit.recipes import cli
from keras_vit.recipes.configs.base import PretrainConfig
from keras_vit.recipes.configs.base import shipped_configs
from keras_vit.recipes.recipe import Monitors
from keras_vit.recipes.recipe import Recipe
from keras_vit.recipes.recipe import Sources

# The names the configs had before they moved to recipes/configs/.
ALIASES = {"digits": "masked_digits", "b16_paper": "masked_b16_paper"}


def run(
    config: PretrainConfig,
    callbacks: tuple = (),
    *,
    fresh: bool = False,
    allow_changes: bool = False,
) -> dict:
    """Pre-trains as `config` says; returns history, final metrics and paths.

    `final` holds the last epoch's logs (from the backup when the run was
    stopped after training and finished by a rerun); `encoder` is the
    pre-trained encoder, a `keras_vit.ViT(include_top=False)`.

    Raises:
        ConfigError: A config value that cannot be used, or the backup
            belongs to another config.
        RunFinished: The run directory holds this config's finished run.
        WorkdirBusy: Another live run uses the run directory.
        RunDiverged: The loss became non-finite (`results.json` says where).
        keras_vit.atomic.DiskFull: The disk filled up; the same call resumes.

    Example:

    ```python
    result = run(load_config("masked_digits", PretrainConfig))
    result["encoder"]  # fine-tune it: init_from=<workdir>/encoder.keras
    ```
    """
    from keras_vit.recipes import engine

    return engine.run(
        RECIPE, config, callbacks, fresh=fresh, allow_changes=allow_changes
    )


def _data(config: PretrainConfig, run_) -> Sources:
    """The training split; pre-training must not see the images few-shot
    accuracy is measured on."""
    from keras_vit import data
    from keras_vit.recipes.streams import training_source

    source = training_source(config)
    if config.fewshot_every and config.fewshot_dataset in (None, config.dataset):
        test = data.load_source(
            config.dataset, config.fewshot_test_split, config.data_dir
        )
        data.check_disjoint(source, test)
    return Sources(source)


def _model(config: PretrainConfig, run_, sources: Sources):
    """The masked-patch model (`keras_vit.models.masked_patch`)."""
    from keras_vit.models.masked_patch import masked_patch_model
    from keras_vit.recipes.configs.base import model_arguments

    return masked_patch_model(
        config.variant,
        **model_arguments(config),
        corruption_rate=config.corruption_rate,
        mask_rate=config.mask_rate,
        random_rate=config.random_rate,
        color_bits=config.color_bits,
        seed=config.seed,
    )


def _monitors(config: PretrainConfig, run_, sources: Sources, streams) -> Monitors:
    """The few-shot linear evaluation, and the TensorBoard monitor (chief)."""
    import os

    from keras_vit import training
    from keras_vit.recipes.streams import fewshot_callback
    from keras_vit.recipes.streams import first_batch

    fewshot = None
    if config.fewshot_every:
        fewshot = fewshot_callback(
            config,
            dataset=config.fewshot_dataset or config.dataset,
            train_split=config.fewshot_train_split,
            test_split=config.fewshot_test_split,
            max_test_examples=config.fewshot_test_examples,
            say=run_.say,
        )
    monitor = None
    if run_.chief and config.monitor_images and not run_.on_tpu:
        # The first epoch's first batch: the same images after a resume.
        batch = first_batch(config, sources.train, streams.steps)
        images = None if batch is None else batch[0][: config.monitor_images]
        monitor = training.TrainingMonitor(
            os.path.join(run_.workdir, "tensorboard"),
            example_images=images,
            attention_images=images,
            max_images=config.monitor_images,
        )
    return Monitors(monitor, fewshot)


def _finish(config: PretrainConfig, run_, model, sources, streams, trained) -> dict:
    """`final.keras`, `encoder.keras`, then `results.json` (chief).

    `results.json` is written last and the backup discarded after it, so a
    kill at any instant of this phase is finished by the same command.
    """
    import os

    import keras_vit
    from keras_vit import atomic
    from keras_vit.models.masked_patch import transfer_encoder
    from keras_vit.recipes import rundir

    final = dict(trained.logs)
    # The encoder exactly as pre-trained: its options read off the model.
    encoder = keras_vit.ViT(
        config.variant,
        image_size=config.image_size,
        include_top=False,
        channels=config.channels,
        options=keras_vit.ViTLayout.of(model).encoder_options,
        name=f"{model.name}_encoder",
    )
    transfer_encoder(model, encoder)
    if run_.chief:
        atomic.save_model(model, os.path.join(run_.workdir, "final.keras"))
        atomic.save_model(encoder, os.path.join(run_.workdir, "encoder.keras"))
    rundir.finished(run_, trained, sources.train, final=final)
    if run_.chief:
        run_.say(
            "Final: "
            + ", ".join(f"{k} {v:.4f}" for k, v in final.items() if v is not None)
        )
        run_.say(
            f"Done in {run_.seconds:.0f} s; encoder for fine-tuning: "
            f"{os.path.join(run_.workdir, 'encoder.keras')}."
        )
    return {"final": final, "encoder": encoder}


# Masked patch prediction, for `keras_vit.recipes.engine.run`.
RECIPE = Recipe(
    name="pretrain_masked",
    finishing=lambda config: "final.keras, encoder.keras, results.json",
    data=_data,
    model=_model,
    monitors=_monitors,
    finish=_finish,
)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("pretrain_masked"),
        description="Masked patch prediction pre-training "
        "(see docs/self_supervision.md).",
    )
    cli.add_run_arguments(
        parser, shipped_configs(PretrainConfig), "masked_digits", kind=PretrainConfig
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result.

    Exits as `keras_vit.recipes.cli.run_command` says: 2 on an argument or config error
    or a run directory in use, 1 when the run failed (diverged, a full
    disk), 3 when it had already finished, 130/143 on Ctrl-C/SIGTERM; every
    failure is one line.
    """
    return cli.run_command(run, PretrainConfig, build_parser(), argv, ALIASES)


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
