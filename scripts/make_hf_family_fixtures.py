"""Writes tiny Hugging Face / big_vision fixtures of DINOv2 and SigLIP.

Each fixture is a randomly initialised `transformers` model at test width
(D=32, depth 2, 2 heads, MLP 64, patch 8, 32x32 images) saved with
`save_pretrained` (the hub's `.safetensors` key layout), and an `.npz` with
input images and what transformers computes for them in float64
(`logits`: the model's `pooler_output`). The tests load them with
`keras_vit.weights.load_weights` and need neither torch nor transformers.

- `hf_dinov2_reg`: `Dinov2WithRegistersModel`, 4 registers (the class
  token's position row is in the table; the registers get none).
- `hf_dinov2`: `Dinov2Model` (no registers).
- `hf_dinov2_swiglu`: `Dinov2Model` with `use_swiglu_ffn=True` (DINOv2-g;
  its hidden width is 48 at this size).
- `hf_siglip`: `SiglipVisionModel` (no class token, attention-pooling
  head, tanh GELU).
- `bv_siglip.npz`: the same SigLIP weights written in big_vision's layout
  (`params/img/...`, `MAPHead_0`, per-head attention kernels), the key
  names of transformers' `convert_siglip_to_hf.py` (the reverse of its
  renames) and of big_vision's `models/vit.py` `MAPHead`; big_vision itself
  (JAX) is not installed here, so this file is written from that layout.
  Its outputs are `hf_siglip.npz`'s.

torch and transformers are not dependencies of keras_vit. To run this:

    pip install transformers -c <(echo torch==2.13.0)
    python scripts/make_hf_family_fixtures.py [--out tests/fixtures]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_family_fixtures as family  # noqa: E402
import make_timm_fixture as base  # noqa: E402

SIZE = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32,
    patch_size=8, layer_norm_eps=1e-6,
)  # fmt: skip


def _state(model) -> dict[str, np.ndarray]:
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        from safetensors.numpy import load_file

        return load_file(f"{tmp}/model.safetensors")


def _fixture(model, out: str, name: str, seed: int) -> dict:
    base._randomize(model, seed)
    state = _state(model)
    images = base._images((2, 32, 32, 3), seed)
    model = model.double().eval()
    x = torch.from_numpy(images.astype(np.float64)).permute(0, 3, 1, 2)
    with torch.no_grad():
        logits = model(pixel_values=x).pooler_output.numpy()
    from safetensors.numpy import save

    family._write_atomic(f"{out}/{name}.safetensors", save(state))
    _save_npz(f"{out}/{name}.npz", images=images, logits=logits)
    return state


def _save_npz(path: str, **arrays) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    family._write_atomic(path, buffer.getvalue())


def big_vision_layout(state: dict, num_heads: int) -> dict[str, np.ndarray]:
    """HF `SiglipVisionModel` tensors -> big_vision's `params/img/...` keys."""
    out = {}
    pre = "params/img/"

    def heads(w):  # (D_out, D_in) -> (D_in, H, D_out / H)
        return w.T.reshape(w.shape[1], num_heads, -1)

    def out_proj(w):  # (D_out, D_in) -> (H, D_in / H, D_out)
        return w.T.reshape(num_heads, -1, w.shape[0])

    for key, value in state.items():
        k = key.removeprefix("vision_model.")
        if k == "embeddings.patch_embedding.weight":
            out[pre + "embedding/kernel"] = value.transpose(2, 3, 1, 0)
        elif k == "embeddings.patch_embedding.bias":
            out[pre + "embedding/bias"] = value
        elif k == "embeddings.position_embedding.weight":
            out[pre + "pos_embedding"] = value[None]
        elif k.startswith("encoder.layers."):
            i, rest = k.removeprefix("encoder.layers.").split(".", 1)
            block = f"{pre}Transformer/encoderblock_{i}/"
            part, leaf = rest.rsplit(".", 1)
            mha = block + "MultiHeadDotProductAttention_0/"
            if part in ("layer_norm1", "layer_norm2"):
                ln = "LayerNorm_0" if part == "layer_norm1" else "LayerNorm_1"
                out[block + ln + ("/scale" if leaf == "weight" else "/bias")] = value
            elif part in ("mlp.fc1", "mlp.fc2"):
                dense = "Dense_0" if part == "mlp.fc1" else "Dense_1"
                name = block + "MlpBlock_0/" + dense
                out[name + ("/kernel" if leaf == "weight" else "/bias")] = (
                    value.T if leaf == "weight" else value
                )
            elif part == "self_attn.out_proj":
                out[mha + "out/" + ("kernel" if leaf == "weight" else "bias")] = (
                    out_proj(value) if leaf == "weight" else value
                )
            else:
                proj = {"q": "query", "k": "key", "v": "value"}[part[-6]]
                out[mha + proj + ("/kernel" if leaf == "weight" else "/bias")] = (
                    heads(value) if leaf == "weight" else value.reshape(num_heads, -1)
                )
        elif k.startswith("post_layernorm."):
            leaf = "scale" if k.endswith("weight") else "bias"
            out[pre + "Transformer/encoder_norm/" + leaf] = value
        elif k.startswith("head."):
            out.update(_map_head(k.removeprefix("head."), value, pre, num_heads))
        else:
            raise KeyError(k)
    return out


