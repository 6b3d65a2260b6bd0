r"""Park & Kim's comparison: a ViT, ResNets and AlterNet under the paper's analyses.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) argues from a
handful of analyses: the Hessian spectrum of the training loss (MSAs
flatten it), the Fourier amplitude of feature maps by depth (MSAs are
low-pass filters, convolutions high-pass), feature-map variance, robustness
to frequency-band noise, the loss landscape; and it builds AlterNet on them.
This command trains each network with one recipe over several seeds (or
loads its shipped demo checkpoint, below), runs every analysis with the
authors' protocol (`keras_vit.parkkim.panel`) and gives a verdict on each
claim (`keras_vit.parkkim.claims`).

```bash
keras-vit compare                          # glyphs: a ViT x 3 seeds, 3 CNNs x 2
keras-vit compare --retrain                # the same, every run trained here
keras-vit compare --config compare_quick   # a smoke test, minutes
keras-vit compare --config compare_authors --set data_dir=~/tfds
keras-vit compare --set seeds=5 --set "models=('vit', 'resnet')"
keras-vit compare --set analysis.hessian_top_k=3 \\
    --set analysis.landscape_points=0
```

The default (`keras_vit/parkkim/configs/compare.py`) compares, on `glyphs`
(the offline dataset with real high frequencies, at 32 px), a ViT with 4x4
patches and QK-norm, the authors' post-activation ResNet, a pre-activation
ResNet and AlterNet of the `mini` row, each claim in its own regime (the
CNNs' claims on CNNs trained to convergence, a ViT against a CNN at
matched training loss). Its nine training runs take longer than its
analyses on a CPU, so they are shipped
as demo checkpoints (`keras_vit.parkkim.demo`, made by `python -m
keras_vit.parkkim.make_demo`): a run whose recipe is a shipped run's loads
it (sha256 checked) instead of training; another recipe, model or seed
trains, and `--retrain` (`checkpoints="train"`) trains every run.
`compare_authors` analyses the authors' own trained CIFAR-100 models (their
published files, `keras_vit.parkkim.authors`) on CIFAR-100 from TFDS,
without training.

The run directory (`runs/compare` unless `--set workdir=...`) holds:

- `runs/<model>_seed<s>/`: each training run (none where a demo
  checkpoint stands in), a `recipes.train` run directory (resumable,
  crash-safe, refused when finished);
- `panels/<model>_seed<s>.json`: each trained model's analyses, kept and
  reused while the run, the recipe and the analysis settings (`analysis`,
  a `keras_vit.parkkim.panel.PanelSettings`) are unchanged (`panel_key`);
  `panels/<model>_seed<s>.landscape.csv` the rows of a loss landscape
  being computed (deleted once the panel is written);
- `claims.md`, `table.md`, `results.json`: the verdict on each claim, the
  numbers per model, everything;
- `fourier.png`, `variance.png`, `hessian.png`, `hessian_clean.png` (with
  `analysis.clean_hessian`), `noise.png`, `distance.png`,
  `landscape_<model>.png` (and its `.csv`, the authors' columns): the
  figures;
- `tensorboard/comparison`: the tables and figures.

Before the long work the command prints its plan: for each model still to
analyse, one forward pass and one Hessian-vector product are timed on the
model itself and multiplied out by the budget (`analysis.landscape_points`,
`analysis.hessian_batches`, ...; `keras_vit.parkkim.plan`), with the
settings that change it. Then one line per stage of each model and seed
(training, Fourier/variance, Hessian, noise, distances, landscape) with its
seconds.

Run the same command again after an interruption: finished runs and panels
are reused, an interrupted training run resumes, and so does an interrupted
loss landscape (from its last finished grid point). A bad setting exits
with status 2 and one line; a run that diverged, with 1.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time

from keras_vit import paths
from keras_vit.models.options import EncoderOptions
from keras_vit.parkkim import report
from keras_vit.parkkim.config import AUTHORS_MODELS
from keras_vit.parkkim.config import ROLES
from keras_vit.parkkim.config import TITLES
from keras_vit.parkkim.config import CompareConfig
from keras_vit.recipes import cli
from keras_vit.recipes.configs.base import TrainConfig
from keras_vit.recipes.configs.base import register_config_package
from keras_vit.recipes.configs.base import shipped_configs

# The command's own configs (`--config compare_quick`), listed by `--help`
# before the rest of the wing (`plugin`, which imports TensorFlow) loads.
register_config_package("keras_vit.parkkim.configs")


def run(
    config: CompareConfig, *, fresh: bool = False, allow_changes: bool = False
) -> dict:
    """Trains (or loads) every model, analyses each, writes the comparison.

    Args:
        config: A `CompareConfig`.
        fresh: Set every earlier training run aside and train again.
        allow_changes: Resume training runs whose backups were made with
            another config.

    Returns:
        The contents of `results.json`: `"claims"`, `"rows"`, `"panels"`,
        `"settings"`, `"seconds"`.

    Raises:
        ConfigError: A setting that cannot be used (one line), e.g. two
            models in one role of the claims (`check_roles`).
        recipes.rundir.RunDiverged: A training run diverged.
    """
    check_roles(config)  # Before anything is locked, loaded or trained.
    import keras
    import tensorflow as tf

    from keras_vit.parkkim import plugin  # noqa: F401  the CNNs, glyphs, .pth
    from keras_vit.recipes.workdir_lock import WorkdirLock

    # Twenty models, each traced a few times: TensorFlow's retracing
    # warnings say nothing here.
    tf.get_logger().setLevel("ERROR")
    started = time.time()
    out = config.resolved_workdir()
    # A dataset that cannot be read: one line, exit 2, the workdir untouched.
    data = _data(config)
    lock = WorkdirLock.acquire(out)  # A second live comparison: refused.
    try:
        _plan(config, data, out, fresh)
        panels = {}
        for name in config.models:
            for seed in range(config.seeds_of(name)):
                panels.setdefault(name, []).append(
                    _run_one(config, name, seed, data, out, fresh, allow_changes)
                )
                keras.utils.clear_session()  # Twenty models in one process.
        seconds = time.time() - started
        summary = report.write(config, panels, out, seconds, len(data["images"]))
        _progress(
            f"claims, tables and figures written to {out}",
            time.time() - started - seconds,
        )
        return summary
    finally:
        lock.release()


def check_roles(config: CompareConfig) -> None:
    """Refuses two models that would play one role in the claims.

    The claims compare a ViT with a ResNet (`keras_vit.parkkim.claims`);
    `"vit"` and `"authors_vit_ti"` (or `"resnet"` and `"authors_resnet_50"`)
    together would make two ViTs (ResNets), of which the verdicts could use
    only one. Compare them in two runs instead.

    Raises:
        ConfigError: One line naming the models that share a role.
    """
    from keras_vit.recipes.configs.base import ConfigError

    by_role = {}
    for name in config.models:
        by_role.setdefault(ROLES.get(name, name), []).append(name)
    shared = [names for names in by_role.values() if len(names) > 1]
    if shared:
        clash = "; ".join(
            f"{' and '.join(map(repr, names))} would both be the claims' "
            f"{TITLES[ROLES[names[0]]]}"
            for names in shared
        )
        raise ConfigError(
            f"models={tuple(config.models)!r}: {clash}; compare them in "
            "separate runs (another workdir), one of them in each"
        )


def _run_one(config, name, seed, data, out, fresh, allow_changes) -> dict:
    """One model's panel: kept from an earlier call, or trained and analysed."""
    path = _panel_path(out, name, seed)
    panel = None if fresh else _cached(path, panel_key(config, name, seed, out))
    if panel is not None:
        _progress(f"{TITLES[name]} seed {seed}: panel kept ({path})")
        return panel
    started = time.perf_counter()
    model, trained, stage = _model(config, name, seed, data, out, fresh, allow_changes)
    _progress(f"{TITLES[name]} seed {seed}: {stage}", time.perf_counter() - started)
    # Keyed on the run as it is now (trained, or found finished).
    key = panel_key(config, name, seed, out)
    panel = _panel(config, name, seed, model, trained, data, out, key)
    _write_json(path, {"key": key, "panel": panel})
    for partial in _landscape_partials(out, name, seed):
        if paths.exists(partial):
            paths.remove(partial)
    return panel


