"""The hand-written backward passes of the layers, each behind its switch.

Every function here is a forward computation with an `ops.custom_gradient`
whose backward pass is written out, to keep fewer tensors alive (or to do
less work) than differentiating the forward ops one by one. Each computes
the same function as the plain Keras ops it replaces; which layers call it,
and when, is decided by a speed switch (`keras_vit/layers/config.py`):

| function | switch | replaces |
|---|---|---|
| `layer_norm` | `closed_form_layer_norm` | Keras's LayerNormalization op graph |
| `erf_gelu` | `erf_gelu` | `keras.ops.gelu` in training |
| `gelu_then_dense` | `recompute_activations` | GELU, then `Dense` |
| `recomputing_attention` | `recompute_activations` | `softmax(q k^T) v` |
| `quantized_matmul` | (int8 / int4 kernels) | a float matmul |

A backward pass that recomputes a forward value saves memory only if the
recomputation happens in the backward pass: TensorFlow's graph optimiser
merges common subexpressions, and would merge the recomputed ops (the same
ops on the same inputs) with the forward ones, keeping the forward values
alive after all. `after` makes the recomputation's inputs depend on the
incoming gradient, which keeps them apart; TensorFlow's own
`tf.recompute_grad` does the same, with a zero computed from the first
element of the upstream gradient (learned from
`tensorflow/python/ops/custom_gradient.py`).

Tensors, not variables, go into these functions: TensorFlow's custom
gradients flow through the function's inputs, so callers pass
`ops.copy(variable)` (or a cast of it).
"""

from __future__ import annotations

import keras
from keras import ops

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


def _upstream(args, upstream):
    """The incoming gradient, however the backend passes it."""
    return args[0] if upstream is None else upstream


# --- keeping a recomputation apart from the forward pass ---------------------


def tied_zero(upstream):
    """A float32 scalar 0 that the optimiser sees as computed from `upstream`.

    Computed from the first element of `upstream` in a way no optimiser folds,
    and 0 even when that element is NaN or infinite.

    Args:
        upstream: The incoming gradient of a custom backward pass.

    Returns:
        A float32 tensor of shape `()` equal to 0.

    Example:

    >>> zero = tied_zero(keras.ops.ones((2, 3)))  # 0.0
    """
    first = ops.cast(ops.reshape(upstream, (-1,))[:1], "bool")  # (1,)
    zero = ops.where(ops.equal(first, first), 0.0, float("nan"))  # (1,): 0
    return ops.reshape(zero, ())


def after(upstream, *tensors):
    """Returns `tensors` made to depend on `upstream`, values unchanged.

    Each tensor gets `+ tied_zero(upstream)`: ops on the results run after
    `upstream` exists and are not merged with the same ops on the original
    tensors. It costs one pass over each tensor, so tie as few inputs as
    keep the recomputation apart. Tying a scalar constant of the
    recomputation instead is not enough: for `erf(x * (c + zero))` the
    optimiser may split off `x * c`, merge it with the forward pass's, and
    keep it alive (measured: 0.4 GB more for a ViT-S/16 step).

    Args:
        upstream: The incoming gradient of a custom backward pass.
        *tensors: Forward tensors the backward pass recomputes from.

    Returns:
        A tuple of tensors equal to `tensors`.

    Example:

    >>> x, dy = keras.ops.ones((2, 3)), keras.ops.ones((2, 3))
    >>> (x_again,) = after(dy, x)  # equal to x
    """
    zero = tied_zero(upstream)
    return tuple(t + ops.cast(zero, t.dtype) for t in tensors)


# --- closed_form_layer_norm ----------------------------------------------------


