"""Independent parameter shapes of the paper's pre-activation ResNets and AlterNets.

Test support only: plain Python, no keras. Written from the PyTorch module
definitions of the official code of Park & Kim, "How Do Vision Transformers
Work?" (github.com/xxxnell/how-do-vits-work, branch `transformer`, commit
9571ff1): `models/preresnet.py`, `models/preresnet_dnn_block.py`
(`BasicBlock`, `Bottleneck`), `models/alternet.py` (`AlterNet._make_layer`,
`AttentionBlockB`, `LocalAttention`, `StemB`), `models/attentions.py`
(`Attention2d`) and `models/classifier_block.py` (`BNGAPBlock`).

`module_shapes` lists every PyTorch parameter (what the code's
`count_parameters` sums) as `(name, shape)`, and every BatchNorm running
statistic as a buffer; keras counts the latter as non-trainable weights.
"""

from __future__ import annotations

import math

# name: (block, blocks per stage, MSA blocks per stage) as in the code's
# constructors (preresnet.dnn_*, alternet.dnn_*). Heads (3, 6, 12, 24),
# dim_head 64 and window 7 are the AlterNet defaults there.
PAPER_PREACT_RESNETS = {
    "18": ("basic", (2, 2, 2, 2)),
    "34": ("basic", (3, 4, 6, 3)),
    "50": ("bottleneck", (3, 4, 6, 3)),
    "101": ("bottleneck", (3, 4, 23, 3)),
    "152": ("bottleneck", (3, 8, 36, 3)),
}
PAPER_ALTERNETS = {
    "18": ("basic", (2, 2, 2, 2), (0, 1, 1, 1)),
    "34": ("basic", (3, 4, 6, 4), (0, 1, 3, 2)),
    "50": ("bottleneck", (3, 4, 6, 4), (0, 1, 3, 2)),
    "101": ("bottleneck", (3, 4, 23, 4), (0, 1, 3, 2)),
    "152": ("bottleneck", (3, 8, 36, 4), (0, 1, 3, 2)),
}


def _bn(name, c):
    # BatchNorm2d: weight, bias (parameters); running mean/var (buffers).
    return [
        (f"{name}.weight", (c,), True),
        (f"{name}.bias", (c,), True),
        (f"{name}.running_mean", (c,), False),
        (f"{name}.running_var", (c,), False),
    ]


def _conv(name, cin, cout, k, bias=False):
    out = [(f"{name}.weight", (cout, cin, k, k), True)]
    if bias:
        out.append((f"{name}.bias", (cout,), True))
    return out


def conv_block(name, cin, channels, stride, block):
    """preresnet_dnn_block.BasicBlock / Bottleneck."""
    expansion = 4 if block == "bottleneck" else 1
    cout = channels * expansion
    shapes = []
    if stride != 1 or cin != cout:
        shapes += _conv(f"{name}.shortcut.0", cin, cout, 1)
    shapes += _bn(f"{name}.bn", cin)
    if block == "bottleneck":
        shapes += _conv(f"{name}.conv1", cin, channels, 1)
        shapes += _bn(f"{name}.conv2.0", channels)
        shapes += _conv(f"{name}.conv2.2", channels, channels, 3)
        shapes += _bn(f"{name}.conv3.0", channels)
        shapes += _conv(f"{name}.conv3.2", channels, cout, 1)
    else:
        shapes += _conv(f"{name}.conv1", cin, channels, 3)
        shapes += _bn(f"{name}.conv2.0", channels)
        shapes += _conv(f"{name}.conv2.2", channels, cout, 3)
    return shapes, cout


def msa_block(name, cin, channels, heads, dim_head, window, block):
    """alternet.AttentionBlockB (bottleneck) / AttentionBasicBlockB (basic)."""
    expansion = 4 if block == "bottleneck" else 1
    cout = channels * expansion
    width = cin // expansion
    inner = heads * dim_head
    shapes = []
    if cin != cout:
        shapes += _conv(f"{name}.shortcut.0", cin, cout, 1)
    shapes += _bn(f"{name}.norm1", cin)
    shapes += _conv(f"{name}.conv", cin, width, 1)
    shapes += _bn(f"{name}.norm2", width)
    shapes += _conv(f"{name}.attn.attn.to_q", width, inner, 1)
    shapes += _conv(f"{name}.attn.attn.to_kv", width, 2 * inner, 1)
    shapes += _conv(f"{name}.attn.attn.to_out.0", inner, cout, 1, bias=True)
    shapes.append((f"{name}.attn.pos_embedding", window, True))
    return shapes, cout