# -- data ----------------------------------------------------------------------
def _data(config: CompareConfig) -> dict:
    """The test images of the analyses and the training source.

    `"images"`, `"labels"`: the first test images, as many as the analyses
    use (`analysis.images`, and `analysis.noise_images`: the whole test
    split for `None`), in the test split's order, the same for every model.

    Raises:
        ConfigError: The dataset cannot be read (e.g. CIFAR-100 not
            prepared, offline), in one line that says what to do.
    """
    import numpy as np

    from keras_vit import data as kdata
    from keras_vit.recipes.configs.base import ConfigError

    try:
        train = kdata.load_source(
            config.dataset, config.train_split, config.data_dir, seed=config.seed
        )
        test = kdata.load_source(
            config.dataset,
            config.test_split or "test",
            config.data_dir,
            seed=config.seed,
        )
    except kdata.DatasetError as error:
        raise ConfigError(str(error)) from error
    kdata.check_disjoint(train, test)
    settings = config.analysis
    noise = settings.noise_images or test.num_examples
    wanted = max(settings.images, noise)
    images, labels = [], []
    batches = kdata.eval_dataset(
        test,
        image_size=config.image_size,
        global_batch_size=256,
        channels=config.channels,
    )
    for x, y in batches:
        images.append(np.asarray(x))
        labels.append(np.asarray(y).argmax(-1))
        if sum(len(i) for i in images) >= wanted:
            break
    images = np.concatenate(images)[:wanted]  # (N, H, W, C)
    labels = np.concatenate(labels)[:wanted]  # (N,)
    return {"train": train, "test": test, "images": images, "labels": labels}