def _map_head(k: str, value, pre: str, num_heads: int) -> dict:
    head = pre + "MAPHead_0/"
    mha = head + "MultiHeadDotProductAttention_0/"
    if k == "probe":
        return {head + "probe": value}
    if k == "attention.in_proj_weight":
        q, kk, v = np.split(value, 3)
        return {
            mha + f"{n}/kernel": w.T.reshape(w.shape[1], num_heads, -1)
            for n, w in (("query", q), ("key", kk), ("value", v))
        }
    if k == "attention.in_proj_bias":
        parts = np.split(value, 3)
        return {
            mha + f"{n}/bias": b.reshape(num_heads, -1)
            for n, b in zip(("query", "key", "value"), parts, strict=True)
        }
    if k == "attention.out_proj.weight":
        return {mha + "out/kernel": value.T.reshape(num_heads, -1, value.shape[0])}
    if k == "attention.out_proj.bias":
        return {mha + "out/bias": value}
    if k.startswith("layernorm."):
        return {
            head + "LayerNorm_0/" + ("scale" if k.endswith("weight") else "bias"): value
        }
    dense = "Dense_0" if k.startswith("mlp.fc1") else "Dense_1"
    leaf = "kernel" if k.endswith("weight") else "bias"
    return {head + f"MlpBlock_0/{dense}/{leaf}": value.T if leaf == "kernel" else value}


def make(out: str) -> None:
    from transformers import Dinov2Config
    from transformers import Dinov2Model
    from transformers import Dinov2WithRegistersConfig
    from transformers import Dinov2WithRegistersModel
    from transformers import SiglipVisionConfig
    from transformers import SiglipVisionModel

    reg = Dinov2WithRegistersConfig(**SIZE, mlp_ratio=2, num_register_tokens=4)
    _fixture(Dinov2WithRegistersModel(reg), out, "hf_dinov2_reg", seed=21)
    plain = Dinov2Config(**SIZE, mlp_ratio=2)
    _fixture(Dinov2Model(plain), out, "hf_dinov2", seed=22)
    swiglu = Dinov2Config(**SIZE, mlp_ratio=2, use_swiglu_ffn=True)
    _fixture(Dinov2Model(swiglu), out, "hf_dinov2_swiglu", seed=23)
    siglip = SiglipVisionConfig(**SIZE, intermediate_size=64)
    state = _fixture(SiglipVisionModel(siglip), out, "hf_siglip", seed=24)
    _save_npz(f"{out}/bv_siglip.npz", **big_vision_layout(state, num_heads=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(base._guard_torchvision())  # transformers imports torchvision
    torch.manual_seed(0)
    make(args.out)
    for name in sorted(os.listdir(args.out)):
        if name.startswith(("hf_dinov2", "hf_siglip", "bv_")):
            size = os.path.getsize(os.path.join(args.out, name))
            print(f"{name:32s} {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