def layer_norm(x, gamma, beta, epsilon):
    """Normalizes the last axis of `x`; statistics and gradients in float32.

    The backward pass is the closed form
    `dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sigma` with
    `g = dy * gamma`, from `x_hat` and `1 / sigma` kept from the forward
    pass: 20-30% less time than differentiating the op graph.

    Args:
        x: `(..., D)`, any float dtype.
        gamma, beta: `(D,)` float32 tensors.
        epsilon: Added to the variance.

    Returns:
        The normalized `x` in `x`'s dtype.
    """

    @ops.custom_gradient
    def forward(x, gamma, beta):
        x32 = ops.cast(x, "float32")  # (..., D)
        centred = x32 - ops.mean(x32, axis=-1, keepdims=True)
        inv_sigma = ops.rsqrt(
            ops.mean(ops.square(centred), axis=-1, keepdims=True) + epsilon
        )  # (..., 1)
        normalized = centred * inv_sigma  # (..., D)
        outputs = ops.cast(normalized * gamma + beta, x.dtype)

        def backward(*args, upstream=None):
            dy = ops.cast(_upstream(args, upstream), "float32")  # (..., D)
            rows = tuple(range(len(dy.shape) - 1))
            d_gamma = ops.sum(dy * normalized, axis=rows)  # (D,)
            d_beta = ops.sum(dy, axis=rows)  # (D,)
            g = dy * gamma
            dx = inv_sigma * (
                g
                - ops.mean(g, axis=-1, keepdims=True)
                - normalized * ops.mean(g * normalized, axis=-1, keepdims=True)
            )
            return ops.cast(dx, x.dtype), d_gamma, d_beta

        return outputs, backward

    return forward(x, gamma, beta)


# --- erf_gelu and recompute_activations: the MLP ----------------------------------


def _cdf(x32):
    """`Phi(x)`, the standard normal CDF, in float32."""
    return 0.5 + 0.5 * ops.erf(x32 * _SQRT_HALF)


def _gelu_derivative(x32, cdf):
    """`d/dx [x Phi(x)] = Phi(x) + x phi(x)`, in float32."""
    return cdf + x32 * (_INV_SQRT_2PI * ops.exp(-0.5 * ops.square(x32)))


def erf_gelu(x):
    """`x * Phi(x)` whose backward pass keeps only `x` and recomputes the rest.

    Differentiated op by op, the product `x * (1 + erf(x / sqrt 2)) / 2`
    keeps three tensors of the MLP's width alive until the backward pass
    (`x`, the `erf` argument and the CDF): 0.9 GB of a ViT-S/16 step at batch
    32. Here the gradient `dy * (Phi(x) + x * phi(x))` is recomputed from `x`
    alone (one `erf` and one `exp` more), as PyTorch's GELU backward does.

    Args:
        x: Pre-activations, any float dtype; the `erf` runs in float32.

    Returns:
        A tensor like `x`.
    """

    @ops.custom_gradient
    def forward(x):
        outputs = x * ops.cast(_cdf(ops.cast(x, "float32")), x.dtype)  # (..., M)

        def backward(*args, upstream=None):
            upstream = _upstream(args, upstream)
            # The CDF computed again, not merged with the forward one.
            (x32,) = after(upstream, ops.cast(x, "float32"))
            dx = ops.cast(upstream, "float32") * _gelu_derivative(x32, _cdf(x32))
            return ops.cast(dx, x.dtype)

        return outputs, backward

    return forward(x)


def gelu_then_dense(x, kernel, bias):
    """`gelu(x) @ kernel + bias` whose backward pass recomputes `gelu(x)`.

    The second MLP layer's kernel gradient needs its input, the GELU output,
    so differentiated layer by layer both `x` and `gelu(x)` stay alive until
    the backward pass. Here only `x` does: the backward pass computes the CDF
    once from `x` and uses it for the GELU output (for the kernel gradient)
    and for the GELU derivative. 0.46 GB less for a ViT-S/16 step at batch
    32, for one multiplication more than `erf_gelu`'s backward pass.

    Args:
        x: The first MLP layer's outputs, `(B*N, M)`.
        kernel: The second layer's kernel in the compute dtype, `(M, D)`.
        bias: Its bias in the compute dtype, `(D,)`.

    Returns:
        `(B*N, D)`.
    """

    @ops.custom_gradient
    def forward(x, kernel, bias):
        hidden = x * ops.cast(_cdf(ops.cast(x, "float32")), x.dtype)  # (B*N, M)
        outputs = ops.add(ops.matmul(hidden, kernel), bias)  # (B*N, D)

        def backward(*args, upstream=None):
            upstream = _upstream(args, upstream)
            (x32,) = after(upstream, ops.cast(x, "float32"))  # computed again
            cdf = _cdf(x32)
            hidden = ops.cast(x32 * cdf, x.dtype)  # (B*N, M)
            d_kernel = ops.matmul(ops.transpose(hidden), upstream)  # (M, D)
            d_bias = ops.sum(upstream, axis=0)  # (D,)
            d_hidden = ops.matmul(upstream, ops.transpose(kernel))  # (B*N, M)
            d_x = ops.cast(d_hidden, "float32") * _gelu_derivative(x32, cdf)
            return ops.cast(d_x, x.dtype), d_kernel, d_bias

        return outputs, backward

    return forward(x, kernel, bias)


