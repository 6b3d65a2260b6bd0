"""Writes tiny Hub repositories of timm and transformers to `tests/fixtures/hub/`.

The tests of loading checkpoints by timm / Hugging Face names never
download: they point a Hub cache (or a folder) at these repositories. Each
is what the library itself writes for a model at test width (D=32, depth 2,
2 heads, MLP 64, patch 8, 32x32 images), randomly initialised with a fixed
seed and then every parameter re-randomised (`make_timm_fixture._randomize`,
LayerScale factors uniform in [0.2, 1.2]: LayerScale, registers, position
tables and heads are neither zeros nor ones). Beside each folder an `.npz`
holds what the library computes, from the three JPEGs, with its own
preprocessing, in float64 (the inputs are the float32 preprocessed pixels,
the model is run with `.double()`).

- `images/{a,b,c}.jpg`: 61x47, 40x72 and 50x50 (width x height) JPEGs
  (Pillow, quality 90): gradients, a few shapes and noise, so that resizing
  and cropping matter. Decoded with Pillow for every `pixels` below.
- `timm--<name>/`: `config.json` + `model.safetensors` as timm's
  `push_to_hf_hub` writes them (`timm.models.save_for_hf(...,
  safe_serialization=True)`; timm records the reconstruction `model_args`
  itself, from the factory's keyword arguments). The `pretrained_cfg` is the
  real one of `<name>` (`timm.models.get_pretrained_cfg`) with `input_size`
  (3, 32, 32) and the model's `num_classes`; timm itself drops `url`,
  `hf_hub_id` and `architecture` from it (the last moves to the top level).
  The names:
  - `vit_base_patch16_224.augreg2_in21k_ft_in1k` (10 classes),
  - `deit3_small_patch16_224.fb_in22k_ft_in1k` (10 classes),
  - `vit_small_patch14_reg4_dinov2.lvd142m` (no head, 4 registers),
  - `vit_base_patch16_siglip_224.webli` (no head, attention pooling).
  The script reloads every folder with timm's own local loader,
  `timm.create_model("local-dir:<folder>", pretrained=True)` (the parser of
  `hf-hub:` names, `timm.models._hub._parse_model_cfg`, without the
  download), and with `timm.create_model(<architecture>, pretrained=True,
  pretrained_cfg_overlay=dict(file=<folder>/model.safetensors),
  **model_args)`, and asserts that both compute the same logits and resolve
  the same data config.
- `timm--<name>.npz`: `pixels` (N, 32, 32, 3): timm's eval transform,
  `create_transform(**resolve_data_config({}, model=model))`, of each JPEG;
  `logits`: the head's logits, or the pooled features without a head;
  `intermediates_0`, `intermediates_1`: `forward_intermediates(indices=[0,
  1], norm=False, intermediates_only=True)` as (N, h, w, D) maps without the
  prefix tokens (timm offers `NCHW`/`NLC` only; transposed here);
  `intermediates_norm_1`: block 1 with `norm=True` (timm applies the final
  `model.norm`, not `fc_norm`); `data_config`: the resolved data config as
  JSON; `versions`: the library versions as JSON. The DINOv2 one also has
  `pixels_64` (2, 64, 48, 3) random inputs, and `intermediates_64_1` and
  `logits_64`: the same weights in a `dynamic_img_size=True` model at that
  size (timm's bicubic resampling of the position table).
- `google--vit-base-patch16-224/`: `ViTForImageClassification` (3 labels,
  cat/dog/bird) + `ViTImageProcessor` (32x32 squash, bilinear, mean/std
  0.5), `save_pretrained` with a small `max_shard_size`, so that it is
  sharded (`model.safetensors.index.json` + `model-0000k-of-0000n`).
- `facebook--dinov2-small/`: `Dinov2Model` + `BitImageProcessor` as
  facebook/dinov2-small's (shortest edge -> center crop, bicubic, ImageNet
  mean/std) scaled down to shortest edge 36, crop 32x32.
- `<folder>.npz` of those: `pixels` (the processor's `pixel_values`, NHWC;
  in transformers 5 `ViTImageProcessor` / `BitImageProcessor` are the
  torchvision backend, which `AutoImageProcessor` also picks), `pixels_pil`
  (the `...ImageProcessorPil` backend: the same config, up to one uint8
  level), `logits` (ViT: the classifier's logits; DINOv2: `pooler_output`),
  computed from `pixels`; `versions`.
- `timm_pretrained_cfgs.json`: `{name: pretrained_cfg fields}` for every
  `vit_*` / `deit_*` / `deit3_*` / `flexivit_*` timm name whose tag has
  `augreg`, `orig_in21k`, `fb_in1k`, `fb_in22k`, `lvd142m`, `webli`,
  `ep_in1k` or `ep_in21k`, and every timm name of the model zoo's families
  (`keras_vit.models.zoo`) but the rotary ones and AIMv2.
- `timm_architectures.json`: `{architecture: defaults}` of each of those
  architectures, read from a model built on the meta device (and, for
  `arch_args`, the keyword arguments the architecture function passes to
  the model class).

torch, timm and transformers are not dependencies of keras_vit. To run this:

    pip install torch==2.13.0
    pip install timm transformers -c <(echo torch==2.13.0)
    python scripts/make_hub_fixtures.py [--out tests/fixtures/hub]
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_fixtures as family  # noqa: E402
import make_timm_fixture as base  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (width, height) of each JPEG.
IMAGES = {"a.jpg": (61, 47), "b.jpg": (40, 72), "c.jpg": (50, 50)}

TEST = dict(
    embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, patch_size=8, img_size=32
)
# (timm name, num_classes, seed)
TIMM = (
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k", 10, 31),
    ("deit3_small_patch16_224.fb_in22k_ft_in1k", 10, 32),
    ("vit_small_patch14_reg4_dinov2.lvd142m", 0, 33),
    ("vit_base_patch16_siglip_224.webli", 0, 34),
)
DYNAMIC = "vit_small_patch14_reg4_dinov2.lvd142m"
DYNAMIC_SHAPE = (2, 64, 48, 3)

CFG_TAGS = (
    "augreg", "orig_in21k", "fb_in1k", "fb_in22k", "lvd142m", "webli", "ep_in1k",
    "ep_in21k",
)  # fmt: skip
CFG_FIELDS = (
    "architecture", "tag", "hf_hub_id", "input_size", "interpolation", "crop_pct",
    "crop_mode", "mean", "std", "num_classes", "license",
)  # fmt: skip


# ---------------------------------------------------------------- writing


def _check(ok: bool, message) -> None:
    """The script's own checks (what the libraries wrote is what we expect)."""
    if not ok:
        raise SystemExit(f"check failed: {message}")