def _to_model_range(name: str):
    """`images -> images` in the model's input range (the authors' models
    take CIFAR-normalised images, keras_vit's `[-1, 1]`)."""
    if name not in AUTHORS_MODELS:
        return lambda images: images
    import numpy as np

    from keras_vit.parkkim import authors

    mean = np.asarray(authors.CIFAR100_MEAN, "float32")
    std = np.asarray(authors.CIFAR100_STD, "float32")
    return lambda images: ((images + 1.0) / 2.0 - mean) / std


def _augmented(config: CompareConfig, source, seed: int, name: str):
    """One epoch of the training stream, augmented as the training was: the
    same batches at every reading (the Hessian's, the landscape's)."""
    from keras_vit import data as kdata

    size = config.analysis.hessian_batch_size
    convert = _to_model_range(name)

    def stream():
        # Built anew for each reading: MixUp/CutMix draw from a generator
        # whose state a dataset keeps (and its prefetching advances).
        return kdata.train_dataset(
            source,
            image_size=config.image_size,
            global_batch_size=size,
            epochs=1,
            steps_per_epoch=kdata.full_batches(source.num_examples, size),
            seed=seed + 10_000,
            channels=config.channels,
            augmentation=kdata.Augmentation(
                crop_area_range=config.crop_area_range,
                crop_aspect_range=config.crop_aspect_range,
                flip=config.random_flip,
                randaugment_ops=config.randaugment_ops,
                randaugment_magnitude=config.randaugment_magnitude,
                mixup_alpha=config.mixup_alpha,
                cutmix_factor=config.cutmix_factor,
            ),
        ).map(lambda x, y: (convert(x), y))

    return _Readings(stream)


