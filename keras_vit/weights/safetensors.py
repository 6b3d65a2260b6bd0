"""Reads `.safetensors` checkpoints (timm, Hugging Face) with NumPy only.

The format is an 8-byte little-endian header length, a JSON header
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{...}}`, then the raw little-endian tensor bytes. `read_safetensors` parses
it without the `safetensors` package (bfloat16 and float8 through
`ml_dtypes`, which Keras already depends on), and `to_original_layout`
translates the PyTorch key layouts of timm's `VisionTransformer` and of
Hugging Face's `ViTModel` / `ViTForImageClassification` into the original
`.npz` layout that the rest of `keras_vit.weights` speaks.

PyTorch stores a linear layer's weight as `(out, in)` and a convolution's
as `(out, in, height, width)`; the original layout uses `(in, out)` and
`(height, width, in, out)`, and splits the attention projections per head.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

from keras_vit.weights.errors import CheckpointError

_MAX_HEADER_BYTES = 100 * 2**20


def _dtypes() -> dict[str, np.dtype]:
    import ml_dtypes

    return {
        "F64": np.dtype("<f8"),
        "F32": np.dtype("<f4"),
        "F16": np.dtype("<f2"),
        "BF16": np.dtype(ml_dtypes.bfloat16),
        "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
        "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
        "I64": np.dtype("<i8"),
        "I32": np.dtype("<i4"),
        "I16": np.dtype("<i2"),
        "I8": np.dtype("i1"),
        "U8": np.dtype("u1"),
        "BOOL": np.dtype("?"),
    }


def read_safetensors(
    path: str | os.PathLike, *, float32: bool = True
) -> dict[str, np.ndarray]:
    """Reads every tensor of a `.safetensors` file into NumPy.

    Args:
        path: The file.
        float32: Convert floating-point tensors (including bfloat16 and
            float8) to float32. Defaults to `True`.

    Returns:
        `{name: array}`, in the file's order.

    Raises:
        CheckpointError: for a truncated or malformed file, naming the
            tensor at fault where there is one.

    Example:

    ```python
    tensors = read_safetensors("model.safetensors")
    tensors["cls_token"].shape  # (1, 1, 768)
    ```
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path!r} is too short to be a safetensors file.")
        header_size = int.from_bytes(prefix, "little")
        if header_size > min(size - 8, _MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path!r} is not a valid safetensors file: its header claims "
                f"{header_size} bytes but the file has {size}."
            )
        try:
            header = json.loads(f.read(header_size).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(
                f"{path!r} is not a valid safetensors file: unreadable header "
                f"({error})."
            ) from error
    if not isinstance(header, dict):
        raise CheckpointError(f"{path!r}: the safetensors header is not a JSON object.")
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    dtypes = _dtypes()
    tensors = {}
    for name, info in header.items():
        try:
            dtype = dtypes[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"{path!r}: the header entry of {name!r} is malformed or has an "
                f"unsupported dtype ({info!r})."
            ) from error
        nbytes = math.prod(shape) * dtype.itemsize
        if not 0 <= begin <= end <= data.size or end - begin != nbytes:
            raise CheckpointError(
                f"{path!r}: tensor {name!r} {shape} {info['dtype']} needs {nbytes} "
                f"bytes at [{begin}, {end}) but the data section has "
                f"{data.size}; the file is truncated or corrupt."
            )
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        if float32 and array.dtype.kind not in "iub":
            array = array.astype(np.float32)
        else:
            array = array.copy()
        tensors[name] = array
    del data
    return tensors


# --------------------------------------------------------------------------
# Key layouts: timm and Hugging Face -> the original .npz layout.
# --------------------------------------------------------------------------


def _linear(weight):  # (out, in) -> (in, out)
    return np.transpose(weight)


def _batched(table):  # (N, D) -> (1, N, D)
    return table[None] if table.ndim == 2 else table


def _conv(weight):  # (out, in, h, w) -> (h, w, in, out)
    return np.transpose(weight, (2, 3, 1, 0))


def _heads(weight, num_heads):  # (D_out, D_in) -> (D_in, H, D_out / H)
    if num_heads is None or weight.shape[0] % num_heads:
        return np.transpose(weight)  # left 2-D: reported as mis-shaped
    return np.transpose(weight).reshape(weight.shape[1], num_heads, -1)


def _head_bias(bias, num_heads):  # (D,) -> (H, D / H)
    if num_heads is None or bias.shape[0] % num_heads:
        return bias
    return bias.reshape(num_heads, -1)


def _out_proj(weight, num_heads):  # (D_out, D_in) -> (H, D_in / H, D_out)
    if num_heads is None or weight.shape[1] % num_heads:
        return np.transpose(weight)
    return np.transpose(weight).reshape(num_heads, -1, weight.shape[0])


_BLOCK = "Transformer/encoderblock_{i}"
_MHA = _BLOCK + "/MultiHeadDotProductAttention_1"
_LN0, _LN2 = _BLOCK + "/LayerNorm_0", _BLOCK + "/LayerNorm_2"
_FC0, _FC1 = _BLOCK + "/MlpBlock_3/Dense_0", _BLOCK + "/MlpBlock_3/Dense_1"
_UNIT = "block{s}/unit{u}"
_MAP = "MAPHead_0"
_MAP_MHA = _MAP + "/MultiHeadDotProductAttention_0"
_AP = r"attn_pool\."

# timm `VisionTransformer` (and its hybrid `HybridEmbed` + `ResNetV2`).
# (regex, original-layout key template, conversion)
_T = r"blocks\.(?P<i>\d+)\."
_R = r"patch_embed\.backbone\."
_S = _R + r"stages\.(?P<s>\d+)\.blocks\.(?P<u>\d+)\."
_TIMM = (
    (r"cls_token", "cls", None),
    (r"dist_token", "dist", None),
    (r"reg_token", "reg", None),
    (r"pos_embed", "Transformer/posembed_input/pos_embedding", None),
    (r"patch_embed\.proj\.weight", "embedding/kernel", _conv),
    (r"patch_embed\.proj\.bias", "embedding/bias", None),
    (_T + r"norm1\.weight", _LN0 + "/scale", None),
    (_T + r"norm1\.bias", _LN0 + "/bias", None),
    (_T + r"norm2\.weight", _LN2 + "/scale", None),
    (_T + r"norm2\.bias", _LN2 + "/bias", None),
    (_T + r"attn\.qkv\.weight", "qkv-weight", None),
    (_T + r"attn\.qkv\.bias", "qkv-bias", None),
    (_T + r"attn\.proj\.weight", _MHA + "/out/kernel", _out_proj),
    (_T + r"attn\.proj\.bias", _MHA + "/out/bias", None),
    (_T + r"attn\.q_norm\.weight", _MHA + "/query_norm/scale", None),
    (_T + r"attn\.q_norm\.bias", _MHA + "/query_norm/bias", None),
    (_T + r"attn\.k_norm\.weight", _MHA + "/key_norm/scale", None),
    (_T + r"attn\.k_norm\.bias", _MHA + "/key_norm/bias", None),
    (_T + r"ls1\.gamma", _BLOCK + "/LayerScale_0/scale", None),
    (_T + r"ls2\.gamma", _BLOCK + "/LayerScale_1/scale", None),
    (_T + r"mlp\.fc1\.weight", _FC0 + "/kernel", _linear),
    (_T + r"mlp\.fc1\.bias", _FC0 + "/bias", None),
    (_T + r"mlp\.fc2\.weight", _FC1 + "/kernel", _linear),
    (_T + r"mlp\.fc2\.bias", _FC1 + "/bias", None),
    (r"norm\.weight", "Transformer/encoder_norm/scale", None),
    (r"norm\.bias", "Transformer/encoder_norm/bias", None),
    (r"head\.weight", "head/kernel", _linear),
    (r"head\.bias", "head/bias", None),
    (r"fc_norm\.weight", "fc_norm/scale", None),
    (r"fc_norm\.bias", "fc_norm/bias", None),
    (r"head_dist\.weight", "head_dist/kernel", _linear),
    (r"head_dist\.bias", "head_dist/bias", None),
    # `AttentionPoolLatent` (global_pool="map") -> big_vision's `MAPHead`.
    (_AP + r"latent", _MAP + "/probe", None),
    (_AP + r"q\.weight", _MAP_MHA + "/query/kernel", "heads"),
    (_AP + r"q\.bias", _MAP_MHA + "/query/bias", "head_bias"),
    (_AP + r"kv\.weight", "kv-weight", None),
    (_AP + r"kv\.bias", "kv-bias", None),
    (_AP + r"proj\.weight", _MAP_MHA + "/out/kernel", _out_proj),
    (_AP + r"proj\.bias", _MAP_MHA + "/out/bias", None),
    (_AP + r"norm\.weight", _MAP + "/LayerNorm_0/scale", None),
    (_AP + r"norm\.bias", _MAP + "/LayerNorm_0/bias", None),
    (_AP + r"mlp\.fc1\.weight", _MAP + "/MlpBlock_0/Dense_0/kernel", _linear),
    (_AP + r"mlp\.fc1\.bias", _MAP + "/MlpBlock_0/Dense_0/bias", None),
    (_AP + r"mlp\.fc2\.weight", _MAP + "/MlpBlock_0/Dense_1/kernel", _linear),
    (_AP + r"mlp\.fc2\.bias", _MAP + "/MlpBlock_0/Dense_1/bias", None),
    (_R + r"stem\.conv\.weight", "conv_root/kernel", _conv),
    (_R + r"stem\.norm\.weight", "gn_root/scale", None),
    (_R + r"stem\.norm\.bias", "gn_root/bias", None),
    (_S + r"conv(?P<n>\d)\.weight", _UNIT + "/conv{n}/kernel", _conv),
    (_S + r"norm(?P<n>\d)\.weight", _UNIT + "/gn{n}/scale", None),
    (_S + r"norm(?P<n>\d)\.bias", _UNIT + "/gn{n}/bias", None),
    (_S + r"downsample\.conv\.weight", _UNIT + "/conv_proj/kernel", _conv),
    (_S + r"downsample\.norm\.weight", _UNIT + "/gn_proj/scale", None),
    (_S + r"downsample\.norm\.bias", _UNIT + "/gn_proj/bias", None),
)

# Hugging Face `ViTModel` / `ViTForImageClassification`: the hub layout
# (`encoder.layer.{i}.attention.attention.query`) and the in-memory names of
# transformers 5 (`layers.{i}.attention.q_proj`); `Dinov2Model` /
# `Dinov2WithRegistersModel` (`norm1`, `layer_scale1.lambda1`, `mlp.fc1` or
# the SwiGLU `mlp.weights_in`); `SiglipVisionModel` (`encoder.layers.{i}`,
# `self_attn.q_proj`, a position table without batch axis, and the
# attention-pooling `head` with torch's packed `in_proj_weight`).
_H = r"(?:encoder\.layers?|layers)\.(?P<i>\d+)\."
_QKV_NAME = (
    r"(?:attention\.attention\.(?P<qkv>query|key|value)"
    r"|(?:attention|self_attn)\.(?P<p>[qkv])_proj)"
)
_OUT_NAME = r"(?:attention\.(?:output\.dense|o_proj)|self_attn\.out_proj)"
_FC1_NAME = r"(?:intermediate\.dense|mlp\.fc1|mlp\.weights_in)"
_FC2_NAME = r"(?:output\.dense|mlp\.fc2|mlp\.weights_out)"
_HEAD = r"head\."
_HF = (
    (r"embeddings\.cls_token", "cls", None),
    (r"embeddings\.position_embeddings", "Transformer/posembed_input/pos_embedding",
     None),
    (r"embeddings\.patch_embeddings\.projection\.weight", "embedding/kernel", _conv),
    (r"embeddings\.patch_embeddings\.projection\.bias", "embedding/bias", None),
    (r"embeddings\.patch_embedding\.weight", "embedding/kernel", _conv),
    (r"embeddings\.patch_embedding\.bias", "embedding/bias", None),
    (r"embeddings\.position_embedding\.weight",
     "Transformer/posembed_input/pos_embedding", _batched),
    (r"embeddings\.register_tokens", "reg", None),
    (r"embeddings\.mask_token", "dropped", None),  # pre-training only
    # A whole `SiglipModel`: its text tower and the loss's scale and bias.
    (r"text_model\..+|logit_(?:scale|bias)", "dropped", None),
    (_H + r"(?:layernorm_before|norm1|layer_norm1)\.weight", _LN0 + "/scale", None),
    (_H + r"(?:layernorm_before|norm1|layer_norm1)\.bias", _LN0 + "/bias", None),
    (_H + r"(?:layernorm_after|norm2|layer_norm2)\.weight", _LN2 + "/scale", None),
    (_H + r"(?:layernorm_after|norm2|layer_norm2)\.bias", _LN2 + "/bias", None),
    (_H + _QKV_NAME + r"\.weight", _MHA + "/{qkv}/kernel", "heads"),
    (_H + _QKV_NAME + r"\.bias", _MHA + "/{qkv}/bias", "head_bias"),
    (_H + _OUT_NAME + r"\.weight", _MHA + "/out/kernel", _out_proj),
    (_H + _OUT_NAME + r"\.bias", _MHA + "/out/bias", None),
    (_H + r"layer_scale1\.lambda1", _BLOCK + "/LayerScale_0/scale", None),
    (_H + r"layer_scale2\.lambda1", _BLOCK + "/LayerScale_1/scale", None),
    (_H + _FC1_NAME + r"\.weight", _FC0 + "/kernel", _linear),
    (_H + _FC1_NAME + r"\.bias", _FC0 + "/bias", None),
    (_H + _FC2_NAME + r"\.weight", _FC1 + "/kernel", _linear),
    (_H + _FC2_NAME + r"\.bias", _FC1 + "/bias", None),
    (r"(?:layernorm|post_layernorm)\.weight", "Transformer/encoder_norm/scale", None),
    (r"(?:layernorm|post_layernorm)\.bias", "Transformer/encoder_norm/bias", None),
    # SigLIP's `SiglipMultiheadAttentionPoolingHead` -> big_vision's `MAPHead`.
    (_HEAD + r"probe", _MAP + "/probe", None),
    (_HEAD + r"attention\.in_proj_weight", "map-qkv-weight", None),
    (_HEAD + r"attention\.in_proj_bias", "map-qkv-bias", None),
    (_HEAD + r"attention\.out_proj\.weight", _MAP_MHA + "/out/kernel", _out_proj),
    (_HEAD + r"attention\.out_proj\.bias", _MAP_MHA + "/out/bias", None),
    (_HEAD + r"layernorm\.weight", _MAP + "/LayerNorm_0/scale", None),
    (_HEAD + r"layernorm\.bias", _MAP + "/LayerNorm_0/bias", None),
    (_HEAD + r"mlp\.fc1\.weight", _MAP + "/MlpBlock_0/Dense_0/kernel", _linear),
    (_HEAD + r"mlp\.fc1\.bias", _MAP + "/MlpBlock_0/Dense_0/bias", None),
    (_HEAD + r"mlp\.fc2\.weight", _MAP + "/MlpBlock_0/Dense_1/kernel", _linear),
    (_HEAD + r"mlp\.fc2\.bias", _MAP + "/MlpBlock_0/Dense_1/bias", None),
    (r"pooler\.dense\.weight", "pre_logits/kernel", _linear),
    (r"pooler\.dense\.bias", "pre_logits/bias", None),
    (r"classifier\.weight", "head/kernel", _linear),
    (r"classifier\.bias", "head/bias", None),
)  # fmt: skip

# big_vision's `models/vit.py` under the image tower of
# `proj/image_text/two_towers.py` (`params/img/...`): the position table at
# the top (`pos_embedding`), blocks numbered `LayerNorm_0/1`,
# `MultiHeadDotProductAttention_0`, `MlpBlock_0`, and the `MAPHead_0` of
# `pool_type="map"` in the original layout already. Kernels are Flax's: no
# transposition. A scanned model (`encoderblock/`, stacked over depth) is
# unstacked first (`_unscan`).
_B = r"Transformer/encoderblock_(?P<i>\d+)/"
_BIG_VISION = (
    (r"embedding/(?P<leaf>kernel|bias)", "embedding/{leaf}", None),
    (r"cls", "cls", None),
    (r"pos_embedding", "Transformer/posembed_input/pos_embedding", None),
    (_B + r"LayerNorm_0/(?P<leaf>scale|bias)", _LN0 + "/{leaf}", None),
    (_B + r"LayerNorm_1/(?P<leaf>scale|bias)", _LN2 + "/{leaf}", None),
    (_B + r"MultiHeadDotProductAttention_0/(?P<leaf>(?:query|key|value|out)/"
     r"(?:kernel|bias))", _MHA + "/{leaf}", None),
    (_B + r"MlpBlock_0/(?P<leaf>Dense_[01]/(?:kernel|bias))",
     _BLOCK + "/MlpBlock_3/{leaf}", None),
    (r"Transformer/encoder_norm/(?P<leaf>scale|bias)",
     "Transformer/encoder_norm/{leaf}", None),
    (r"(?P<leaf>MAPHead_0/.+)", "{leaf}", None),
    (r"head/(?P<leaf>kernel|bias)", "head/{leaf}", None),
)  # fmt: skip
_BIG_VISION_PREFIX = re.compile(r"^(?:params/)?img/")
# The other parts of a two-towers checkpoint: the text tower and the
# temperature / bias of the sigmoid loss.
_BIG_VISION_OTHER = re.compile(r"^(?:params/)?(?:txt/|t$|b$)")

_QKV = {"q": "query", "k": "key", "v": "value"}
_INDEX_SHIFT = ("s", "u")  # timm counts stages and units from 0, the original from 1


def detect_layout(tensors) -> str:
    """Returns `"timm"`, `"huggingface"` or `"big_vision"` for a key set.

    Raises:
        CheckpointError: for any other key layout.
    """
    keys = list(tensors)
    if any(k == "pos_embed" or k.startswith(("blocks.", "patch_embed.")) for k in keys):
        return "timm"
    if any("embeddings.patch_embedding" in k for k in keys):
        return "huggingface"
    if is_big_vision(keys):
        return "big_vision"
    raise CheckpointError(
        "Unrecognised safetensors key layout: expected timm (`pos_embed`, "
        "`blocks.0.attn.qkv.weight`, ...) or Hugging Face "
        "(`vit.embeddings.patch_embeddings...`) keys. First keys: "
        f"{keys[:5]}"
    )


def is_big_vision(keys) -> bool:
    """Whether checkpoint keys are a big_vision two-towers image tower."""
    return any(_BIG_VISION_PREFIX.match(k) for k in keys)


def to_original_layout(
    tensors: dict[str, np.ndarray], num_heads: int | None
) -> dict[str, np.ndarray]:
    """Translates timm or Hugging Face tensors into the original layout.

    Keys that match no rule are passed through unchanged, so that the strict
    check reports them as unexpected.

    Args:
        tensors: `{name: array}` from `read_safetensors`.
        num_heads: Attention heads of the target model; PyTorch checkpoints
            store the projections as `(D, D)` matrices and the original layout
            splits them per head.

    Returns:
        `{key: array}` in the original `.npz` layout.
    """
    layout = detect_layout(tensors)
    rules = {"timm": _TIMM, "huggingface": _HF, "big_vision": _BIG_VISION}[layout]
    compiled = [(re.compile(pattern), key, convert) for pattern, key, convert in rules]
    if layout == "big_vision":
        tensors = _unscan(
            {
                _BIG_VISION_PREFIX.sub("", k): v
                for k, v in tensors.items()
                if not _BIG_VISION_OTHER.match(k)
            }
        )
    out = {}
    for name, value in tensors.items():
        stripped = name
        if layout == "huggingface":
            stripped = re.sub(r"^(?:vit\.|model\.|dinov2\.|vision_model\.)", "", name)
        for regex, template, convert in compiled:
            match = regex.fullmatch(stripped)
            if match is None:
                continue
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            for field in _INDEX_SHIFT:
                if field in groups:
                    groups[field] = str(int(groups[field]) + 1)
            if "p" in groups:
                groups["qkv"] = _QKV[groups.pop("p")]
            if template in ("qkv-weight", "qkv-bias"):
                out.update(_split_qkv(value, groups["i"], template, num_heads))
                break
            if template in ("kv-weight", "kv-bias"):
                out.update(_split_kv(value, template, num_heads))
                break
            if template in ("map-qkv-weight", "map-qkv-bias"):
                out.update(_split_map_qkv(value, template, num_heads))
                break
            if template == "dropped":
                break
            key = template.format(**groups)
            if convert == "heads":
                value = _heads(value, num_heads)
            elif convert == "head_bias":
                value = _head_bias(value, num_heads)
            elif convert is _out_proj:
                value = _out_proj(value, num_heads)
            elif convert is not None:
                value = convert(value)
            out[key] = value
            break
        else:
            out[name] = value
    if layout == "huggingface" and any("layer_scale1.lambda1" in k for k in tensors):
        fold_class_position(out)
    return out


def fold_class_position(params: dict) -> None:
    """HF DINOv2: the class token's position row moves into the token.

    Hugging Face's `Dinov2Model` keeps a class-token row in its position
    table; the DINOv2 family here (as timm) has a table of the patches only
    (`no_embed_class`). Adding the row to the class token once is exact: the
    class token is the same for every image, and the registers are inserted
    after the position embedding in both.
    """
    key = "Transformer/posembed_input/pos_embedding"
    table, cls = params.get(key), params.get("cls")
    if (
        table is None
        or cls is None
        or table.ndim != 3
        or cls.shape != table[:, :1].shape
    ):
        return  # left as it is: the strict check reports the shapes
    params["cls"] = cls + table[:, :1]
    params[key] = table[:, 1:]


def _unscan(tensors: dict) -> dict:
    """big_vision's scanned `Transformer/encoderblock/...` -> one key per block."""
    out = {}
    for key, value in tensors.items():
        prefix = "Transformer/encoderblock/"
        if not key.startswith(prefix):
            out[key] = value
            continue
        for i, part in enumerate(np.asarray(value)):
            out[f"Transformer/encoderblock_{i}/{key[len(prefix) :]}"] = part
    return out


def _split_map_qkv(value, kind, num_heads):
    """SigLIP's packed `in_proj` `(3D, D)` / `(3D,)` -> the MAP head's q, k, v."""
    if value.shape[0] % 3:
        return {f"{_MAP_MHA}/in_proj/{kind}": value}  # reported as unexpected
    out = {}
    names = ("query", "key", "value")
    for name, part in zip(names, np.split(value, 3, axis=0), strict=True):
        if kind == "map-qkv-weight":
            out[f"{_MAP_MHA}/{name}/kernel"] = _heads(part, num_heads)
        else:
            out[f"{_MAP_MHA}/{name}/bias"] = _head_bias(part, num_heads)
    return out


def _split_qkv(value, block, kind, num_heads):
    """timm's fused `qkv` `(3D, D)` weight / `(3D,)` bias -> q, k, v keys."""
    prefix = _MHA.format(i=block)
    if value.shape[0] % 3:
        return {f"{prefix}/qkv/{kind}": value}  # reported as unexpected
    parts = np.split(value, 3, axis=0)
    out = {}
    for name, part in zip(("query", "key", "value"), parts, strict=True):
        if kind == "qkv-weight":
            out[f"{prefix}/{name}/kernel"] = _heads(part, num_heads)
        else:
            out[f"{prefix}/{name}/bias"] = _head_bias(part, num_heads)
    return out


def _split_kv(value, kind, num_heads):
    """The attention pool's fused `kv` `(2D, D)` weight / `(2D,)` bias -> key, value."""
    if value.shape[0] % 2:
        return {f"{_MAP_MHA}/kv/{kind}": value}  # reported as unexpected
    out = {}
    for name, part in zip(("key", "value"), np.split(value, 2, axis=0), strict=True):
        if kind == "kv-weight":
            out[f"{_MAP_MHA}/{name}/kernel"] = _heads(part, num_heads)
        else:
            out[f"{_MAP_MHA}/{name}/bias"] = _head_bias(part, num_heads)
    return out