def _npz(path: str, **arrays) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    family._write_atomic(path, buffer.getvalue())


def _replace_folder(staged: str, dest: str) -> None:
    """Makes `dest` hold exactly the files of `staged` (a sibling folder)."""
    for root, _dirs, files in os.walk(staged):
        os.chmod(root, 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    old = None
    if os.path.exists(dest):
        old = tempfile.mkdtemp(dir=os.path.dirname(dest), prefix=".old_")
        os.replace(dest, os.path.join(old, "x"))
    os.replace(staged, dest)
    if old:
        shutil.rmtree(old)


class _Staged:
    """A temporary folder beside `dest` that replaces it on success."""

    def __init__(self, dest: str):
        self.dest = dest

    def __enter__(self) -> str:
        parent = os.path.dirname(os.path.abspath(self.dest))
        self.path = tempfile.mkdtemp(dir=parent, prefix=".tmp_")
        return self.path

    def __exit__(self, kind, value, tb) -> None:
        if kind is None:
            _replace_folder(self.path, self.dest)
        else:
            shutil.rmtree(self.path, ignore_errors=True)


def _json_lines(path: str, table: dict) -> None:
    """One sorted `"key": {...}` entry a line: small, and diffs well."""
    rows = [
        f"{json.dumps(k)}: {json.dumps(table[k], sort_keys=True)}"
        for k in sorted(table)
    ]
    family._write_atomic(path, ("{\n" + ",\n".join(rows) + "\n}\n").encode())


def _versions() -> str:
    import PIL
    import safetensors
    import timm
    import torchvision
    import transformers

    return json.dumps(
        {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "timm": timm.__version__,
            "transformers": transformers.__version__,
            "Pillow": PIL.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
        },
        sort_keys=True,
    )


# ----------------------------------------------------------------- images


def _image(width: int, height: int, seed: int):
    from PIL import Image
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    u, v = x / (width - 1), y / (height - 1)
    rgb = np.stack(
        [
            40 + 180 * u,
            30 + 190 * v,
            128 + 90 * np.sin(2 * np.pi * (1.3 * u + 0.7 * v) + seed),
        ],
        axis=-1,
    )
    image = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(3):
        x0, x1 = sorted(rng.integers(0, width, 2))
        y0, y1 = sorted(rng.integers(0, height, 2))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        box = (int(x0), int(y0), int(x1) + 3, int(y1) + 3)
        if rng.uniform() < 0.5:
            draw.ellipse(box, fill=color)
        else:
            draw.rectangle(box, fill=color)
    points = [tuple(int(p) for p in rng.integers(0, (width, height))) for _ in range(3)]
    draw.line(points, fill=(255, 255, 255), width=2)
    noisy = np.asarray(image, np.float64) + rng.normal(0, 10, (height, width, 3))
    return Image.fromarray(np.clip(np.rint(noisy), 0, 255).astype(np.uint8))


def make_images(out: str) -> list:
    """Writes the JPEGs; returns them as Pillow decodes the files, sorted."""
    folder = os.path.join(out, "images")
    with _Staged(folder) as staged:
        for seed, (name, (width, height)) in enumerate(sorted(IMAGES.items())):
            buffer = io.BytesIO()
            _image(width, height, seed).save(buffer, format="JPEG", quality=90)
            with open(os.path.join(staged, name), "wb") as f:
                f.write(buffer.getvalue())
    return read_images(out)


def read_images(out: str) -> list:
    """The JPEGs as Pillow decodes the files, sorted by name."""
    from PIL import Image

    folder = os.path.join(out, "images")
    images = []
    for name in sorted(os.listdir(folder)):
        with Image.open(os.path.join(folder, name)) as image:
            images.append(image.convert("RGB"))
    sizes = [i.size for i in images]
    _check(sizes == [IMAGES[k] for k in sorted(IMAGES)], f"JPEG sizes {sizes}")
    return images


# ------------------------------------------------------------------- timm


def _randomize(model, seed: int) -> None:
    """`make_timm_fixture._randomize`, with LayerScale factors in [0.2, 1.2].

    Its 1 + 0.1 noise for every 1-D parameter would leave LayerScale near the
    identity; spread out, a loader that drops it fails clearly.
    """
    base._randomize(model, seed)
    gen = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("ls1.gamma", "ls2.gamma", "lambda1")):
                param.copy_(0.2 + torch.rand(param.shape, generator=gen))


