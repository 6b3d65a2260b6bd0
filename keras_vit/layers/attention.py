"""Multi-head self-attention with a fused query/key/value projection."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit.layers.config import use_bfloat16_softmax
from keras_vit.layers.config import use_fused_attention
from keras_vit.layers.layer_norm import LayerNorm


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head scaled dot-product self-attention (the paper's MSA).

    `[q, k, v] = z U_qkv`, `A = softmax(q k^T / sqrt(D_h))`, heads concatenated
    and projected back to `D`. The three input projections are one matrix
    multiplication: the kernel has shape `(D, 3, heads, D_h)`, i.e. the
    original checkpoints' `query`, `key` and `value` kernels `(D, heads, D_h)`
    stacked on axis 1, and the output kernel has their `out` shape
    `(heads, D_h, D)`.

    The layer is written for speed on the CPU (see `docs/performance.md`):
    every projection is one 2-D matrix multiplication followed by
    `keras.ops.add` of the bias, which TensorFlow's graph optimiser fuses into
    a single oneDNN kernel; queries, keys and values are moved to a head-major
    `(batch, heads, tokens, head_dim)` layout with one transpose, so both
    attention products are plain batched matrix multiplications. On the JAX
    and PyTorch backends, when no scores are requested and no attention
    dropout is active, the layer calls `keras.ops.dot_product_attention`,
    which reaches their fused (flash) kernels (switch:
    `keras_vit.layers.fused_attention`). Everywhere else the softmax
    runs in float32, except under a bfloat16 compute dtype when no scores are
    requested: bfloat16 has float32's exponent range and oneDNN's bfloat16
    softmax accumulates in float32, so the probabilities are the same values
    as float32's rounded to bfloat16, without two casts of the
    `(B, H, N, N)` logits each way (5% of a ViT-Ti/16 bfloat16 training
    step; switch: `keras_vit.layers.bfloat16_softmax`).

    Args:
        num_heads: Number of attention heads; must divide the input width.
        attention_dropout_rate: Dropout on the attention probabilities.
            Defaults to 0.
        kernel_initializer: Initializer of each `(D, D)` projection kernel.
            Defaults to `"glorot_uniform"` (Xavier, as the reference).
        bias_initializer: Defaults to `"zeros"`.
        qk_norm: Normalise queries and keys per head with a LayerNorm over
            the head dimension (learned scale and bias, epsilon 1e-6) before
            the dot product, as timm's `Attention(qk_norm=True)`. Defaults to
            `False` (no extra ops).
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.
        training: Python bool; dropout is only active when `True`.
        return_attention_scores: If `True`, also return the attention
            probabilities of shape `(batch, heads, tokens, tokens)`.

    Example:

    >>> layer = keras_vit.layers.MultiHeadSelfAttention(num_heads=12)
    >>> out, scores = layer(
    ...     np.zeros((2, 197, 768), "float32"), return_attention_scores=True)
    >>> out.shape, scores.shape
    ((2, 197, 768), (2, 12, 197, 197))
    """

    def __init__(
        self,
        num_heads: int,
        attention_dropout_rate: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        qk_norm: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_heads) <= 0:
            raise ValueError(
                f"`num_heads` must be positive. Received: num_heads={num_heads}"
            )
        if not 0.0 <= attention_dropout_rate < 1.0:
            raise ValueError(
                "`attention_dropout_rate` must be in [0, 1). Received: "
                f"attention_dropout_rate={attention_dropout_rate}"
            )
        self.num_heads = int(num_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_dropout = keras.layers.Dropout(
            self.attention_dropout_rate, name="attention_dropout"
        )
        self.qk_norm = bool(qk_norm)
        if self.qk_norm:
            policy = self.dtype_policy
            self.query_norm = LayerNorm(epsilon=1e-6, name="query_norm", dtype=policy)
            self.key_norm = LayerNorm(epsilon=1e-6, name="key_norm", dtype=policy)

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(
                f"The width {dim} is not divisible by num_heads={self.num_heads}."
            )
        self.head_dim = dim // self.num_heads
        heads, head_dim = self.num_heads, self.head_dim

        def projections(count, shape):
            # Each (D, D) projection gets its own fan-in/fan-out, as separate
            # Dense layers would.
            def init(_, dtype=None):
                init_one = self.kernel_initializer
                parts = [init_one((dim, dim), dtype) for _ in range(count)]
                return ops.reshape(ops.stack(parts, axis=1), shape)

            return init

        self.qkv_kernel = self.add_weight(
            name="qkv_kernel",
            shape=(dim, 3, heads, head_dim),
            initializer=projections(3, (dim, 3, heads, head_dim)),
        )
        self.qkv_bias = self.add_weight(
            name="qkv_bias",
            shape=(3, heads, head_dim),
            initializer=self.bias_initializer,
        )
        self.out_kernel = self.add_weight(
            name="out_kernel",
            shape=(heads, head_dim, dim),
            initializer=projections(1, (heads, head_dim, dim)),
        )
        self.out_bias = self.add_weight(
            name="out_bias", shape=(dim,), initializer=self.bias_initializer
        )
        if self.qk_norm:
            self.query_norm.build((None, None, head_dim))
            self.key_norm.build((None, None, head_dim))

    def call(self, inputs, training=None, return_attention_scores=False):
        heads, head_dim = self.num_heads, self.head_dim
        dim = heads * head_dim
        batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        # 2-D matmul + `ops.add` (a BiasAdd on TensorFlow): one fused kernel.
        kernel = ops.reshape(ops.cast(self.qkv_kernel, dtype), (dim, 3 * dim))
        bias = ops.reshape(ops.cast(self.qkv_bias, dtype), (3 * dim,))
        qkv = ops.add(ops.matmul(ops.reshape(inputs, (-1, dim)), kernel), bias)
        qkv = ops.reshape(qkv, (batch_size, length, 3, heads, head_dim))
        if self.qk_norm:
            query = self.query_norm(qkv[:, :, 0], training=training)
            key = self.key_norm(qkv[:, :, 1], training=training)
            qkv = ops.stack([query, key, qkv[:, :, 2]], axis=2)  # (B, N, 3, H, Dh)

        use_dropout = training and self.attention_dropout_rate > 0
        fused = use_fused_attention()
        if fused and not (return_attention_scores or use_dropout):
            query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            context = ops.dot_product_attention(query, key, value)  # (B, N, H, Dh)
            scores = None
        else:
            qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))  # (3, B, H, N, Dh)
            # Unstack, not three slices: on TensorFlow the gradient of a slice
            # writes a zero-filled (3, B, H, N, Dh) tensor per slice and adds
            # the three up (12% of a ViT-S/16 training step); unstack's
            # gradient is a single stack.
            query, key, value = ops.unstack(qkv, 3, axis=0)  # (B, H, N, Dh) each
            query = query * ops.cast(head_dim**-0.5, dtype)
            logits = ops.einsum("bhqd,bhkd->bhqk", query, key)  # (B, H, N, N)
            in_bfloat16 = use_bfloat16_softmax() and dtype == "bfloat16"
            in_bfloat16 = in_bfloat16 and not return_attention_scores
            softmax_dtype = dtype if in_bfloat16 else "float32"
            scores = ops.softmax(ops.cast(logits, softmax_dtype), axis=-1)
            probs = ops.cast(self.attention_dropout(scores, training=training), dtype)
            context = ops.einsum("bhqk,bhkd->bhqd", probs, value)  # (B, H, N, Dh)
            context = ops.transpose(context, (0, 2, 1, 3))  # (B, N, H, Dh)

        context = ops.reshape(context, (-1, dim))  # (B*N, D)
        out_kernel = ops.reshape(ops.cast(self.out_kernel, dtype), (dim, dim))
        out_bias = ops.cast(self.out_bias, dtype)
        outputs = ops.add(ops.matmul(context, out_kernel), out_bias)  # (B*N, D)
        outputs = ops.reshape(outputs, (batch_size, length, dim))  # (B, N, D)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False):
        outputs = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, length = inputs.shape[0], inputs.shape[1]
        scores = keras.KerasTensor((batch, self.num_heads, length, length), "float32")
        return outputs, scores

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "attention_dropout_rate": self.attention_dropout_rate,
                "kernel_initializer": keras.initializers.serialize(
                    self.kernel_initializer
                ),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "qk_norm": self.qk_norm,
            }
        )
        return config