def module_shapes(
    block,
    depths,
    msa=None,
    *,
    num_classes=1000,
    stem=True,
    widths=(64, 128, 256, 512),
    stem_width=64,
    heads=(3, 6, 12, 24),
    dim_head=64,
    windows=None,
    in_channels=3,
):
    """`(name, shape, is_parameter)` of every tensor of the model.

    `windows` gives each stage's `(2h-1, 2w-1)` relative-bias table shape,
    i.e. the attention window of that stage (default 7x7 everywhere).
    """
    msa = msa or (0,) * len(depths)
    windows = windows or [(13, 13)] * len(depths)
    stem_k = 7 if stem else 3
    shapes = _conv("layer0.0", in_channels, stem_width, stem_k)
    cin = stem_width
    for s, (n1, n2) in enumerate(zip(depths, msa, strict=True)):
        alt = [False] * (n1 - 2 * n2) + [False, True] * n2
        for b, is_msa in enumerate(alt):
            name = f"layer{s + 1}.{b}"
            stride = 2 if s > 0 and b == 0 else 1
            if is_msa:
                new, cin = msa_block(
                    name, cin, widths[s], heads[s], dim_head, windows[s], block
                )
            else:
                new, cin = conv_block(name, cin, widths[s], stride, block)
            shapes += new
    shapes += _bn("classifier.0.bn", cin)
    shapes += [
        ("classifier.0.dense.weight", (num_classes, cin), True),
        ("classifier.0.dense.bias", (num_classes,), True),
    ]
    return shapes


def count(shapes, parameters_only=False):
    """Total elements; with `parameters_only`, PyTorch's parameter count."""
    return sum(
        math.prod(shape)
        for _, shape, is_param in shapes
        if is_param or not parameters_only
    )


# --- float64 forward passes (NHWC, HWIO kernels, PyTorch padding) -------------


def conv2d(x, kernel, stride=1, bias=None):
    """PyTorch `Conv2d(padding=k // 2)` on NHWC `x` with an HWIO kernel."""
    import numpy as np

    k = kernel.shape[0]
    pad = k // 2
    x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    h = (x.shape[1] - k) // stride + 1
    w = (x.shape[2] - k) // stride + 1
    out = np.zeros((x.shape[0], h, w, kernel.shape[-1]))
    for i in range(k):
        for j in range(k):
            patch = x[:, i : i + stride * h : stride, j : j + stride * w : stride]
            out += patch @ kernel[i, j]
    return out if bias is None else out + bias


def batch_norm(x, p, eps=1e-5):
    """Inference BatchNorm2d with `p = (gamma, beta, mean, var)`."""
    gamma, beta, mean, var = p
    return (x - mean) / (var + eps) ** 0.5 * gamma + beta


def preact_block_forward(x, p, stride, bottleneck):
    """preresnet_dnn_block.Bottleneck / BasicBlock, inference mode."""
    import numpy as np

    relu = lambda t: np.maximum(t, 0)  # noqa: E731
    inputs = x
    x = relu(batch_norm(x, p["bn"]))
    skip = conv2d(x, p["shortcut"], stride) if "shortcut" in p else None
    if bottleneck:
        y = conv2d(x, p["conv1"])
        y = conv2d(relu(batch_norm(y, p["bn2"])), p["conv2"], stride)
        y = conv2d(relu(batch_norm(y, p["bn3"])), p["conv3"])
    else:
        y = conv2d(x, p["conv1"], stride)
        y = conv2d(relu(batch_norm(y, p["bn2"])), p["conv2"])
    return y + (skip if skip is not None else inputs)


def msa_block_forward(x, p, heads, window):
    """alternet.AttentionBlockB with LocalAttention, inference mode."""
    import numpy as np
    from scipy.special import erf

    inputs = x
    x = batch_norm(x, p["norm1"])
    x = x * 0.5 * (1 + erf(x / 2**0.5))  # nn.GELU
    skip = conv2d(x, p["shortcut"]) if "shortcut" in p else inputs
    x = batch_norm(conv2d(x, p["conv"]), p["norm2"])
    b, h, w, _ = x.shape
    inner = p["to_q"].shape[-1]
    dh = inner // heads
    q_all, kv_all = conv2d(x, p["to_q"]), conv2d(x, p["to_kv"])
    coords = [(r, c) for r in range(window) for c in range(window)]
    table = p["pos_embedding"]
    bias = np.array(
        [[table[k[0] - q[0] + window - 1, k[1] - q[1] + window - 1] for k in coords]
         for q in coords]
    )  # fmt: skip
    ctx = np.zeros((b, h, w, inner))
    for i in range(0, h, window):
        for j in range(0, w, window):
            sl = (slice(None), slice(i, i + window), slice(j, j + window))

            def split(t):
                return t.reshape(b, -1, heads, dh).transpose(0, 2, 1, 3)

            q = split(q_all[sl])
            k = split(kv_all[sl][..., :inner])
            v = split(kv_all[sl][..., inner:])
            dots = q @ k.transpose(0, 1, 3, 2) * dh**-0.5 + bias
            attn = np.exp(dots - dots.max(-1, keepdims=True))
            attn /= attn.sum(-1, keepdims=True)
            out = (attn @ v).transpose(0, 2, 1, 3).reshape(b, window, window, inner)
            ctx[sl] = out
    return conv2d(ctx, p["to_out"], bias=p["to_out_bias"]) + skip
