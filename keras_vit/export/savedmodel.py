"""`export`: a ViT as a SavedModel for TF Serving, written atomically.

The layout TF Serving watches is `<base>/<name>/<version>/`, with a numeric
version. `export` writes the SavedModel into a hidden temporary directory next
to the target (which TF Serving ignores, its name not being a number) and
renames it into place only once it is complete, so a server never loads a
half-written version. The version directory and everything in it get the
permissions the umask gives (readable by a server running as another user
under umask 022), and staging directories left by killed exports are removed
(`keras_vit.atomic`).

The base directory may be a URL (`gs://bucket/models/vit/1`, any scheme
`tf.io.gfile` has). An object store cannot rename a directory, so there
the SavedModel is written complete into a local temporary directory and
uploaded file by file, `saved_model.pb` last: a version directory is a
SavedModel only once that file is in it (TensorFlow and TF Serving load
nothing without it), and a kill during the upload leaves a directory
without it, which the next export to that version replaces. Replacing a
version deletes its `saved_model.pb` first. TF Serving may try (and fail,
and retry) to load a version while it is uploaded: export a new version
number rather than overwrite one a server watches.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import tempfile
from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.export.pixel_limit import DEFAULT_MAX_PIXELS
from keras_vit.export.signatures import ServingGraph
from keras_vit.export.signatures import build_archive
from keras_vit.export.warmup import WARMUP_FILE
from keras_vit.export.warmup import write_warmup_file
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.models.resize import with_image_size
from keras_vit.utils import to_pair
from keras_vit.version import __version__

METADATA_FILE = "assets.extra/keras_vit_export.json"
# The file that makes a directory a SavedModel: uploaded last to a URL.
SAVED_MODEL_FILE = "saved_model.pb"


@export("keras_vit.export.export")
def export(
    model: keras.Model,
    path: str | os.PathLike,
    *,
    class_names: Sequence[str] | None = None,
    top_k: int = 5,
    overwrite: bool = False,
    image_size: int | tuple[int, int] | None = None,
    crop_fraction: float | None = None,
    warmup: bool = True,
    bytes_image_size: int | tuple[int, int] | None = None,
    max_image_size: int = 1024,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> pathlib.Path:
    """Exports a ViT as a SavedModel with serving signatures.

    The SavedModel needs neither `keras_vit` nor Keras to run: TF Serving,
    `tf.saved_model.load` or any TensorFlow runtime serves it. Signatures
    (see `keras_vit.export.signatures` for the full table):

    - `serving_default`: `images` uint8 `(batch, H, W, 3)` ->
      `logits`, `probabilities`.
    - `serving_float`: the same with float32 pixels in `[0, 255]`.
    - `serving_bytes`: `image_bytes` string `(batch,)` of encoded images ->
      `probabilities`, `top_k_classes`, `top_k_scores` (and `top_k_names`
      when `class_names` is given). Images are decoded, resized and
      centre-cropped by the model's input contract, as in evaluation
      (`keras_vit.data.transforms.resize_and_crop`). An image of more than
      `max_pixels` pixels (read from its header) fails its request with an
      `InvalidArgumentError` before it is decoded.
    - `features`: `images` uint8 -> `pooled`, the image representation.

    Preprocessing is part of the graph: pixels in `[0, 255]` are normalised
    by the model's input contract (`model.preprocessing`: `(x / 255 - mean)
    / std`, `[-1, 1]` for the paper's ViT, ImageNet's mean and std for DeiT
    III and DINOv2), and each
    signature checks the shape of its input: a batch of another size or
    channel count fails that request with an `InvalidArgumentError` saying
    what was expected and what came. A small JSON description of the export
    (image size, classes, signatures, the input contract) is written to
    `assets.extra/keras_vit_export.json`, and TF Serving's warm-up requests
    (one per signature) to `assets.extra/tf_serving_warmup_requests`.

    The version directory appears complete or not at all, with the
    permissions the umask gives (`0o755`/`0o644` under umask 022). Staging
    directories of killed exports in the same model directory are removed.
    At a URL, the version is complete once its `saved_model.pb` is there
    (uploaded last; see the module docstring).

    Args:
        model: A model built by `keras_vit.ViT` (or loaded from `.keras`).
        path: The version directory, e.g. `"saved_models/vit_b16/1"` or
            `"gs://bucket/vit_b16/1"`. Its name must be a positive integer:
            TF Serving serves only those.
        class_names: Optional class names, one per class.
        top_k: Classes returned by `serving_bytes`; clipped to the number of
            classes. Defaults to 5.
        overwrite: Replace an existing export at `path`. Defaults to `False`:
            an existing directory raises `FileExistsError`.
        image_size: Serve at another resolution, an int or `(height, width)`.
            The model is rebuilt with `keras_vit.with_image_size`, position
            embeddings resampled. Defaults to the model's own size.
        crop_fraction: The central crop of decoded images in `serving_bytes`
            (timm's `crop_pct`), in `(0, 1]`, overriding the contract's.
            Defaults to `None`: the model's contract's (1.0, a plain resize
            of the whole image, for the paper's).
        warmup: Write TF Serving's warm-up file, so that a new version is
            warmed up before it serves. Defaults to `True`.
        bytes_image_size: For a dynamic-size model
            (`dynamic_image_size=True`), the size `serving_bytes` resizes
            images to; `None` (default) keeps each image's own size, bounded
            by `max_image_size` and rounded to the token stride. A
            dynamic-size model exported without `image_size` serves any size
            in its tensor signatures; with `image_size` it is baked to that
            size (what LiteRT and ONNX conversion need).
        max_image_size: Longest side `serving_bytes` keeps for a dynamic-size
            model without `bytes_image_size`. Defaults to 1024.
        max_pixels: The most pixels (width x height) of an image
            `serving_bytes` decodes, read from the image's header before
            decoding (`keras_vit.export.pixel_limit`); a larger image, or
            one whose header cannot be read, fails its request. Defaults to
            Pillow's `Image.MAX_IMAGE_PIXELS` (89,478,485), the limit
            `keras_vit.predict` reads files under. At most `2**30`.

    Returns:
        The path of the written SavedModel: a `pathlib.Path`, or for a URL
        the URL (a `str`).

    Raises:
        FileExistsError: if `path` exists and `overwrite` is `False`.
        ValueError: for a version directory that is not a positive integer,
            a model that cannot be served this way, or bad arguments.

    Example:

    ```python
    model = keras_vit.ViT_B16(num_classes=10)
    export(model, "saved_models/vit_b16/1", class_names=names)
    export(model, "saved_models/vit_b16_384/1", image_size=384)
    ```
    """
    url = paths.is_url(path)
    path = os.fspath(path).rstrip("/") if url else pathlib.Path(path)
    check_version(path)
    if url:
        _check_url_version(path, overwrite)
    else:
        atomic.check_target(path, overwrite, is_dir=True)
    preprocessing = preprocessing_of(model)  # Kept at another resolution.
    if image_size is not None and to_pair(image_size, "image_size") != tuple(
        model.input_shape[1:3]
    ):
        model = with_image_size(model, image_size)
    # Everything that can fail on the model or the arguments fails here,
    # before anything is written.
    graph = ServingGraph(
        model,
        class_names,
        top_k,
        crop_fraction,
        bytes_image_size,
        max_image_size,
        preprocessing=preprocessing,
        max_pixels=max_pixels,
    )
    archive = build_archive(graph)

    if url:
        with tempfile.TemporaryDirectory(prefix="keras_vit-") as folder:
            staging = pathlib.Path(folder) / "version"
            staging.mkdir()
            archive.write_out(str(staging), verbose=False)
            if warmup:
                name = os.path.basename(os.path.dirname(path))
                write_warmup_file(graph, staging, model_name=name)
            _write_metadata(graph, staging, warmup)
            _upload_version(staging, path)
        return path
    staging = atomic.staging_dir(path)
    try:
        archive.write_out(str(staging), verbose=False)
        if warmup:
            write_warmup_file(graph, staging, model_name=path.parent.name)
        _write_metadata(graph, staging, warmup)
        atomic.finish(staging)
        atomic.move_into_place(staging, path, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def check_version(path: pathlib.Path | str):
    """Raises `ValueError` unless `path`'s name is a positive integer.

    TF Serving loads only integer version directories. `01` is refused too:
    a server reading it as version 1 would see two of them next to a `1`.
    """
    name = os.path.basename(os.fspath(path).rstrip("/"))
    if not re.fullmatch(r"[1-9][0-9]*", name):
        raise ValueError(
            f"The version directory must be a positive integer (TF Serving "
            f"serves only those), not {name!r}: {str(path)!r}."
        )


def _check_url_version(url: str, overwrite: bool):
    """`atomic.check_target` for a version at a URL.

    A directory without `saved_model.pb` is what a killed upload left: it
    is replaced, whatever `overwrite` says.
    """
    if paths.exists(url) and not paths.exists(f"{url}/{SAVED_MODEL_FILE}"):
        if paths.isdir(url):
            return
    atomic.check_url_target(url, overwrite, is_dir=True)


def _upload_version(staging: pathlib.Path, url: str):
    """Uploads a complete local SavedModel to `url`, `saved_model.pb` last.

    A version there already is first unmarked (its `saved_model.pb`
    deleted), then deleted. The other files are copied as they are (the
    marker, uploaded last and whole by `keras_vit.atomic.upload`, commits
    them).
    """
    marker = f"{url}/{SAVED_MODEL_FILE}"
    if paths.exists(marker):
        paths.remove(marker)
    paths.rmtree(url)
    files = sorted(
        os.path.relpath(os.path.join(root, name), staging)
        for root, _, names in os.walk(staging)
        for name in names
    )
    for name in [f for f in files if f != SAVED_MODEL_FILE]:
        paths.copy_file(str(staging / name), f"{url}/{name}")
    for root, dirs, _ in os.walk(staging):  # Empty folders too (`assets/`).
        for folder in dirs:
            relative = os.path.relpath(os.path.join(root, folder), staging)
            paths.makedirs(f"{url}/{relative}")
    atomic.upload(str(staging / SAVED_MODEL_FILE), marker)


def metadata(graph: ServingGraph, warmup: bool = True) -> dict:
    """Returns the JSON-able description written next to the SavedModel."""
    return {
        "model_name": graph.model.name,
        "image_size": None if graph.dynamic else list(graph.image_size),
        "dynamic_image_size": graph.dynamic,
        "token_stride": list(graph.stride),
        "bytes_image_size": (
            None if graph.bytes_image_size is None else list(graph.bytes_image_size)
        ),
        "num_classes": graph.num_classes,
        "class_names": list(graph.class_names) if graph.class_names else None,
        "top_k": graph.top_k,
        "crop_fraction": graph.crop_fraction,
        # serving_bytes refuses larger images before decoding them.
        "max_pixels": graph.max_pixels,
        "input_range": (
            "[0, 255]; normalised inside the graph by `preprocessing`: "
            "(x / 255 - mean) / std"
        ),
        # The input contract served: normalisation, and serving_bytes'
        # resize and crop (`keras_vit.Preprocessing.from_config`).
        "preprocessing": graph.preprocessing.get_config(),
        "signatures": sorted(graph.functions()),
        "warmup_file": WARMUP_FILE if warmup else None,
        "keras_vit_version": __version__,
        "tensorflow_version": tf.__version__,
    }


def _write_metadata(graph: ServingGraph, directory: pathlib.Path, warmup: bool):
    target = directory / METADATA_FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(metadata(graph, warmup), indent=2) + "\n")