def _nchw(pixels: np.ndarray, dtype=torch.float64) -> torch.Tensor:
    return torch.from_numpy(pixels).permute(0, 3, 1, 2).to(dtype)


def _nhwc(t: torch.Tensor) -> np.ndarray:
    return t.permute(0, 2, 3, 1).numpy()


def _timm_model(name: str, num_classes: int, **extra):
    import timm

    return timm.create_model(
        name,
        pretrained=False,
        pretrained_cfg_overlay=dict(input_size=(3, 32, 32), num_classes=num_classes),
        num_classes=num_classes,
        **TEST,
        **extra,
    )


def _check_reload(folder: str, model, pixels: np.ndarray, data_config: dict) -> None:
    """timm's own loaders re-create the model from the folder alone."""
    import timm
    from timm.models._hub import load_model_config_from_path

    x = _nchw(pixels, torch.float32)
    with torch.no_grad():
        expected = model.eval()(x)
    cfg, architecture, model_args = load_model_config_from_path(folder)
    # The file route needs the folder's pretrained_cfg as overlay: with the
    # registry's (num_classes=1000) timm re-initialises a 10-class head.
    overlay = {k: v for k, v in cfg.items() if k not in ("file", "source")}
    overlay["file"] = os.path.join(folder, "model.safetensors")
    reloaded = (
        timm.create_model(f"local-dir:{folder}", pretrained=True),
        timm.create_model(
            architecture, pretrained=True, pretrained_cfg_overlay=overlay, **model_args
        ),
    )
    for other in reloaded:
        with torch.no_grad():
            _check(torch.equal(other.eval()(x), expected), f"{folder}: reloaded")
        config = timm.data.resolve_data_config({}, model=other)
        # (mean/std come back from config.json as lists)
        _check(json.dumps(config) == json.dumps(data_config), (config, data_config))