# --- recompute_activations: the attention core -----------------------------------


def attention_probabilities(query, key, softmax_dtype):
    """`softmax(q k^T)` over the keys, computed in `softmax_dtype`."""
    logits = ops.einsum("bhqd,bhkd->bhqk", query, key)  # (B, H, N, N)
    return ops.softmax(ops.cast(logits, softmax_dtype), axis=-1)


def recomputing_attention(query, key, value, softmax_dtype):
    """`softmax(q k^T) v` whose backward pass recomputes the probabilities.

    Differentiated op by op, the `(B, H, N, N)` probabilities stay alive from
    the forward to the backward pass of every block: 0.36 GB of a ViT-S/16
    training step at batch 32, 0.7 GB of a B/16's. Here only q, k and v are
    kept; the backward pass computes `q k^T` and the softmax again (the same
    ops on the same inputs, so the same values: gradients are unchanged),
    about 3% more FLOPs for a ViT-S/16 step. The idea is FlashAttention's
    (Dao et al., 2022), without its tiling.

    Args:
        query: Scaled queries, `(B, H, N, Dh)`.
        key: Keys, `(B, H, N, Dh)`.
        value: Values, `(B, H, N, Dh)`.
        softmax_dtype: The dtype of the softmax (float32, or bfloat16 with
            the `bfloat16_softmax` switch).

    Returns:
        The context, `(B, H, N, Dh)`, in the inputs' dtype.
    """

    @ops.custom_gradient
    def forward(query, key, value):
        dtype = query.dtype
        probs = attention_probabilities(query, key, softmax_dtype)
        context = ops.einsum("bhqk,bhkd->bhqd", ops.cast(probs, dtype), value)

        def backward(*args, upstream=None):
            d_context = ops.cast(_upstream(args, upstream), dtype)  # (B, H, N, Dh)
            (k,) = after(d_context, key)  # computed again, not merged
            probs = attention_probabilities(query, k, softmax_dtype)
            d_value = ops.einsum("bhqk,bhqd->bhkd", ops.cast(probs, dtype), d_context)
            d_probs = ops.einsum("bhqd,bhkd->bhqk", d_context, value)  # (B, H, N, N)
            d_probs = ops.cast(d_probs, softmax_dtype)
            # The softmax's gradient: p * (dp - sum_k p dp).
            d_logits = probs * (d_probs - ops.sum(d_probs * probs, -1, keepdims=True))
            d_logits = ops.cast(d_logits, dtype)
            d_query = ops.einsum("bhqk,bhkd->bhqd", d_logits, key)
            d_key = ops.einsum("bhqk,bhqd->bhkd", d_logits, query)
            return d_query, d_key, d_value

        return context, backward

    return forward(query, key, value)


# --- int8 / int4 kernels ------------------------------------------------------------


def quantized_matmul(x, kernel, kernel_scale):
    """`x @ (kernel / kernel_scale)` as an int8 matmul, differentiable in `x`.

    The inputs are quantized per row (abs-max, int8) at run time and
    multiplied with the int8 kernel (int32 accumulation); the product is
    divided by both scales, as Keras's quantized `Dense` does. The gradient
    with respect to `x` is that of the dequantized kernel (straight through
    the input quantization); the kernel is frozen and gets none.

    Args:
        x: `(rows, D_in)` in the compute dtype.
        kernel: The int8 kernel `(D_in, D_out)` (int4 already unpacked).
        kernel_scale: Its per-column scale `(D_out,)` in the compute dtype.

    Returns:
        `(rows, D_out)` in `x`'s dtype.
    """
    dtype = x.dtype

    @ops.custom_gradient
    def forward(x):
        values, x_scale = keras.quantizers.abs_max_quantize(x, axis=-1)
        y = ops.cast(ops.matmul(values, kernel), dtype)
        y = ops.divide(y, ops.multiply(x_scale, kernel_scale))

        def backward(*args, upstream=None):
            w = ops.divide(ops.cast(kernel, dtype), kernel_scale)
            return ops.matmul(_upstream(args, upstream), ops.transpose(w))

        return y, backward

    return forward(x)
