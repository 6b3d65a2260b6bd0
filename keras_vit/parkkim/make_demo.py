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
3. records the file's sha256 and size, the run's recipe, its last epoch's
   training loss, its training time and the CPU.

`manifest.json` is removed first and written last, naming only files
already written. Every
file is whole or absent; after a kill, the same command resumes the
interrupted training run and reuses the finished ones. Its cost is that of
the twelve training runs (`docs/parkkim.md`).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import sys
import time

from keras_vit import atomic
from keras_vit import paths
from keras_vit.parkkim import compare
from keras_vit.parkkim import demo
from keras_vit.parkkim.config import CompareConfig


def make(workdir: str, out: str = demo.DIRECTORY, config_name: str = "compare"):
    """Trains (or reuses) every run of `config_name` and writes the checkpoints.

    Args:
        workdir: Where the training runs go (`<workdir>/runs/<run>/`).
        out: The checkpoints' directory.
        config_name: The shipped comparison config whose runs are made.

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
    # The manifest goes first and comes back last: a kill in between leaves
    # checkpoints no manifest names (the comparison then trains), never a
    # manifest naming a file being replaced.
    stale = os.path.join(out, demo.MANIFEST)
    if os.path.exists(stale):
        os.remove(stale)
    data = compare._data(config)
    runs = {}
    for name in config.models:
        for seed in range(config.seeds):
            started = time.perf_counter()
            model, trained, stage = compare._model(
                config, name, seed, data, workdir, False, False
            )
            run_config = compare.train_config(config, name, seed, workdir)
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
            results = {
                "test_accuracy": accuracy,
                "test_loss": loss,
                "float32_test_accuracy": trained["test"]["accuracy"],
                "train_loss": _last_training_loss(run_config.workdir),
                "train_seconds": trained["seconds"],
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
    written = {
        "made_by": f"python -m keras_vit.parkkim.make_demo (config {config_name!r})",
        "cpu": describe_cpu(),
        "cores": os.cpu_count(),
        "stored_dtype": demo.STORED_DTYPE,
        "runs": runs,
    }
    atomic.write_json(os.path.join(out, demo.MANIFEST), written)
    return written


def _last_training_loss(workdir: str) -> float:
    """The training loss of the run's last epoch (its `metrics.csv`)."""
    with paths.open_file(os.path.join(workdir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return float(rows[-1]["loss"])


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
    args = parser.parse_args(argv)
    make(args.workdir, args.out, args.config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