def make_timm(out: str, images: list, versions: str) -> None:
    import timm
    from timm.models import save_for_hf

    for name, num_classes, seed in TIMM:
        model = _timm_model(name, num_classes)
        _randomize(model, seed)
        model.eval()
        data_config = timm.data.resolve_data_config({}, model=model)
        transform = timm.data.create_transform(**data_config)
        pixels = torch.stack([transform(i) for i in images])
        pixels = pixels.permute(0, 2, 3, 1).numpy().astype(np.float32)

        folder = os.path.join(out, "timm--" + name)
        with _Staged(folder) as staged:
            save_for_hf(model, staged, safe_serialization=True)
            files = sorted(os.listdir(staged))
            _check(files == ["config.json", "model.safetensors"], files)
        _check_reload(folder, model, pixels, data_config)

        arrays = {"pixels": pixels}
        float64 = copy.deepcopy(model).double().eval()
        x = _nchw(pixels)
        with torch.no_grad():
            arrays["logits"] = float64(x).numpy()
            maps = float64.forward_intermediates(
                x, indices=[0, 1], norm=False, output_fmt="NCHW",
                intermediates_only=True,
            )  # fmt: skip
            (normed,) = float64.forward_intermediates(
                x, indices=[1], norm=True, output_fmt="NCHW", intermediates_only=True
            )
        arrays["intermediates_0"] = _nhwc(maps[0])
        arrays["intermediates_1"] = _nhwc(maps[1])
        arrays["intermediates_norm_1"] = _nhwc(normed)
        if name == DYNAMIC:
            dynamic = _timm_model(name, num_classes, dynamic_img_size=True)
            dynamic.load_state_dict(model.state_dict())
            dynamic = dynamic.double().eval()
            pixels_64 = base._images(DYNAMIC_SHAPE, seed)
            x64 = _nchw(pixels_64)
            with torch.no_grad():
                (m64,) = dynamic.forward_intermediates(
                    x64, indices=[1], norm=False, output_fmt="NCHW",
                    intermediates_only=True,
                )  # fmt: skip
                arrays["logits_64"] = dynamic(x64).numpy()
            arrays["pixels_64"] = pixels_64
            arrays["intermediates_64_1"] = _nhwc(m64)
        arrays["data_config"] = np.array(json.dumps(data_config, sort_keys=True))
        arrays["versions"] = np.array(versions)
        _npz(folder + ".npz", **arrays)


# ----------------------------------------------------------- transformers


def _hf_pixels(processor_cls, kwargs: dict, images: list) -> np.ndarray:
    processor = processor_cls(**kwargs)
    values = processor(images=images, return_tensors="pt").pixel_values
    return values.permute(0, 2, 3, 1).numpy().astype(np.float32)


def _hf_fixture(
    out: str, folder_name: str, model, processor_cls, pil_cls, kwargs: dict,
    images: list, seed: int, versions: str, output: str, interpolated=None,
    **save_kwargs,
) -> str:  # fmt: skip
    from transformers import AutoImageProcessor

    _randomize(model, seed)
    model.eval()
    pixels = _hf_pixels(processor_cls, kwargs, images)
    pixels_pil = _hf_pixels(pil_cls, kwargs, images)
    # The two backends agree up to a uint8 level or two before normalising.
    gap = np.abs(pixels - pixels_pil).max() * min(kwargs["image_std"]) * 255
    _check(gap <= 2.5, f"{folder_name}: torchvision and PIL backends differ by {gap}")

    folder = os.path.join(out, folder_name)
    with _Staged(folder) as staged:
        model.save_pretrained(staged, **save_kwargs)
        processor_cls(**kwargs).save_pretrained(staged)

    # What `from_pretrained` makes of the folder computes the same.
    loaded = AutoImageProcessor.from_pretrained(folder)
    _check(type(loaded) is processor_cls, type(loaded))
    again = loaded(images=images, return_tensors="pt").pixel_values
    again = again.permute(0, 2, 3, 1).numpy()
    _check(np.array_equal(again, pixels), f"{folder_name}: reloaded processor")
    reloaded = type(model).from_pretrained(folder).eval()
    x = _nchw(pixels, torch.float32)
    with torch.no_grad():
        a = getattr(model(pixel_values=x), output)
        b = getattr(reloaded(pixel_values=x), output)
    _check(torch.equal(a, b), f"{folder_name}: reloaded")

    float64 = copy.deepcopy(model).double().eval()
    with torch.no_grad():
        logits = getattr(float64(pixel_values=_nchw(pixels)), output).numpy()
    extra = {}
    if interpolated is not None:
        # Another resolution: transformers resamples the position table to
        # the input (`interpolate_pos_encoding=True`), in float64 here.
        rng = np.random.default_rng(seed)
        other = rng.standard_normal(interpolated).astype(np.float32)
        with torch.no_grad():
            moved = float64(pixel_values=_nchw(other), interpolate_pos_encoding=True)
        extra = {"pixels_other": other, "logits_other": getattr(moved, output).numpy()}
    _npz(
        folder + ".npz",
        pixels=pixels,
        pixels_pil=pixels_pil,
        logits=logits,
        versions=np.array(versions),
        **extra,
    )
    return folder


