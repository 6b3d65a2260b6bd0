"""The NumPy reference for timm's RoPE ViTs (`reference_eva`) against timm.

The fixtures in `fixtures/eva/` were written by
`scripts/make_eva_fixtures.py` with timm: tiny DINOv3, EVA-02, Perception
Encoder and RoPE-ViT models with every parameter random, their state dicts
(`.safetensors`, timm's layout) and what timm computed for two batches of
images, at the model's size and at a non-square one (`.npz`). These tests
need only NumPy and the fixtures.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
import reference_eva as ref

from keras_vit.weights import read_safetensors

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
EVA = os.path.join(FIXTURES, "eva")
NAMES = [
    "dinov3",
    "dinov3_swiglu",
    "eva02",
    "eva02_fused",
    "eva02_clip",
    "pe_core",
    "pe_core_nocls",
    "pe_lang",
    "rope_axial",
    "rope_mixed",
    "rope_ape",
    "rope_mixed_ape",
]
SIZES = ["native", "other"]
# timm ran in float32; the reference is float64.
TOLERANCE = dict(rtol=1e-5, atol=1e-5)


def load(name):
    """(state dict, resolved config, npz) of one fixture."""
    state = read_safetensors(os.path.join(EVA, f"{name}.safetensors"))
    arrays = np.load(os.path.join(EVA, f"{name}.npz"))
    config = ref.resolve_config(json.loads(str(arrays["config"])))
    return state, config, arrays


def run(state, config, arrays, size):
    return ref.forward(state, config, arrays[f"images_{size}"].astype(np.float32))


def test_every_fixture_is_tested():
    written = sorted(n[: -len(".npz")] for n in os.listdir(EVA) if n.endswith(".npz"))
    assert written == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_state_dict_has_the_references_names_and_shapes(name):
    state, config, _ = load(name)
    assert {k: v.shape for k, v in state.items()} == ref.param_shapes(config)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("name", NAMES)
def test_reference_reproduces_timm(name, size):
    state, config, arrays = load(name)
    out = run(state, config, arrays, size)
    h, w = arrays[f"images_{size}"].shape[1:3]
    assert out["grid"] == (h // config["patch_size"][0], w // config["patch_size"][1])
    np.testing.assert_allclose(out["tokens"], arrays[f"tokens_{size}"], **TOLERANCE)
    np.testing.assert_allclose(out["pooled"], arrays[f"pooled_{size}"], **TOLERANCE)
    np.testing.assert_allclose(out["logits"], arrays[f"logits_{size}"], **TOLERANCE)
    # forward_intermediates: the last block's patch tokens, NCHW.
    spatial = out["spatial"].transpose(0, 3, 1, 2)
    np.testing.assert_allclose(spatial, arrays[f"spatial_{size}"], **TOLERANCE)
    normed = out["spatial"]
    if config["post_norm"]:
        normed = ref.layer_norm(
            normed, state["norm.weight"], state["norm.bias"], config["norm_eps"]
        )
    np.testing.assert_allclose(
        normed.transpose(0, 3, 1, 2), arrays[f"spatial_norm_{size}"], **TOLERANCE
    )


def _mutations(config):
    """Configs that differ from `config` in one RoPE detail."""
    if not config["use_rot_pos_emb"]:
        return {}
    swapped = {"ij": "xy", "xy": "ij"}[config["rope_grid_indexing"]]
    out = {"grid_indexing": dict(rope_grid_indexing=swapped)}
    if config["rope_type"] != "mixed":
        out["rotate_half"] = dict(rope_rotate_half=not config["rope_rotate_half"])
        out["temperature"] = dict(rope_temperature=2 * config["rope_temperature"])
        if config["num_prefix_tokens"]:
            # A shift of every position cancels in q.k when every token is
            # rotated; only the unrotated prefix tokens see it.
            out["grid_offset"] = dict(rope_grid_offset=config["rope_grid_offset"] + 1)
    if config["ref_feat_shape"] is not None:
        out["no_ref_feat_shape"] = dict(ref_feat_shape=None)
    out["no_rope"] = dict(use_rot_pos_emb=False)
    return out


@pytest.mark.parametrize("name", NAMES)
def test_fixtures_pin_every_rope_detail(name):
    """Each RoPE setting changed alone moves the output well past the
    tolerance: the agreement above is not blind to it."""
    state, config, arrays = load(name)
    mutations = _mutations(config)
    assert mutations, name
    for label, change in mutations.items():
        mutated = {**config, **change}
        worst = max(
            float(
                np.abs(
                    run(state, mutated, arrays, size)["tokens"]
                    - arrays[f"tokens_{size}"]
                ).max()
            )
            for size in SIZES
        )
        assert worst > 1e-2, (name, label, worst)


def test_resampling_matches_torch_antialiased_bicubic():
    """`resample_pos_embed` against torch's interpolate(bicubic,
    antialias=True) on grids shrunk and grown, square and not."""
    arrays = np.load(os.path.join(FIXTURES, "resample.npz"))
    cases = sorted({k.split("/")[0] for k in arrays.files})
    assert len(cases) >= 4
    for case in cases:
        grid = arrays[f"{case}/input"]  # (h, w, C)
        expected = arrays[f"{case}/bicubic_antialias"]  # (H, W, C)
        c = grid.shape[-1]
        out = ref.resample_pos_embed(
            grid.reshape(1, -1, c), expected.shape[:2], grid.shape[:2], 0
        )
        np.testing.assert_allclose(
            out.reshape(expected.shape), expected, rtol=1e-6, atol=1e-6
        )


def test_resampling_keeps_prefix_rows_and_same_size():
    rng = np.random.default_rng(0)
    pos = rng.normal(size=(1, 2 + 3 * 4, 5))
    out = ref.resample_pos_embed(pos, (5, 2), (3, 4), 2)
    assert out.shape == (1, 2 + 5 * 2, 5)
    np.testing.assert_array_equal(out[:, :2], pos[:, :2])
    assert ref.resample_pos_embed(pos, (3, 4), (3, 4), 2) is pos


PARAM_COUNTS = os.path.join(EVA, "param_counts.json")


def _param_counts():
    with open(PARAM_COUNTS) as f:
        return json.load(f)["models"]


def test_param_counts_cover_every_family_and_size():
    models = _param_counts()
    families = {}
    for name, entry in models.items():
        families.setdefault(entry["family"], set()).add(name.split(".")[0])
    assert set(families) == {"dinov3", "eva02", "pe", "rope_vit"}
    assert "vit_7b_patch16_dinov3" in families["dinov3"]
    assert "eva02_large_patch14_clip_336" in families["eva02"]
    assert "vit_pe_core_gigantic_patch14_448" in families["pe"]
    assert "vit_large_patch16_rope_mixed_ape_224" in families["rope_vit"]


@pytest.mark.parametrize("name", sorted(_param_counts()))
def test_reference_knows_every_pretrained_model(name):
    """The reference's names, shapes and parameter count for each timm
    pretrained tag equal what timm built (on the meta device)."""
    entry = _param_counts()[name]
    config = ref.resolve_config(entry["model_args"])
    shapes = ref.param_shapes(config)
    assert sum(math.prod(s) for s in shapes.values()) == entry["params"]
    outside_later_blocks = {
        k: list(s)
        for k, s in shapes.items()
        if not k.startswith("blocks.") or k.startswith("blocks.0.")
    }
    assert outside_later_blocks == entry["keys"]