class _Readings:
    """A re-iterable whose every reading is `make()`'s, anew."""

    def __init__(self, make):
        self.make = make

    def __iter__(self):
        return iter(self.make())


def _clean(config: CompareConfig, source, name: str):
    """Clean training batches with hard labels (the second Hessian column)."""
    from keras_vit import data as kdata

    convert = _to_model_range(name)
    batches = kdata.eval_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.analysis.hessian_batch_size,
        channels=config.channels,
    )
    return batches.map(lambda x, y: (convert(x), y))


# -- the plan ------------------------------------------------------------------
def _plan(config: CompareConfig, data: dict, out: str, fresh: bool) -> None:
    """Prints what the analyses still to run will take (`keras_vit.parkkim.plan`),
    timed on each model (built afresh: the weights do not change the time)."""
    import keras

    from keras_vit import data as kdata
    from keras_vit.parkkim import plan

    settings = config.analysis
    rows, training = [], False
    for name in config.models:
        todo = _seeds_to_analyse(config, name, out, fresh)
        if not todo:
            continue
        training |= name not in AUTHORS_MODELS and any(
            shipped_run(config, name, s, out) is None
            and not paths.exists(
                os.path.join(out, "runs", f"{name}_seed{s}", "final.keras")
            )
            for s in todo
        )
        started = time.perf_counter()
        model = _architecture(config, name, data["train"].num_classes, out)
        batch = next(iter(_augmented(config, data["train"], 0, name)))
        timings = plan.measure(
            model,
            batch,
            loss=keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=config.label_smoothing
            ),
            weight_decay=config.weight_decay,
            l2=settings.hessian_l2,
        )
        keras.utils.clear_session()
        cost = plan.estimate(
            panel_settings(config, name),
            timings,
            hessian_batches_available=kdata.full_batches(
                data["train"].num_examples, settings.hessian_batch_size
            ),
            landscape=settings.landscape_points > 0,
            test_images=data["test"].num_examples if name in AUTHORS_MODELS else 0,
            noise_images=len(data["images"]),
        )
        drawn = sum(seed < settings.landscape_seeds for seed in todo)
        rows.append((TITLES[name], len(todo), timings, cost, drawn))
        _progress(f"{TITLES[name]}: timed", time.perf_counter() - started)
    if rows:
        defaults = CompareConfig().analysis
        for line in plan.describe(rows, settings, defaults, training):
            _progress(line)


def _seeds_to_analyse(config: CompareConfig, name: str, out: str, fresh: bool):
    """The seeds of model `name` without a kept panel."""
    seeds = range(config.seeds_of(name))
    return [
        seed
        for seed in seeds
        if fresh
        or _cached(_panel_path(out, name, seed), panel_key(config, name, seed, out))
        is None
    ]


def _architecture(config: CompareConfig, name: str, num_classes: int, out: str):
    """Model `name` as built before training (or loading its weights)."""
    if name in AUTHORS_MODELS:
        from keras_vit.parkkim import authors

        return authors.authors_model(name.removeprefix("authors_"))
    return build_run_model(train_config(config, name, 0, out), num_classes)


def build_run_model(run_config: TrainConfig, num_classes: int):
    """The model a training run of `run_config` starts from, built afresh
    (its initial weights; no `init_from`)."""
    from keras_vit.recipes import train

    built = dataclasses.replace(run_config, init_from=None)
    return train.build_model(built, num_classes, say=lambda *_: None)