def make_transformers(out: str, images: list, versions: str) -> None:
    from transformers import BitImageProcessor
    from transformers import BitImageProcessorPil
    from transformers import Dinov2Config
    from transformers import Dinov2Model
    from transformers import ViTConfig
    from transformers import ViTForImageClassification
    from transformers import ViTImageProcessor
    from transformers import ViTImageProcessorPil
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()

    labels = {0: "cat", 1: "dog", 2: "bird"}
    config = ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, patch_size=8, image_size=32, num_labels=3,
        id2label=labels, label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    vit = dict(
        size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3,
        resample=2,
    )  # fmt: skip
    folder = _hf_fixture(
        out, "google--vit-base-patch16-224", ViTForImageClassification(config),
        ViTImageProcessor, ViTImageProcessorPil, vit, images, seed=41,
        versions=versions, output="logits", max_shard_size="60KB",
        interpolated=(2, 48, 40, 3),
    )  # fmt: skip
    shards = [n for n in os.listdir(folder) if n.startswith("model-")]
    files = sorted(os.listdir(folder))
    _check(
        len(shards) >= 2
        and "model.safetensors.index.json" in files
        and "model.safetensors" not in files,
        f"not sharded: {files}",
    )

    # As facebook/dinov2-*: the config's image_size (518 there, 64 here) is
    # the position table's, larger than the processor's crop (224, 32), and
    # the model resamples the table to each input (interpolate_pos_encoding).
    config = Dinov2Config(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_ratio=2,
        patch_size=8, image_size=64, layerscale_value=0.1,
    )  # fmt: skip
    # facebook/dinov2-small's preprocessor_config.json, at 36 -> 32 for 256 -> 224.
    dinov2 = dict(
        size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32},
        do_center_crop=True, do_convert_rgb=True, do_normalize=True,
        do_rescale=True, do_resize=True, rescale_factor=1 / 255, resample=3,
        image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
    )  # fmt: skip
    _hf_fixture(
        out, "facebook--dinov2-small", Dinov2Model(config), BitImageProcessor,
        BitImageProcessorPil, dinov2, images, seed=42, versions=versions,
        output="pooler_output",
    )  # fmt: skip


# ------------------------------------------------------- timm metadata


def _registry_names() -> list[str]:
    """The timm names of the model zoo's checkpoints, but the rotary
    families' and AIMv2's (`make_eva_fixtures.py` and
    `make_aimv2_fixtures.py` write their configs)."""
    from keras_vit.models import zoo

    fixtures = os.path.join(REPO, "tests", "fixtures")
    elsewhere = {None}
    for path in ("eva/pretrained_cfgs.json", "aimv2/aimv2.json"):
        with open(os.path.join(fixtures, path)) as f:
            elsewhere |= set(json.load(f)["models"])
    return [w.timm_name for w in zoo.checkpoints() if w.timm_name not in elsewhere]


def _jsonable(value):
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(f"{value:.6g}")
    func = getattr(value, "func", None)  # functools.partial
    if func is not None:
        args = ", ".join(
            f"{k}={json.dumps(_jsonable(v))}" for k, v in sorted(value.keywords.items())
        )
        return f"{func.__name__}({args})"
    return getattr(value, "__name__", type(value).__name__)


def pretrained_cfgs() -> dict:
    import timm

    names = [
        n
        for pattern in ("vit_*", "deit_*", "deit3_*", "flexivit_*")
        for n in timm.list_pretrained(pattern)
    ]
    names = {n for n in names if any(t in n.split(".", 1)[1] for t in CFG_TAGS)}
    zoo_names = set(_registry_names())
    unknown = zoo_names - set(timm.list_pretrained())
    _check(not unknown, f"zoo timm names timm does not have: {unknown}")
    names |= zoo_names
    table = {}
    for name in sorted(names):
        cfg = timm.models.get_pretrained_cfg(name).to_dict()
        table[name] = {k: _jsonable(cfg.get(k)) for k in CFG_FIELDS}
    return table


