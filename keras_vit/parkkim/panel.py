"""Park & Kim's panel: every analysis of the paper on one trained model.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) makes its case
with a handful of analyses, each run here with the authors' protocol (read
from their code, xxxnell/how-do-vits-work @ 9571ff1; see each function):

- `depth_statistics`: `Δ log amplitude` of the feature maps' Fourier
  transform at the authors' highest frequency, and their per-channel spatial
  variance, after every block (Fig. 2a, 8, 9);
- `hessian_spectrum`: the top-5 Hessian eigenvalues of the training loss on
  augmented batches with the L2 term (Fig. 1c, 4), and each batch's
  smallest eigenvalue measured directly (Lanczos), with the loss of each
  batch (the matched-loss rule of `keras_vit.parkkim.claims` reads it), and
  the same on clean batches with hard labels and no L2, the protocol their
  README calls incorrect, as a labelled second column;
- `noise_robustness`: accuracy under sign noise in a square frequency
  annulus, not renormalised, from 0 to π, with the noise RMS per band
  (Fig. 2b), on the whole test split by default, image by image;
- `loss_landscape`: NLL + L2 on a 2-D grid of filter-normalised directions
  (Fig. 1a), for the first seeds;
- mean attention distance of every attention block.

`model_panel` runs them on one model and returns a JSON-ready dict of
numbers; `keras_vit.parkkim.claims.claims` judges the paper's claims from
the panels of several models and seeds, and `keras_vit.parkkim.compare`
trains the models and calls both.

Example:

```python
import keras

from keras_vit.parkkim.panel import PanelSettings
from keras_vit.parkkim.panel import model_panel

loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
panel = model_panel(model, images, labels, augmented, clean, loss=loss,
                    weight_decay=0.05, settings=PanelSettings())
panel["accuracy"], panel["classes"], panel["hessian"]["eigenvalues"]
```
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from collections.abc import Iterable

import keras
import numpy as np

from keras_vit.analysis.depth import depth_statistics
from keras_vit.analysis.hessian import hessian_spectrum
from keras_vit.analysis.landscape import loss_landscape
from keras_vit.analysis.noise import authors_frequencies
from keras_vit.analysis.noise import noise_robustness
from keras_vit.parkkim.settings import PanelSettings
from keras_vit.parkkim.window_distance import attention_distance_by_depth


def model_panel(
    model: keras.Model,
    images: np.ndarray,
    labels: np.ndarray,
    augmented: Iterable,
    clean: Iterable | None,
    *,
    loss: Callable,
    weight_decay: float,
    settings: PanelSettings = PanelSettings(),  # noqa: B008  a frozen dataclass
    landscape: bool = False,
    seed: int = 0,
    progress: Callable[[str, float], None] | None = None,
    landscape_rows: str | None = None,
) -> dict:
    """Every analysis of the panel on one trained model.

    Args:
        model: A keras_vit ViT, ResNet, PreActResNet or AlterNet classifier.
        images: Test images `(N, H, W, C)` in the model's input range: the
            accuracy is measured on all of them, the Fourier, variance and
            distance analyses on the first `settings.images`, the noise on
            the first `settings.noise_images` (all for `None`).
        labels: Their integer classes `(N,)`.
        augmented: Batches `(images, targets)` of the training stream, with
            its augmentation (crops, MixUp/CutMix): the authors' Hessian and
            landscape data. Read once per analysis, so pass a re-iterable
            (a `tf.data.Dataset` or a list).
        clean: Clean training batches `(images, one-hot labels)` for the
            clean-data Hessian column, or `None`.
        loss: The training loss (e.g. cross-entropy with label smoothing).
        weight_decay: The training's weight decay (the L2 term's factor).
        settings: A `PanelSettings`.
        landscape: Whether to compute the loss landscape for this model.
        seed: Seeds the power iterations, the noise and the directions.
        progress: `progress(stage, seconds)`, called as each analysis ends:
            `"Fourier/variance"`, `"Hessian"` (both columns), `"noise"`,
            `"distances"`, `"landscape"`.
        landscape_rows: A CSV file that keeps the landscape's rows as they
            are computed, so that an interrupted sweep resumes
            (`loss_landscape`'s `rows_path`).

    Returns:
        A dict: `"accuracy"` (on `images`), `"images"` (their number: the
        binomial errors of the claims), `"classes"` (the model's number of
        classes: chance accuracy is its inverse), `"depth"` (`depth_statistics`),
        `"hessian"` and `"hessian_clean"` (`hessian_spectrum`, the second
        `None` without `clean`), `"noise"` (and `"noise_equal_energy"`)
        (`noise_robustness`), `"distances"` (`attention_distance_by_depth`)
        and `"landscape"` (`loss_landscape`, or `None`).
    """
    s = settings
    logits = np.asarray(model.predict(images, batch_size=s.batch_size, verbose=0))
    accuracy = float((logits.argmax(-1) == labels).mean())  # logits: (N, classes)
    analysed = images[: s.images]  # (n, H, W, C): the maps' images

    def timed(stage, compute):
        started = time.perf_counter()
        value = compute()
        if progress is not None:
            progress(stage, time.perf_counter() - started)
        return value

    result = {
        "accuracy": accuracy,
        "images": len(images),
        "classes": int(logits.shape[-1]),
        "depth": timed(
            "Fourier/variance",
            lambda: depth_statistics(model, analysed, batch_size=s.batch_size),
        ),
        **timed(
            "Hessian",
            lambda: _hessians(model, augmented, clean, loss, weight_decay, s, seed),
        ),
        **timed("noise", lambda: _noises(model, images, labels, s, seed)),
        "distances": timed(
            "distances",
            lambda: attention_distance_by_depth(
                model, analysed, batch_size=s.batch_size
            ),
        ),
        "landscape": None,
    }
    if landscape and s.landscape_points:
        points = (-1.0, 1.0, int(s.landscape_points))
        result["landscape"] = timed(
            "landscape",
            lambda: loss_landscape(
                model,
                _take(augmented, s.landscape_batches),
                loss=loss,
                weight_decay=weight_decay,
                x=points,
                y=points,
                seed=seed,
                verbose=0,
                rows_path=landscape_rows,
            ),
        )
    return result


def _hessians(model, augmented, clean, loss, weight_decay, s, seed) -> dict:
    """`"hessian"` (augmented batches, training loss + L2: the authors') and
    `"hessian_clean"` (clean batches, hard labels, no L2; or `None`)."""
    result = {
        "hessian": hessian_spectrum(
            model,
            augmented,
            loss=loss,
            weight_decay=weight_decay,
            l2=s.hessian_l2,
            top_k=s.hessian_top_k,
            num_batches=s.hessian_batches,
            max_iterations=s.hessian_iterations,
            seed=seed,
            verbose=0,
            smallest=True,
        ),
        "hessian_clean": None,
    }
    if clean is not None and s.clean_hessian:
        result["hessian_clean"] = hessian_spectrum(
            model,
            clean,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True),
            top_k=s.hessian_top_k,
            num_batches=s.hessian_batches,
            max_iterations=s.hessian_iterations,
            seed=seed,
            verbose=0,
        )
    return result


def _noises(model, images, labels, s, seed) -> dict:
    """`"noise"` (the authors' sign noise per annulus) and
    `"noise_equal_energy"` (the equal-energy alternative, or `None`), each
    with `"images"` (their number) and `"inputs"` (a digest of the images
    and labels: panels with the same one were measured on the same images,
    so their per-image results pair)."""
    images, labels = images[: s.noise_images], labels[: s.noise_images]
    digest = hashlib.sha256()
    digest.update(np.ascontiguousarray(images, dtype="float32").tobytes())
    digest.update(np.asarray(labels, dtype="int64").tobytes())
    same_images = {"images": len(images), "inputs": digest.hexdigest()[:16]}
    result = {
        "noise": noise_robustness(
            model,
            images,
            labels,
            protocol="authors",
            epsilon=0.31 if s.noise_epsilon is None else s.noise_epsilon,
            frequencies=authors_frequencies(s.noise_frequencies),
            seed=seed,
            batch_size=s.batch_size,
            verbose=0,
        )
        | same_images,
        "noise_equal_energy": None,
    }
    if s.equal_energy_noise:
        # A quarter of the norm of an image of ones, (H, W, C) values.
        norm = 0.25 * float(np.sqrt(np.prod(images.shape[1:])))
        result["noise_equal_energy"] = (
            noise_robustness(
                model,
                images,
                labels,
                protocol="equal_energy",
                bands=5,
                norm=norm,
                seed=seed,
                batch_size=s.batch_size,
                verbose=0,
            )
            | same_images
        )
    return result


def _take(batches: Iterable, count: int) -> list:
    """The first `count` batches, as NumPy tuples (the landscape's data)."""
    taken = []
    for batch in batches:
        if len(taken) == count:
            break
        taken.append(tuple(np.asarray(part) for part in batch))
    return taken
