"""Writes `tests/fixtures/eva/`: tiny timm RoPE ViTs and their outputs.

DINOv3, EVA-02, Perception Encoder and RoPE-ViT are one class in timm
(`timm.models.eva.Eva`). For each family (and each RoPE variant) this
script takes the arguments timm's `@register_model` function passes, shrinks
the sizes (D=32, depth 2, 2 heads, patch 8 or 14), builds the model, sets
every parameter to random values (fixed seed) and writes:

- `<name>.safetensors`: the state dict, in timm's key layout;
- `<name>.npz`: `config` (the Eva arguments as JSON, `norm_eps` standing for
  `norm_layer`), then for `native` (the model's image size) and `other`
  (a non-square size, run with `dynamic_img_size=True`): `images_<size>`
  (NHWC, float16 values; timm ran them as float32), `tokens_<size>`
  (`forward_features`), `pooled_<size>` (`forward_head(pre_logits=True)`),
  `logits_<size>`, `spatial_<size>` and `spatial_norm_<size>`
  (`forward_intermediates` of the last block, NCHW as timm returns them,
  with `norm=False` / `norm=True`); `versions` (JSON).

It also writes `param_counts.json`: for every pretrained tag of the four
families, the parameter count (counted on the meta device), the Eva
arguments that rebuild the model and its state_dict names and shapes
outside the blocks and in block 0; and `pretrained_cfgs.json`: timm's
`pretrained_cfg` of each of those tags (input contract and licence;
`--cfgs-only` writes this file alone).

torch and timm are not dependencies of keras_vit; the tests read only the
files. Run where timm is installed:

    python scripts/make_eva_fixtures.py [--out tests/fixtures/eva]
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "eva"

SMALL = dict(embed_dim=32, depth=2, num_heads=2, patch_size=8, img_size=32)

# name: (registered timm model whose arguments are the family's, size
# overrides, the non-square other image size (H, W)).
FIXTURES = {
    # DINOv3: q/v bias (zero k bias), GELU Mlp, 4 registers, dinov3 RoPE, avg.
    "dinov3": ("vit_small_patch16_dinov3_qkvb", dict(num_classes=5), (32, 48)),
    # DINOv3 S+/H+/7B: no qkv bias, SwiGLU aligned (hidden 92 -> 96), and
    # upstream's class-token pooling.
    "dinov3_swiglu": (
        "vit_small_plus_patch16_dinov3",
        dict(num_classes=5, mlp_ratio=2.9, global_pool="token"),
        (40, 24),
    ),
    # EVA-02 B/L: separate q/k/v (k unbiased), SwiGLU + norm, 'cat' RoPE
    # rescaled to a reference grid, abs pos embed with a class row, avg + fc_norm.
    "eva02": (
        "eva02_base_patch14_448",
        dict(patch_size=14, img_size=56, ref_feat_shape=(3, 3), num_classes=5),
        (42, 70),
    ),
    # EVA-02 Ti/S: fused qkv with q/v bias, packed SwiGLU (GluMlp).
    "eva02_fused": (
        "eva02_tiny_patch14_336",
        dict(ref_feat_shape=(2, 2), num_classes=5),
        (24, 40),
    ),
    # EVA-02 CLIP: + attention inner norm, class-token pooling, final norm.
    "eva02_clip": (
        "eva02_base_patch16_clip_224",
        dict(ref_feat_shape=(4, 4), num_classes=6),
        (48, 40),
    ),
    # PE-Core T..L: norm_pre (patch embed unbiased), 'cat' RoPE at
    # offset 1 in 'xy' order, attention-pool ('map') and projection head.
    "pe_core": (
        "vit_pe_core_base_patch16_224",
        dict(ref_feat_shape=(4, 4), num_classes=12),
        (32, 48),
    ),
    # PE-Core G: no class token (no prefix), RoPE offset 0; the MLP ratios
    # made smaller than G's to keep the file small.
    "pe_core_nocls": (
        "vit_pe_core_gigantic_patch14_448",
        dict(
            ref_feat_shape=(4, 4),
            num_classes=12,
            mlp_ratio=4.0,
            attn_pool_mlp_ratio=2.0,
        ),
        (48, 32),
    ),
    # PE-Lang: layer scale, no final norm, avg pooling, no head.
    "pe_lang": (
        "vit_pe_lang_large_patch14_448",
        dict(ref_feat_shape=(4, 4), num_classes=0),
        (32, 48),
    ),
    # RoPE-ViT (Naver): axial / mixed RoPE, each with or without abs pos embed.
    "rope_axial": ("vit_small_patch16_rope_224", dict(num_classes=5), (32, 48)),
    "rope_mixed": ("vit_small_patch16_rope_mixed_224", dict(num_classes=5), (32, 48)),
    "rope_ape": ("vit_small_patch16_rope_ape_224", dict(num_classes=5), (40, 24)),
    "rope_mixed_ape": (
        "vit_small_patch16_rope_mixed_ape_224",
        dict(num_classes=5),
        (40, 24),
    ),
}

# Pretrained tags counted into param_counts.json, by family.
FAMILY_PATTERNS = {
    "dinov3": ["vit_*_dinov3*"],
    "eva02": ["eva02_tiny_*", "eva02_small_*", "eva02_base_*", "eva02_large_*"],
    "pe": ["vit_pe_core_*", "vit_pe_lang_*", "vit_pe_spatial_*"],
    "rope_vit": ["vit_*_patch16_rope_224", "vit_*_patch16_rope_*_224"],
}

_BUILD_ONLY = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")


def registered_args(name: str) -> dict:
    """The keyword arguments timm's @register_model function `name` passes
    to the Eva constructor, JSON-ready (`norm_layer` -> `norm_eps`)."""
    import timm.models.eva as eva

    seen = {}
    original = eva._create_eva

    def spy(variant, pretrained=False, **kwargs):
        seen.update(kwargs)
        raise _Captured

    eva._create_eva = spy
    try:
        getattr(eva, name)(pretrained=False)
    except _Captured:
        pass
    finally:
        eva._create_eva = original
    return jsonable(seen)


class _Captured(Exception):
    pass


def jsonable(kwargs: dict) -> dict:
    out = {}
    for key, value in kwargs.items():
        if key in _BUILD_ONLY:
            continue
        if key == "norm_layer":
            out["norm_eps"] = value.keywords["eps"]
            continue
        out[key] = list(value) if isinstance(value, tuple) else value
    return out


def build(args: dict):
    """An Eva model from JSON-ready arguments."""
    from timm.layers import LayerNorm
    from timm.models.eva import Eva

    kwargs = dict(args)
    eps = kwargs.pop("norm_eps", None)
    if eps is not None:
        kwargs["norm_layer"] = functools.partial(LayerNorm, eps=eps)
    for key in ("img_size", "patch_size", "ref_feat_shape"):
        if isinstance(kwargs.get(key), list):
            kwargs[key] = tuple(kwargs[key])
    return Eva(**kwargs).eval()


def randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random, at scales that keep activations O(1).

    timm's inits leave biases, q/v biases and heads at zero and layer scale
    at 1e-5; random values everywhere make the comparison see every key.
    """
    gen = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen) * std + mean

    with torch.no_grad():
        for name, param in model.named_parameters():
            shape = param.shape
            if name.endswith("gamma_1") or name.endswith("gamma_2"):
                value = 0.5 + torch.rand(shape, generator=gen)
            elif name == "rope.freqs":
                value = normal(shape, 0.7)
            elif name in ("cls_token", "reg_token", "pos_embed", "attn_pool.latent"):
                value = normal(shape, 0.5)
            elif param.ndim >= 2:
                fan_in = int(np.prod(shape[1:]))
                value = normal(shape, fan_in**-0.5)
            elif "norm" in name and name.endswith("weight"):
                value = normal(shape, 0.2, 1.0)
            else:  # biases, q_bias / v_bias
                value = normal(shape, 0.1)
            param.copy_(value)


