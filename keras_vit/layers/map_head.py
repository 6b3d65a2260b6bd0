"""Multi-head attention pooling (MAP): a learned probe attends to the tokens."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers.layer_norm import LAYER_NORM_EPSILON
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.transformer_block import gelu


@export("keras_vit.layers.MAPHead")
@keras.saving.register_keras_serializable(package="keras_vit")
class MAPHead(keras.layers.Layer):
    """Pools a token sequence by attention from one learned query (the probe).

    `y = MHA(probe, x)` over the patch tokens (prefix tokens left out), then
    `y = y + MLP(LN(y))`; the output is `y` for the single probe. This is
    big_vision's `MAPHead` (`pool_type="map"`, used by SigLIP) and timm's
    `AttentionPoolLatent` with one latent; their keys map onto this layer's
    variables (`keras_vit.weights`).

    Args:
        num_heads: Attention heads; must divide the width.
        mlp_dim: Hidden width of the MLP.
        num_prefix_tokens: Leading tokens (class, registers) left out of the
            pooled set. Defaults to 0.
        layer_norm_epsilon: Defaults to 1e-6.
        gelu_approximate: Use the tanh GELU in the MLP. Defaults to `False`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.

    Returns:
        Tensor of shape `(batch, dim)`.

    Example:

    >>> head = keras_vit.layers.MAPHead(num_heads=12, mlp_dim=3072)
    >>> head(np.zeros((2, 196, 768), "float32")).shape
    (2, 768)

    Reference:
    - [Zhai et al., 2022](https://arxiv.org/abs/2106.04560), "Scaling Vision
      Transformers", §3.2 (MAP head).
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        num_prefix_tokens: int = 0,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        gelu_approximate: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_heads) <= 0 or int(mlp_dim) <= 0:
            raise ValueError(
                "`num_heads` and `mlp_dim` must be positive. Received: "
                f"num_heads={num_heads}, mlp_dim={mlp_dim}"
            )
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)
        policy = self.dtype_policy
        self.norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, name="norm", dtype=policy
        )
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim, name="mlp_dense_1", dtype=policy
        )

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(
                f"The width {dim} is not divisible by num_heads={self.num_heads}."
            )
        heads, head_dim = self.num_heads, dim // self.num_heads
        self.head_dim = head_dim
        glorot = keras.initializers.GlorotUniform()

        def init(count, shape):
            def fn(_, dtype=None):
                parts = [glorot((dim, dim), dtype) for _ in range(count)]
                return ops.reshape(ops.stack(parts, axis=1), shape)

            return fn

        self.probe = self.add_weight(
            name="probe", shape=(1, 1, dim), initializer=glorot
        )
        self.query_kernel = self.add_weight(
            name="query_kernel",
            shape=(dim, heads, head_dim),
            initializer=init(1, (dim, heads, head_dim)),
        )
        self.query_bias = self.add_weight(
            name="query_bias", shape=(heads, head_dim), initializer="zeros"
        )
        self.kv_kernel = self.add_weight(
            name="kv_kernel",
            shape=(dim, 2, heads, head_dim),
            initializer=init(2, (dim, 2, heads, head_dim)),
        )
        self.kv_bias = self.add_weight(
            name="kv_bias", shape=(2, heads, head_dim), initializer="zeros"
        )
        self.out_kernel = self.add_weight(
            name="out_kernel",
            shape=(heads, head_dim, dim),
            initializer=init(1, (heads, head_dim, dim)),
        )
        self.out_bias = self.add_weight(
            name="out_bias", shape=(dim,), initializer="zeros"
        )
        self.norm.build((None, dim))
        self.mlp_dense_1.build((None, dim))
        self.mlp_dense_2 = keras.layers.Dense(
            dim, name="mlp_dense_2", dtype=self.dtype_policy
        )
        self.mlp_dense_2.build((None, self.mlp_dim))

    def call(self, inputs, training=None):
        x = inputs[:, self.num_prefix_tokens :]  # (B, N, D)
        dtype = keras.backend.standardize_dtype(x.dtype)
        heads, head_dim = self.num_heads, self.head_dim
        dim = heads * head_dim
        batch_size, length = ops.shape(x)[0], ops.shape(x)[1]
        probe = ops.reshape(ops.cast(self.probe, dtype), (1, dim))
        query = ops.matmul(
            probe, ops.reshape(ops.cast(self.query_kernel, dtype), (dim, dim))
        )
        query = query + ops.reshape(ops.cast(self.query_bias, dtype), (dim,))
        query = ops.reshape(query, (heads, 1, head_dim))  # (H, 1, Dh)
        kv_kernel = ops.reshape(ops.cast(self.kv_kernel, dtype), (dim, 2 * dim))
        kv = ops.add(
            ops.matmul(ops.reshape(x, (-1, dim)), kv_kernel),
            ops.reshape(ops.cast(self.kv_bias, dtype), (2 * dim,)),
        )  # (B*N, 2D)
        kv = ops.reshape(kv, (batch_size, length, 2, heads, head_dim))
        kv = ops.transpose(kv, (2, 0, 3, 1, 4))  # (2, B, H, N, Dh)
        key, value = ops.unstack(kv, 2, axis=0)  # (B, H, N, Dh) each
        query = query * ops.cast(head_dim**-0.5, dtype)
        logits = ops.einsum("hqd,bhkd->bhqk", query, key)  # (B, H, 1, N)
        probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), dtype)
        context = ops.einsum("bhqk,bhkd->bqhd", probs, value)  # (B, 1, H, Dh)
        context = ops.reshape(context, (-1, dim))  # (B, D)
        out_kernel = ops.reshape(ops.cast(self.out_kernel, dtype), (dim, dim))
        y = ops.matmul(context, out_kernel) + ops.cast(self.out_bias, dtype)  # (B, D)
        z = self.mlp_dense_1(self.norm(y, training=training))  # (B, mlp_dim)
        z = gelu(z, self.gelu_approximate, training)
        return y + self.mlp_dense_2(z)  # (B, D)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "num_prefix_tokens": self.num_prefix_tokens,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "gelu_approximate": self.gelu_approximate,
            }
        )
        return config