def _arch_args(arch: str) -> tuple:
    """The model on the meta device, and the keyword arguments its
    architecture function gives the model class."""
    import timm
    from timm.models.vision_transformer import VisionTransformer

    seen = []
    init = VisionTransformer.__init__

    def spy(self, *args, **kwargs):
        if not seen:
            seen.append(kwargs)
        init(self, *args, **kwargs)

    VisionTransformer.__init__ = spy
    try:
        with torch.device("meta"):
            model = timm.create_model(arch, pretrained=False)
    finally:
        VisionTransformer.__init__ = init
    return model, _jsonable(seen[0])


def architecture(arch: str) -> dict:
    model, args = _arch_args(arch)
    block = model.blocks[0]
    mlp, attn = block.mlp, block.attn
    identity = torch.nn.Identity
    hidden = mlp.fc2.in_features
    act = mlp.act
    act_name = type(act).__name__
    if getattr(act, "approximate", "none") != "none":
        act_name += f"(approximate={act.approximate!r})"
    pool = getattr(model, "attn_pool", None)
    return {
        "model_class": type(model).__name__,
        "arch_args": args,
        "embed_dim": model.embed_dim,
        "depth": len(model.blocks),
        "num_heads": attn.num_heads,
        "mlp_ratio": args.get("mlp_ratio", 4.0),
        "mlp_hidden": hidden,
        "mlp_layer": type(mlp).__name__,
        "act_layer": act_name,
        "patch_embed": type(model.patch_embed).__name__,
        "patch_size": _jsonable(model.patch_embed.patch_size),
        "img_size": _jsonable(model.patch_embed.img_size),
        "class_token": model.cls_token is not None,
        "reg_tokens": model.num_reg_tokens,
        "num_prefix_tokens": model.num_prefix_tokens,
        "no_embed_class": model.no_embed_class,
        "pos_embed": _jsonable(tuple(model.pos_embed.shape)),
        "init_values": args.get("init_values"),
        # A ResPostBlock (timm's rpn) has no ls1: its init_values scale the norms.
        "layer_scale": not isinstance(
            getattr(block, "ls1", None), (identity, type(None))
        ),
        "global_pool": model.global_pool,
        "attn_pool": type(pool).__name__ if pool is not None else None,
        "fc_norm": not isinstance(model.fc_norm, identity),
        "final_norm": not isinstance(model.norm, identity),
        "pre_norm": not isinstance(model.norm_pre, identity),
        "qkv_bias": attn.qkv.bias is not None,
        "qk_norm": not isinstance(attn.q_norm, identity),
        "norm_eps": _jsonable(block.norm1.eps),
        "dynamic_img_size": model.dynamic_img_size,
        "num_classes": model.num_classes,
    }


def make_metadata(out: str) -> None:
    cfgs = pretrained_cfgs()
    _json_lines(os.path.join(out, "timm_pretrained_cfgs.json"), cfgs)
    arches = sorted({c["architecture"] for c in cfgs.values()})
    _json_lines(
        os.path.join(out, "timm_architectures.json"),
        {a: architecture(a) for a in arches},
    )


def check_versions(versions: str) -> None:
    path = os.path.join(REPO, "tests", "fixtures", "VERSIONS.json")
    with open(path) as f:
        recorded = json.load(f)
    now = json.loads(versions)
    for key in ("torch", "timm", "transformers"):
        if recorded.get(key) != now[key]:
            print(f"NOTE {key}: {now[key]} here, {recorded.get(key)} in VERSIONS.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures", "hub"))
    parser.add_argument(
        "--only",
        choices=("timm", "transformers", "metadata"),
        help="Write one part only (the JPEGs are then read, not rewritten).",
    )
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(base._guard_torchvision())  # timm and transformers import torchvision
    torch.manual_seed(0)
    versions = _versions()
    check_versions(versions)
    images = read_images(args.out) if args.only else make_images(args.out)
    if args.only in (None, "timm"):
        make_timm(args.out, images, versions)
    if args.only in (None, "transformers"):
        make_transformers(args.out, images, versions)
    if args.only in (None, "metadata"):
        make_metadata(args.out)
    total = 0
    for root, _, files in sorted(os.walk(args.out)):
        for name in sorted(files):
            path = os.path.join(root, name)
            size = os.path.getsize(path)
            total += size
            print(f"{os.path.relpath(path, args.out):60s} {size / 1024:8.1f} KiB")
    print(f"{'total':60s} {total / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