# -- models --------------------------------------------------------------------
def train_config(config: CompareConfig, name: str, seed: int, out: str):
    """The `TrainConfig` of one model's run: the comparison's recipe."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(TrainConfig)}
    fields.update(
        name=f"{name}_seed{seed}",
        workdir=os.path.join(out, "runs", f"{name}_seed{seed}"),
        seed=seed,
        architecture=name,
        variant=config.variant if name == "vit" else config.cnn_variant,
    )
    if name != "vit":  # A CNN takes no ViT option but its drop-path rate.
        fields["encoder"] = EncoderOptions(drop_path_rate=config.encoder.drop_path_rate)
        if config.cnn_epochs is not None:
            fields["epochs"] = config.cnn_epochs
        if config.cnn_learning_rate is not None:
            fields["learning_rate"] = config.cnn_learning_rate
    return TrainConfig(**fields)


def shipped_run(config: CompareConfig, name: str, seed: int, out: str):
    """The demo checkpoint (`keras_vit.parkkim.demo.DemoRun`) that stands in
    for this run's training, or `None` (`checkpoints="train"`, an authors'
    model, or no shipped run of this recipe)."""
    if config.checkpoints != "demo" or name in AUTHORS_MODELS:
        return None
    from keras_vit.parkkim import demo

    return demo.find(train_config(config, name, seed, out))


def _model(config, name, seed, data, out, fresh, allow_changes):
    """`(model, results of its training run or None, what was done)`."""
    import keras

    if name in AUTHORS_MODELS:
        from keras_vit.parkkim import authors

        kind = name.removeprefix("authors_")
        weights = getattr(config, name)
        model = authors.authors_model(kind, weights=weights)
        return model, None, "authors' weights loaded"
    from keras_vit.parkkim import demo
    from keras_vit.recipes import train
    from keras_vit.recipes.rundir import RunFinished

    run_config = train_config(config, name, seed, out)
    shipped = shipped_run(config, name, seed, out)
    if shipped is not None:
        model = build_run_model(run_config, data["train"].num_classes)
        demo.load(model, shipped)
        results = shipped.results
        trained = {
            "test": {
                "accuracy": results["test_accuracy"],
                "loss": results["test_loss"],
            },
            "seconds": results["train_seconds"],
        }
        return model, trained, f"demo checkpoint loaded ({shipped.file})"
    if config.checkpoints == "demo":
        differing = demo.differences(run_config)
        _progress(
            f"{TITLES[name]} seed {seed}: no demo checkpoint of this recipe"
            + (f" (it differs in {', '.join(differing)})" if differing else "")
            + "; training it"
        )
    workdir = run_config.workdir
    try:
        result = train.run(run_config, fresh=fresh, allow_changes=allow_changes)
        model, stage = result["model"], "trained"
    except RunFinished:
        model = keras.saving.load_model(os.path.join(workdir, "final.keras"))
        stage = "finished training run loaded"
    with paths.open_file(os.path.join(workdir, "results.json")) as f:
        return model, json.load(f), stage


def _panel(config, name, seed, model, trained, data, out, key) -> dict:
    import keras

    from keras_vit.parkkim.panel import model_panel

    convert = _to_model_range(name)
    settings = panel_settings(config, name)
    landscape = seed < settings.landscape_seeds and settings.landscape_points > 0
    started = time.process_time()
    panel = model_panel(
        model,
        convert(data["images"]),
        data["labels"],
        _augmented(config, data["train"], seed, name),
        _clean(config, data["train"], name) if settings.clean_hessian else None,
        loss=keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=config.label_smoothing
        ),
        weight_decay=config.weight_decay,
        settings=settings,
        landscape=landscape,
        seed=seed,
        progress=lambda stage, seconds: _progress(
            f"{TITLES[name]} seed {seed}: {stage}", seconds
        ),
        landscape_rows=_landscape_rows(out, name, seed, key) if landscape else None,
    )
    panel["model"], panel["seed"] = name, seed
    panel["parameters"] = int(model.count_params())
    panel["analysis_cpu_seconds"] = time.process_time() - started
    panel["training"] = _history(config, name, seed, out, data["train"].num_examples)
    if trained is not None:
        panel["test_accuracy"] = (trained.get("test") or {}).get("accuracy")
        panel["train_seconds"] = trained.get("seconds")
    else:
        started = time.perf_counter()
        panel["test_accuracy"], _ = test_metrics(model, data["test"], config, name)
        panel["train_seconds"] = None
        _progress(
            f"{TITLES[name]} seed {seed}: test accuracy", time.perf_counter() - started
        )
    if panel["landscape"] is not None:
        from keras_vit.analysis import landscape as landscapes

        stem = os.path.join(out, f"landscape_{name}_seed{seed}")
        landscapes.write_landscape_csv(panel["landscape"], f"{stem}.csv")
    return report.to_json(panel)


def _history(config, name, seed, out, examples: int) -> dict:
    """How the model was trained, for the claims' convergence rule:
    `{"epoch_losses", "warmup_steps", "steps"}` from its run's `metrics.csv`
    (or the demo checkpoint's manifest), `{"published": True}` for the
    authors' models, `{}` where the run kept no history. `examples`: the
    training split's images."""
    if name in AUTHORS_MODELS:
        return {"published": True}
    from keras_vit import data as kdata

    run_config = train_config(config, name, seed, out)
    shipped = shipped_run(config, name, seed, out)
    if shipped is not None:
        losses = shipped.results.get("epoch_losses")
    else:
        losses = epoch_losses(run_config.workdir)
    if not losses:
        return {}
    per_epoch = run_config.steps_per_epoch or kdata.full_batches(
        examples, run_config.global_batch_size
    )
    steps = int(per_epoch * run_config.epochs)
    return {
        "epoch_losses": [float(v) for v in losses],
        "warmup_steps": min(int(run_config.warmup_steps), steps),
        "steps": steps,
    }


def epoch_losses(workdir: str) -> list[float]:
    """The training loss of each epoch of a run (its `metrics.csv`), or `[]`."""
    import csv

    path = os.path.join(workdir, "metrics.csv")
    if not paths.exists(path):
        return []
    with paths.open_file(path) as f:
        return [float(row["loss"]) for row in csv.DictReader(f)]


def test_metrics(model, source, config, name) -> tuple[float, float]:
    """`(accuracy, loss)` of model `name` on the whole test split `source`;
    the loss is the training's (cross-entropy with `label_smoothing`)."""
    import keras
    import numpy as np

    from keras_vit import data as kdata

    convert = _to_model_range(name)
    loss = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=config.label_smoothing, reduction="sum"
    )
    correct = total = 0
    summed = 0.0
    for x, y in kdata.eval_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=256,
        channels=config.channels,
    ):
        logits = model.predict(convert(np.asarray(x)), verbose=0)  # (B, classes)
        targets = np.asarray(y)  # (B, classes), one-hot
        correct += int((logits.argmax(-1) == targets.argmax(-1)).sum())
        summed += float(loss(targets, logits))
        total += len(logits)
    return correct / total, summed / total