def outputs(model, images_nhwc: np.ndarray) -> dict:
    x = torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2).copy())
    last = len(model.blocks) - 1
    with torch.no_grad():
        tokens = model.forward_features(x)
        raw = model.forward_intermediates(x, indices=[last], intermediates_only=True)[0]
        normed = model.forward_intermediates(
            x, indices=[last], norm=True, intermediates_only=True
        )[0]
        return dict(
            tokens=tokens.numpy(),
            pooled=model.forward_head(tokens, pre_logits=True).numpy(),
            logits=model.forward_head(tokens).numpy(),
            spatial=raw.numpy(),
            spatial_norm=normed.numpy(),
        )


def hub_config(registered: str, args: dict, path: pathlib.Path) -> None:
    """The fixture as timm's Hub format: `config.json` written by timm's own
    `save_config_for_hf` for the registered architecture at the fixture's
    sizes (the `architecture` a Hub repository names, its pretrained_cfg
    with the fixture's input size, and the arguments that rebuild it)."""
    import timm
    from timm.models._hub import save_config_for_hf

    kwargs = {k: v for k, v in args.items() if k != "norm_eps"}
    for key in ("img_size", "patch_size", "ref_feat_shape"):
        if isinstance(kwargs.get(key), list):
            kwargs[key] = tuple(kwargs[key])
    with torch.device("meta"):
        model = timm.create_model(registered, pretrained=False, **kwargs)
    save_config_for_hf(model, str(path))


