"""Makes the demo checkpoints of `keras-vit compare` (`keras_vit.parkkim.demo`).

```bash
python -m keras_vit.parkkim.make_demo                   # into the package
python -m keras_vit.parkkim.make_demo --workdir runs/compare_demo --out demo/
```

It trains every run of the shipped `compare` config (four networks, three
seeds) in `<workdir>/runs/`, exactly as `keras-vit compare --retrain` would
train them (`compare.train_config`), then, for each run:

1. writes its weights in float16 to `<out>/<model>_seed<s>.npz`
   (`demo.save`);
2. loads them back into a fresh model (sha256 checked) and measures that
   rounded model on the whole test split: the accuracy and loss recorded;
3. records the file's sha256 and size, the run's recipe, each epoch's
   training loss (the claims' convergence rule reads them), its training
   time and the CPU.

A run already in `<out>` with the same recipe is kept as it is, file and
record, unless `--retrain` is given: changing one model's recipe retrains
that model only.

`manifest.json` is removed first and written last, naming only files
already written. Every
file is whole or absent; after a kill, the same command resumes the
interrupted training run and reuses the finished ones. Its cost is that of
the twelve training runs (`docs/parkkim.md`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import time

from keras_vit import atomic
from keras_vit.parkkim import compare
from keras_vit.parkkim import demo
from keras_vit.parkkim.config import CompareConfig


def make(
    workdir: str,
    out: str = demo.DIRECTORY,
    config_name: str = "compare",
    retrain: bool = False,
    only: tuple[str, ...] | None = None,
):
    """Trains (or reuses) every run of `config_name` and writes the checkpoints.

    Args:
        workdir: Where the training runs go (`<workdir>/runs/<run>/`).
        out: The checkpoints' directory.
        config_name: The shipped comparison config whose runs are made.
        retrain: Make every run again, even those already in `out` with
            the same recipe (kept otherwise).
        only: Make these runs only (`"resnet_seed1"`, ...); the others are
            kept where `out` has them, else left out of the manifest (the
            comparison trains those). `None`: every run.

    Returns:
        The manifest written, as a dict.
    """
    import keras
    import tensorflow as tf

    from keras_vit.recipes.configs.base import load_config
    from keras_vit.training.hardware import describe_cpu

    tf.get_logger().setLevel("ERROR")
    config = dataclasses.replace(
        load_config(config_name, CompareConfig), checkpoints="train", workdir=workdir
    )
    if only is not None:
        names = {
            f"{m}_seed{s}" for m in config.models for s in range(config.seeds_of(m))
        }
        unknown = sorted(set(only) - names)
        if unknown:
            raise ValueError(
                f"--runs {', '.join(unknown)}: not a run of {config_name!r} (its "
                f"runs: {', '.join(sorted(names))})"
            )
    kept = _kept(config, workdir, out)
    if retrain:  # Every run asked for is made again.
        kept = {k: v for k, v in kept.items() if only is not None and k not in only}
    header = {
        "made_by": f"python -m keras_vit.parkkim.make_demo (config {config_name!r})",
        "cpu": describe_cpu(),
        "cores": os.cpu_count(),
        "stored_dtype": demo.STORED_DTYPE,
    }
    # The manifest is rewritten first with the runs kept (their files are
    # not touched) and comes back whole last: a kill in between leaves
    # checkpoints no manifest names (the comparison then trains them), never
    # a manifest naming a file being replaced.
    stale = os.path.join(out, demo.MANIFEST)
    if kept:
        atomic.write_json(stale, {**header, "runs": kept})
    elif os.path.exists(stale):
        os.remove(stale)
    data = compare._data(config)
    runs = {}
    for name in config.models:
        for seed in range(config.seeds_of(name)):
            run_config = compare.train_config(config, name, seed, workdir)
            if run_config.name in kept:
                runs[run_config.name] = kept[run_config.name]
                print(f"[make_demo] {run_config.name}: kept", flush=True)  # noqa: T201
                continue
            if only is not None and run_config.name not in only:
                continue  # Neither asked for nor made before: left out.
            started = time.perf_counter()
            model, trained, stage = compare._model(
                config, name, seed, data, workdir, False, False
            )
            file = f"{run_config.name}.npz"
            sha256, size = demo.save(model, os.path.join(out, file))
            shipped = demo.DemoRun(
                name=run_config.name,
                file=file,
                sha256=sha256,
                bytes=size,
                recipe=demo.recipe_of(run_config),
                results={},
            )
            rounded = compare.build_run_model(run_config, data["train"].num_classes)
            demo.load(rounded, shipped, out)
            accuracy, loss = compare.test_metrics(rounded, data["test"], config, name)
            losses = compare.epoch_losses(run_config.workdir)
            results = {
                "test_accuracy": accuracy,
                "test_loss": loss,
                "float32_test_accuracy": trained["test"]["accuracy"],
                "train_loss": losses[-1],
                "epoch_losses": losses,
                "train_seconds": trained["seconds"],
                "cpu": header["cpu"],
                "epochs": run_config.epochs,
                "parameters": int(rounded.count_params()),
            }
            runs[run_config.name] = {
                **{k: v for k, v in dataclasses.asdict(shipped).items() if k != "name"},
                "results": results,
            }
            float32 = results["float32_test_accuracy"]
            print(  # noqa: T201
                f"[make_demo] {run_config.name}: {stage}; {file} written, test "
                f"accuracy {accuracy:.4f} (float32 {float32:.4f}), "
                f"{time.perf_counter() - started:.1f} s",
                flush=True,
            )
            keras.utils.clear_session()
    written = {**header, "runs": runs}
    atomic.write_json(os.path.join(out, demo.MANIFEST), written)
    return written


def _kept(config, workdir: str, out: str) -> dict:
    """`{run name: manifest entry}` of the runs already in `out` with this
    config's recipe and a whole file: those are not made again."""
    kept = {}
    for name in config.models:
        for seed in range(config.seeds_of(name)):
            run_config = compare.train_config(config, name, seed, workdir)
            shipped = demo.find(run_config, out)
            if shipped is not None and _whole(shipped, out):
                entry = dataclasses.asdict(shipped)
                kept[run_config.name] = {k: v for k, v in entry.items() if k != "name"}
    return kept


def _whole(run: demo.DemoRun, out: str) -> bool:
    """Whether the run's file is in `out` with the manifest's sha256."""
    try:
        with open(os.path.join(out, run.file), "rb") as f:
            return hashlib.sha256(f.read()).hexdigest() == run.sha256
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.parkkim.make_demo",
        description="Train the runs of keras-vit compare's default config and "
        "write them as the demo checkpoints it analyses.",
    )
    parser.add_argument(
        "--workdir",
        default=os.path.join("runs", "compare_demo"),
        help="where the training runs go (resumable); default: runs/compare_demo",
    )
    parser.add_argument(
        "--out",
        default=demo.DIRECTORY,
        help="the checkpoints' directory; default: the package's "
        "keras_vit/parkkim/demo_checkpoints/",
    )
    parser.add_argument(
        "--config",
        default="compare",
        help="the shipped comparison config whose runs are made; default: "
        "compare (the one `keras-vit compare` runs by default)",
    )
    parser.add_argument(
        "--retrain",
        action="store_true",
        help="make every run again (with --runs, those runs), even those "
        "already in --out with the same recipe (kept by default)",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="RUN",
        help="make these runs only (e.g. resnet_seed1); the others are kept "
        "where --out has them, else left out of the manifest",
    )
    args = parser.parse_args(argv)
    try:
        make(args.workdir, args.out, args.config, args.retrain, args.runs)
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