def panel_settings(config: CompareConfig, name: str):
    """`config.analysis` as model `name` is measured with: a `noise_epsilon`
    of `None` becomes the authors' 0.7 for their models (on their normalised
    inputs), 0.31 for the others (the same strength in `[-1, 1]` units)."""
    settings = config.analysis
    if settings.noise_epsilon is None:
        epsilon = 0.7 if name in AUTHORS_MODELS else 0.31
        settings = dataclasses.replace(settings, noise_epsilon=epsilon)
    return settings


# -- what is reused ------------------------------------------------------------
def panel_key(config: CompareConfig, name: str, seed: int, out: str) -> dict:
    """What a kept panel must match to be reused, as JSON.

    `"analysis"`: the settings it is measured with (`panel_settings`, whole,
    but for `landscape_seeds`, of which `"landscape"` keeps whether this
    seed draws one). `"training"`: the `TrainConfig` of the model's run
    (`train_config`) without its run-only fields, and the seed of the data
    order (the analyses' test images); for the authors' models, which no run
    trains, the comparison's recipe (the augmentation and loss their
    analyses use) and their weights. `"run"`: a digest of the training run's
    `results.json` (a retrained model is measured again), or the sha256 of
    the demo checkpoint analysed instead (`shipped_run`). Anything else
    changed, or a panel of an older key, is measured again.
    """
    from keras_vit.recipes.configs.base import RUN_ONLY_FIELDS

    analysis = dataclasses.asdict(panel_settings(config, name))
    landscape = seed < analysis.pop("landscape_seeds")
    if name in AUTHORS_MODELS:
        fields = dataclasses.fields(TrainConfig)
        recipe = TrainConfig(**{f.name: getattr(config, f.name) for f in fields})
        training = dataclasses.asdict(recipe)
        training["weights"] = getattr(config, name)
    else:
        training = dataclasses.asdict(train_config(config, name, seed, out))
        training["data_seed"] = config.seed
    trained = os.path.join(out, "runs", f"{name}_seed{seed}", "results.json")
    digest = None
    shipped = shipped_run(config, name, seed, out)
    if shipped is not None:  # Its weights, not a run here, were analysed.
        digest = f"demo checkpoint {shipped.sha256}"
    elif paths.exists(trained):
        with paths.open_file(trained, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    return report.to_json(
        {
            "analysis": analysis,
            "landscape": landscape,
            "training": {k: v for k, v in training.items() if k not in RUN_ONLY_FIELDS},
            "run": digest,
        }
    )


def _cached(path: str, key: dict):
    """The panel kept in `path` if its key is `key`, else `None`."""
    try:
        with paths.open_file(path) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or not isinstance(stored.get("panel"), dict):
        return None
    return stored["panel"] if stored.get("key") == key else None


def _panel_path(out: str, name: str, seed: int) -> str:
    return os.path.join(out, "panels", f"{name}_seed{seed}.json")


def _landscape_partials(out: str, name: str, seed: int) -> tuple[str, str]:
    """The rows of a landscape being computed and the panel key they are of."""
    stem = os.path.join(out, "panels", f"{name}_seed{seed}.landscape")
    return f"{stem}.csv", f"{stem}.key.json"


def _landscape_rows(out: str, name: str, seed: int, key: dict) -> str:
    """The landscape's rows file (`loss_landscape`'s `rows_path`), emptied
    unless it holds rows measured under `key`."""
    from keras_vit import atomic

    rows, keyed = _landscape_partials(out, name, seed)
    if atomic.read_json_object(keyed).get("key") != key:
        if paths.exists(rows):
            paths.remove(rows)
        _write_json(keyed, {"key": key})
    elif paths.exists(rows):
        _progress(f"{TITLES[name]} seed {seed}: landscape resumes from {rows}")
    return rows


# -- small helpers -------------------------------------------------------------
def _progress(message: str, seconds: float | None = None) -> None:
    """One line of progress, always: `[compare] ViT seed 0: Hessian 3.2 s`."""
    timing = "" if seconds is None else f" {seconds:.1f} s"
    print(f"[compare] {message}{timing}", flush=True)  # noqa: T201


def _write_json(path: str, value) -> None:
    from keras_vit import atomic

    atomic.write_json(path, report.finite(value))


# -- command line --------------------------------------------------------------
def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("compare"),
        description="Park & Kim's comparison: train a ViT, ResNets and AlterNet "
        "and test the paper's claims with the authors' protocols "
        "(see docs/parkkim.md).",
    )
    cli.add_run_arguments(
        parser, shipped_configs(CompareConfig), "compare", kind=CompareConfig
    )
    parser.add_argument(
        "--retrain",
        dest="set",
        action="append_const",
        const="checkpoints='train'",
        help="train every run, even those the shipped demo checkpoints stand "
        "in for (the same as --set checkpoints=train; see "
        "keras_vit.parkkim.demo)",
    )
    return parser


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns `run`'s result.

    Exits with status 2 on an argument or config error (one line), 1 when a
    training run diverged.
    """
    return cli.run_command(
        run, CompareConfig, build_parser(), argv, precheck=check_roles
    )


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