def make_fixture(name: str, out: pathlib.Path, seed: int) -> dict:
    from safetensors.torch import save_file

    registered, overrides, other_hw = FIXTURES[name]
    args = {**registered_args(registered), **SMALL, **overrides}
    model = build(args)
    randomize(model, seed)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    dynamic = build({**args, "dynamic_img_size": True})
    dynamic.load_state_dict(state, strict=True)

    rng = np.random.default_rng(seed)
    h, w = model.patch_embed.img_size
    arrays = {"config": np.array(json.dumps(args))}
    for size, (ih, iw), net in (
        ("native", (h, w), model),
        ("other", other_hw, dynamic),
    ):
        # float16 values (stored as float16 to halve the file), run in float32.
        images = rng.normal(size=(2, ih, iw, 3)).astype(np.float16)
        arrays[f"images_{size}"] = images
        images = images.astype(np.float32)
        for key, value in outputs(net, images).items():
            arrays[f"{key}_{size}"] = value
    # The dynamic model reproduces the static one at the native size.
    check = outputs(dynamic, arrays["images_native"].astype(np.float32))
    drift = max(float(np.abs(check[k] - arrays[f"{k}_native"]).max()) for k in check)

    import timm

    arrays["versions"] = np.array(
        json.dumps({"timm": timm.__version__, "torch": torch.__version__})
    )
    save_file(state, str(out / f"{name}.safetensors"))
    np.savez(out / f"{name}.npz", **arrays)
    hub_config(registered, args, out / f"{name}.config.json")
    return dict(
        fixture=name,
        registered=registered,
        params=sum(p.numel() for p in model.parameters()),
        static_vs_dynamic=drift,
        bytes=(out / f"{name}.safetensors").stat().st_size
        + (out / f"{name}.npz").stat().st_size,
    )


def param_counts() -> dict:
    """Every pretrained tag of the four families: its parameter count on
    the meta device and the Eva arguments (with the image size and class
    count that tag builds) that rebuild it."""
    import timm

    table = {}
    for family, patterns in FAMILY_PATTERNS.items():
        names = sorted(
            {n for p in patterns for n in timm.list_models(p, pretrained=True)}
        )
        for full_name in names:
            arch = full_name.split(".")[0]
            with torch.device("meta"):
                model = timm.create_model(full_name, pretrained=False)
            args = registered_args(arch)
            args["img_size"] = list(model.patch_embed.img_size)
            args["num_classes"] = model.num_classes
            # Blocks are alike: the keys outside them and block 0's suffice.
            keys = {
                k: list(v.shape)
                for k, v in model.state_dict().items()
                if not k.startswith("blocks.") or k.startswith("blocks.0.")
            }
            table[full_name] = dict(
                family=family,
                params=sum(p.numel() for p in model.parameters()),
                model_args=args,
                keys=keys,
            )
    return table


def pretrained_cfgs() -> dict:
    """timm's `pretrained_cfg` of every tag `param_counts` counts: the input
    contract (size, crop, interpolation, mean, std) and licence each
    checkpoint was published with (the fields `make_hub_fixtures.py` keeps)."""
    import timm

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from make_hub_fixtures import CFG_FIELDS
    from make_hub_fixtures import _jsonable

    names = sorted(
        {
            n
            for patterns in FAMILY_PATTERNS.values()
            for p in patterns
            for n in timm.list_models(p, pretrained=True)
        }
    )
    return {
        name: {
            k: _jsonable(timm.models.get_pretrained_cfg(name).to_dict().get(k))
            for k in CFG_FIELDS
        }
        for name in names
    }


def write_json_lines(path: pathlib.Path, table: dict, **head) -> None:
    """`{**head, "models": table}`, one line per model (short, readable diffs)."""
    payload = {**head, "models": table}
    lines = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in table.items()]
    start = json.dumps(head)[:-1] + (", " if head else "")
    text = start + '"models": {\n' + ",\n".join(lines) + "\n}}\n"
    if json.loads(text) != payload:
        raise RuntimeError(f"{path.name} would not read back as written")
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--skip-counts", action="store_true")
    parser.add_argument(
        "--cfgs-only", action="store_true", help="write pretrained_cfgs.json only"
    )
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    if ns.cfgs_only:
        import timm

        cfgs = pretrained_cfgs()
        write_json_lines(ns.out / "pretrained_cfgs.json", cfgs, timm=timm.__version__)
        print(json.dumps({"pretrained_cfgs": len(cfgs)}))  # noqa: T201
        return
    torch.set_num_threads(1)
    for index, name in enumerate(FIXTURES):
        print(json.dumps(make_fixture(name, ns.out, seed=index)))  # noqa: T201
    if not ns.skip_counts:
        import timm

        table = param_counts()
        write_json_lines(
            ns.out / "param_counts.json",
            table,
            timm=timm.__version__,
            torch=torch.__version__,
        )
        print(json.dumps({"param_counts": len(table)}))  # noqa: T201
        cfgs = pretrained_cfgs()
        write_json_lines(ns.out / "pretrained_cfgs.json", cfgs, timm=timm.__version__)
        print(json.dumps({"pretrained_cfgs": len(cfgs)}))  # noqa: T201


if __name__ == "__main__":
    main()
