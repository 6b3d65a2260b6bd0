"""Measures the training input pipeline's throughput (images per second).

It reads a folder of JPEG files written for the run (ImageNet-like: 500x375,
about 40-60 KB each, 10 classes) through `keras_vit.data.train_dataset`:
decode, Inception crop, resize to the model's size, flip, optionally
RandAugment, scale to [-1, 1], batch, prefetch. The pipeline runs alone here,
with every core to itself; during real training it shares them with the
training step, so the benchmark asks for a margin (>= 5x the step's img/s).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from timing import peak_rss_mb  # noqa: E402
from timing import time_calls  # noqa: E402

NUM_FILES = 320
NUM_CLASSES = 10


def write_jpeg_folder(root: str, num_files: int = NUM_FILES, seed: int = 0) -> None:
    """Writes `num_files` smooth random 500x375 JPEGs in one folder per class."""
    rng = np.random.default_rng(seed)
    for index in range(num_files):
        folder = os.path.join(root, f"class_{index % NUM_CLASSES}")
        os.makedirs(folder, exist_ok=True)
        # Low-frequency noise upsampled: compresses like a photograph, not
        # like white noise (which would make decoding unrealistically slow).
        coarse = rng.uniform(0, 255, (1, 24, 32, 3)).astype("float32")
        image = tf.image.resize(coarse, (375, 500), method="bicubic")[0]
        image += rng.normal(0, 8, image.shape)
        image = tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)
        tf.io.write_file(
            os.path.join(folder, f"{index:05d}.jpg"),
            tf.io.encode_jpeg(image, quality=90),
        )


def run(case) -> dict:
    """Measures `case.iters` batches of the pipeline after its warm-up."""
    from keras_vit import data

    runtime_mb = peak_rss_mb()
    with tempfile.TemporaryDirectory() as root:
        write_jpeg_folder(root)
        source = data.load_source(f"folder:{root}", "train")
        dataset = data.train_dataset(
            source,
            image_size=case.image_size,
            global_batch_size=case.batch,
            epochs=10_000,
            steps_per_epoch=max(1, source.num_examples // case.batch),
            seed=0,
            augmentation=data.Augmentation(
                randaugment_ops=2 if "randaugment" in case.mode else 0,
                randaugment_magnitude=0.5,
            ),
        )
        batches = iter(dataset)

        def step():
            images, _ = next(batches)
            return images.numpy()

        result = time_calls(step, case.warmup, case.iters)
    result["runtime_rss_mb"] = runtime_mb
    result["versions"] = f"keras_vit.data, TF {tf.__version__}"
    return result
