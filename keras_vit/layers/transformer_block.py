"""One encoder block: MSA and MLP sub-blocks with residuals (Eq. 2-3).

Pre-LN as in the paper, or res-post-norm (each branch normalised at its
output: timm's `ResPostBlock`, Swin V2's).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit import keras_internals
from keras_vit._export import export
from keras_vit.layers import custom_grads
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.config import use_erf_gelu
from keras_vit.layers.config import use_recompute_activations
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.kinds import MLP_KINDS
from keras_vit.layers.kinds import NORM_KINDS
from keras_vit.layers.layer_norm import LAYER_NORM_EPSILON
from keras_vit.layers.layer_norm import norm_layer
from keras_vit.layers.layer_scale import LayerScale

# The sublayers `model.quantize` can change (see `sublayer_dtypes`).
SUBLAYERS_WITH_DTYPES = ("attention", "mlp_dense_1", "mlp_dense_2")


def gelu(x, approximate: bool = False, training: bool | None = None):
    """GELU of `x`, the exact-erf form unless `approximate` (tanh).

    In inference this is `keras.ops.gelu`, which TensorFlow's graph optimiser
    fuses into the preceding matmul and bias add. In training that fusion
    cannot happen (the backward pass needs the pre-activation), and the exact
    form is computed as `x * (1 + erf(x / sqrt(2))) / 2` with the `erf` in
    float32: the same function, with fewer and cheaper ops in the forward
    and backward passes than TensorFlow's `gelu` (whose bfloat16 `erfc` and
    `exp` are slow), 20-45% less time for the pair. The two forms agree to
    5e-7 (the far negative tail, where `1 + erf` rounds). The switch
    `keras_vit.layers.erf_gelu` turns the training form off (on by default).

    Args:
        x: Pre-activations, any float dtype.
        approximate: Use the tanh approximation.
        training: Whether the call is a training step.

    Returns:
        A tensor like `x`.

    Example:

    >>> gelu(keras.ops.convert_to_tensor([0.0, 1.0]))  # [0, 0.8413]
    """
    erf_form = use_erf_gelu()
    if approximate or not (training and erf_form):
        return ops.gelu(x, approximate=approximate)
    return custom_grads.erf_gelu(x)


@export("keras_vit.layers.TransformerBlock")
@keras.saving.register_keras_serializable(package="keras_vit")
class TransformerBlock(keras.layers.Layer):
    """A pre-LayerNorm (or res-post-norm) Transformer encoder block.

    `z' = MSA(LN(z)) + z` then `z_out = MLP(LN(z')) + z'`, where the MLP is
    two dense layers with a GELU between them. With `res_post_norm`, each
    branch is normalised at its output instead: `z' = LN(MSA(z)) + z`, `z_out
    = LN(MLP(z')) + z'` (timm's `ResPostBlock`, Swin V2's res-post-norm).
    Dropout follows the attention output and each MLP dense layer, as in the
    reference; stochastic depth (`drop_path_rate`) drops each residual branch
    per example.

    Args:
        num_heads: Number of attention heads.
        mlp_dim: Width of the MLP's hidden layer.
        dropout_rate: Dropout after attention and in the MLP. Defaults to 0.
        attention_dropout_rate: Dropout on the attention probabilities.
            Defaults to 0.
        drop_path_rate: Stochastic-depth rate of both branches. Defaults to 0.
        layer_norm_epsilon: Defaults to 1e-6, as in the paper's checkpoints.
        gelu_approximate: Use the tanh approximation of GELU (what the JAX
            reference computes) instead of the exact erf form of the paper.
            Defaults to `False`.
        layer_scale_init: With a value (e.g. `1e-5`), each branch is scaled
            per channel by a `LayerScale` starting at that value before the
            residual addition (CaiT, DeiT III, DINOv2; timm's `init_values`).
            Defaults to `None` (no scale).
        qk_norm: LayerNorm on queries and keys per head (timm's `qk_norm`).
            Defaults to `False`.
        qkv_bias: Learned query, key and value biases in the attention
            (timm's `qkv_bias`). Defaults to `True`.
        proj_bias: Learned biases on the attention's output projection and
            on both MLP layers (timm's `proj_bias`, which sets all three).
            Defaults to `True`.
        mlp: `"gelu"` (default): `Dense(mlp_dim) -> GELU -> Dense(dim)`.
            `"swiglu"`: `Dense(2 * mlp_dim)`, split in halves `a, b`,
            `silu(a) * b`, then `Dense(dim)` (timm's `SwiGLUPacked`, used by
            DINOv2-g; EVA-02 and DINOv3's `SwiGLU` with separate gate and
            value layers computes the same).
        rope: Rotary position embeddings in the attention
            (`keras_vit.models.options.RotaryOptions` or its dict); the call
            then takes the patch coordinates. Defaults to `None`.
        attention_norm: A LayerNorm over the attention's merged heads before
            its output projection (EVA-02-CLIP). Defaults to `False`.
        mlp_norm: A LayerNorm over the MLP's hidden units before its output
            layer (EVA-02's `scale_mlp`). Defaults to `False`.
        res_post_norm: Normalise each branch's output (`norm_1` after the
            attention, `norm_2` after the MLP) rather than its input. A
            `layer_scale_init` then adds no `LayerScale`: it is the initial
            scale of those two norms (timm's `ResPostBlock` with
            `init_values`). Defaults to `False`.
        norm: The kind of every norm of the block (both pre-norms, the
            query/key, attention and MLP norms): `"layer"` (LayerNorm;
            default) or `"rms"` (RMSNorm: AIMv2). `layer_norm_epsilon` is
            their epsilon either way.
        sublayer_dtypes: `{sublayer name: dtype policy name}` for the
            sublayers whose policy differs from the block's, e.g.
            `{"attention": "int8_from_float32"}`. `model.quantize` changes
            the sublayers' policies; `get_config` records them here, so that
            a saved quantized model is rebuilt quantized. Defaults to `None`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.
        training: Python bool enabling dropout and stochastic depth.
        return_attention_scores: If `True`, return `(outputs, scores)` with
            scores of shape `(batch, heads, tokens, tokens)`.
        return_intermediates: If `True`, return `(outputs, intermediates)`,
            the block's own record of its internals (as big_vision's
            `Encoder1DBlock` returns its `out` dict), so that analyses never
            replay the block by hand: `"scores"` (attention probabilities
            `(batch, heads, tokens, tokens)`, float32), `"attention"` (the
            attention branch after dropout, `(batch, tokens, dim)`),
            `"after_attention"` (`inputs` plus that branch, the state between
            the two residual sub-blocks), `"mlp"` (the MLP branch) and
            `"outputs"`.

    Example:

    >>> block = keras_vit.layers.TransformerBlock(num_heads=12, mlp_dim=3072)
    >>> block(np.zeros((2, 197, 768), "float32")).shape
    (2, 197, 768)
    >>> _, out = block(np.zeros((2, 197, 768), "float32"),
    ...                return_intermediates=True)
    >>> out["scores"].shape, out["after_attention"].shape
    ((2, 12, 197, 197), (2, 197, 768))

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929), Eq. 2-3.
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        gelu_approximate: bool = False,
        layer_scale_init: float | None = None,
        qk_norm: bool = False,
        qkv_bias: bool | str = True,
        mlp: str = "gelu",
        rope=None,
        attention_norm: bool = False,
        mlp_norm: bool = False,
        norm: str = "layer",
        proj_bias: bool = True,
        res_post_norm: bool = False,
        sublayer_dtypes: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(mlp_dim) <= 0:
            raise ValueError(f"`mlp_dim` must be positive. Received: mlp_dim={mlp_dim}")
        if mlp not in MLP_KINDS:
            raise ValueError(f"`mlp` must be one of {MLP_KINDS}. Received: mlp={mlp!r}")
        if norm not in NORM_KINDS:
            raise ValueError(
                f"`norm` must be one of {NORM_KINDS}. Received: norm={norm!r}"
            )
        self.norm = norm
        self.proj_bias = bool(proj_bias)
        self.res_post_norm = bool(res_post_norm)
        self.layer_scale_init = (
            None if layer_scale_init is None else float(layer_scale_init)
        )
        self.qk_norm = bool(qk_norm)
        self.qkv_bias = qkv_bias if qkv_bias == "qv" else bool(qkv_bias)
        self.mlp = mlp
        self.rope = None if rope is None else _rope_dict(rope)
        self.attention_norm = bool(attention_norm)
        self.mlp_norm = bool(mlp_norm)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.drop_path_rate = float(drop_path_rate)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.gelu_approximate = bool(gelu_approximate)

        self.sublayer_dtypes = dict(sublayer_dtypes or {})
        unknown = set(self.sublayer_dtypes) - set(SUBLAYERS_WITH_DTYPES)
        if unknown:
            raise ValueError(
                f"`sublayer_dtypes` names unknown sublayers {sorted(unknown)}; "
                f"known: {SUBLAYERS_WITH_DTYPES}."
            )
        policy = self.dtype_policy

        def dtype_of(name):
            return self.sublayer_dtypes.get(name, policy)

        epsilon = self.layer_norm_epsilon
        self.norm_1 = norm_layer(norm, epsilon, name="norm_1", dtype=policy)
        self.attention = MultiHeadSelfAttention(
            self.num_heads,
            attention_dropout_rate=self.attention_dropout_rate,
            qk_norm=self.qk_norm,
            qkv_bias=self.qkv_bias,
            rope=self.rope,
            attention_norm=self.attention_norm,
            layer_norm_epsilon=self.layer_norm_epsilon,
            norm=self.norm,
            proj_bias=self.proj_bias,
            name="attention",
            dtype=dtype_of("attention"),
        )
        self.attention_output_dropout = keras.layers.Dropout(
            self.dropout_rate, name="attention_output_dropout", dtype=policy
        )
        self.norm_2 = norm_layer(norm, epsilon, name="norm_2", dtype=policy)
        # The reference initialises MLP biases from normal(1e-6).
        self.mlp_dense_1 = keras.layers.Dense(
            self.mlp_dim * (2 if self.mlp == "swiglu" else 1),
            use_bias=self.proj_bias,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            name="mlp_dense_1",
            dtype=dtype_of("mlp_dense_1"),
        )
        self.mlp_dropout_1 = keras.layers.Dropout(
            self.dropout_rate, name="mlp_dropout_1", dtype=policy
        )
        self.mlp_dropout_2 = keras.layers.Dropout(
            self.dropout_rate, name="mlp_dropout_2", dtype=policy
        )
        if self.mlp_norm:
            self.mlp_hidden_norm = norm_layer(
                norm, epsilon, name="mlp_norm", dtype=policy
            )
        self.drop_path = DropPath(self.drop_path_rate, name="drop_path", dtype=policy)
        if self.layer_scale_init is not None and not self.res_post_norm:
            init = self.layer_scale_init
            self.layer_scale_1 = LayerScale(init, name="layer_scale_1", dtype=policy)
            self.layer_scale_2 = LayerScale(init, name="layer_scale_2", dtype=policy)

    def build(self, input_shape):
        dim = input_shape[-1]
        self.norm_1.build(input_shape)
        self.attention.build(input_shape)
        self.norm_2.build(input_shape)
        self.mlp_dense_1.build(input_shape)
        self.mlp_dense_2 = keras.layers.Dense(
            dim,
            use_bias=self.proj_bias,
            kernel_initializer="glorot_uniform",
            bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
            name="mlp_dense_2",
            dtype=self.sublayer_dtypes.get("mlp_dense_2", self.dtype_policy),
        )
        self.mlp_dense_2.build((*input_shape[:-1], self.mlp_dim))
        if self.mlp_norm:
            self.mlp_hidden_norm.build((None, self.mlp_dim))
        if self.layer_scale_init is not None:
            if self.res_post_norm:  # the post-norms start at that scale
                for norm in (self.norm_1, self.norm_2):
                    # LayerNorm's `gamma`, or RMSNorm's `scale`
                    scale = norm.gamma if hasattr(norm, "gamma") else norm.scale
                    scale.assign(ops.full(scale.shape, self.layer_scale_init))
            else:
                self.layer_scale_1.build(input_shape)
                self.layer_scale_2.build(input_shape)
        # Weightless, but built: `model.quantize` refuses unbuilt layers.
        for layer in (
            self.attention_output_dropout,
            self.mlp_dropout_1,
            self.mlp_dropout_2,
            self.drop_path,
        ):
            layer.build(input_shape)

    def call(
        self,
        inputs,
        training=None,
        return_attention_scores=False,
        return_intermediates=False,
        rope=None,
    ):
        with_scores = return_attention_scores or return_intermediates
        post = self.res_post_norm
        x = inputs if post else self.norm_1(inputs, training=training)
        extra = {} if self.rope is None else {"rope": rope}
        if with_scores:
            x, scores = self.attention(
                x, training=training, return_attention_scores=True, **extra
            )  # (B, N, D), (B, H, N, N)
        else:
            x = self.attention(x, training=training, **extra)  # (B, N, D)
        x = self.attention_output_dropout(x, training=training)
        if post:
            x = self.norm_1(x, training=training)
        elif self.layer_scale_init is not None:
            x = self.layer_scale_1(x)
        attention = self.drop_path(x, training=training)
        x = inputs + attention  # (B, N, D)

        # The MLP runs on (B*N, D) rows: a 2-D matmul, bias add and GELU are
        # fused into one oneDNN kernel by TensorFlow's graph optimiser.
        shape = ops.shape(x)
        y = x if post else self.norm_2(x, training=training)
        y = ops.reshape(y, (-1, shape[-1]))  # (B*N, D)
        y = self.mlp_dense_1(y)  # (B*N, mlp_dim)
        if self.mlp == "swiglu":
            gate, y = ops.split(y, 2, axis=-1)  # (B*N, mlp_dim) each
            y = ops.silu(gate) * y
        fused = self._gelu_dense_weights(training, y.dtype)
        if fused is not None:
            dtype = keras.backend.standardize_dtype(y.dtype)
            # Tensors, not the variables: the gradient then flows through the
            # function's inputs (TensorFlow's custom gradients need that).
            kernel, bias = (ops.cast(ops.copy(v), dtype) for v in fused)  # (M, D), (D,)
            y = custom_grads.gelu_then_dense(y, kernel, bias)  # (B*N, D)
        else:
            if self.mlp != "swiglu":
                y = gelu(y, self.gelu_approximate, training)
            y = self.mlp_dropout_1(y, training=training)
            if self.mlp_norm:
                y = self.mlp_hidden_norm(y, training=training)
            y = self.mlp_dense_2(y)  # (B*N, D)
        y = self.mlp_dropout_2(ops.reshape(y, shape), training=training)  # (B, N, D)
        if post:
            y = self.norm_2(y, training=training)
        elif self.layer_scale_init is not None:
            y = self.layer_scale_2(y)
        mlp = self.drop_path(y, training=training)
        outputs = x + mlp  # (B, N, D)
        if return_intermediates:
            return outputs, {
                "scores": scores,
                "attention": attention,
                "after_attention": x,
                "mlp": mlp,
                "outputs": outputs,
            }
        if return_attention_scores:
            return outputs, scores
        return outputs

    def _gelu_dense_weights(self, training, dtype):
        """`mlp_dense_2`'s `(kernel, bias)` if this call fuses the GELU into it.

        In training with `recompute_activations` and `erf_gelu` on, an exact
        GELU MLP without dropout between its layers computes GELU and the
        second layer in one function (`custom_grads.gelu_then_dense`) that
        reads the layer's variables instead of calling it. That is only
        exact for a plain float `Dense`, which
        `keras_internals.plain_dense_weights` checks against an allow-list:
        any other state (LoRA, a quantized kernel, a mode a later Keras adds)
        gives `None`, and the layer is called.
        """
        if not (training and use_recompute_activations() and use_erf_gelu()):
            return None
        if self.mlp != "gelu" or self.gelu_approximate or self.mlp_dropout_1.rate:
            return None
        if self.mlp_norm:
            return None
        return keras_internals.plain_dense_weights(self.mlp_dense_2, dtype)

    def rematerialized_call(self, layer_call, *args, **kwargs):
        """`keras.RematScope` support: recompute the block in the backward pass.

        TensorFlow's `recompute_grad` takes no keyword arguments inside a
        `tf.function` (`training`, ...), so they are bound before it.
        """
        if super().rematerialized_call(layer_call, *args, **kwargs) is layer_call:
            return layer_call

        def call(inputs, *rest, **options):
            def forward(x):
                return layer_call(x, *rest, **options)

            return keras.remat(forward)(inputs)

        return call

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(
        self,
        inputs,
        training=None,
        return_attention_scores=False,
        return_intermediates=False,
        rope=None,
    ):
        # Same shapes as the attention sub-block: (B, N, D) and (B, H, N, N).
        if not return_intermediates:
            return self.attention.compute_output_spec(
                inputs, return_attention_scores=return_attention_scores
            )
        outputs, scores = self.attention.compute_output_spec(
            inputs, return_attention_scores=True
        )
        tokens = {
            key: keras.KerasTensor(outputs.shape, outputs.dtype)
            for key in ("attention", "after_attention", "mlp", "outputs")
        }
        return outputs, {"scores": scores, **tokens}

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "drop_path_rate": self.drop_path_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "gelu_approximate": self.gelu_approximate,
                "layer_scale_init": self.layer_scale_init,
                "qk_norm": self.qk_norm,
                "qkv_bias": self.qkv_bias,
                "mlp": self.mlp,
                "rope": self.rope,
                "attention_norm": self.attention_norm,
                "mlp_norm": self.mlp_norm,
                "norm": self.norm,
                "proj_bias": self.proj_bias,
                "res_post_norm": self.res_post_norm,
            }
        )
        own = self.dtype_policy.name
        dtypes = dict(self.sublayer_dtypes)
        for name in SUBLAYERS_WITH_DTYPES:
            layer = getattr(self, name, None)
            if layer is not None and layer.dtype_policy.name != own:
                dtypes[name] = layer.dtype_policy.name
        config["sublayer_dtypes"] = dtypes or None
        return config


def _rope_dict(rope) -> dict:
    """A `RotaryOptions` (or its dict) as the JSON-able dict a config keeps."""
    if isinstance(rope, dict):
        config = dict(rope)
    else:
        config = rope.get_config()
    if config.get("reference_grid") is not None:
        config["reference_grid"] = list(config["reference_grid"])
    return config
