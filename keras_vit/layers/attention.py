"""Multi-head self-attention with a fused query/key/value projection."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.layers import custom_grads
from keras_vit.layers import rotary
from keras_vit.layers.attention_adapters import PROJECTIONS
from keras_vit.layers.attention_adapters import QKV  # noqa: F401  (importable here too)
from keras_vit.layers.attention_adapters import QUANTIZATION_MODES  # noqa: F401  (here too)
from keras_vit.layers.attention_adapters import FusedKernelAdapters
from keras_vit.layers.config import use_bfloat16_softmax
from keras_vit.layers.config import use_fused_attention
from keras_vit.layers.config import use_recompute_activations
from keras_vit.layers.kinds import NORM_KINDS
from keras_vit.layers.layer_norm import LAYER_NORM_EPSILON
from keras_vit.layers.layer_norm import norm_layer
from keras_vit.utils import subset_of


@export("keras_vit.layers.MultiHeadSelfAttention")
@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(FusedKernelAdapters, keras.layers.Layer):
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

    Fine-tuning follows Keras's `Dense`/`EinsumDense` contracts for the two
    kernels (`keras_vit/layers/attention_adapters.py`, `docs/finetuning.md`):
    `enable_lora` adds float32 adapters `A (D, r)`, `B (r, D)` per projection
    (B zero-initialised, so the layer starts unchanged) and freezes the
    kernels; `quantize("int8")` and `quantize("int4")` store each kernel per
    output channel (abs-max, int4 packed two per byte) and quantize the
    inputs per row at run time.

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
        qkv_bias: Add a learned bias to the queries, keys and values (the
            `qkv_bias` variable, `(3, heads, D_h)`). `False` leaves it out,
            as timm's `Attention(qkv_bias=False)`; `"qv"` biases the queries
            and values only (the `qv_bias` variable, `(2, heads, D_h)`: EVA's
            attention, whose key bias is a constant zero, which matters once
            keys are rotated). Defaults to `True`.
        proj_bias: Add a learned bias to the output projection (the
            `out_bias` variable, `(D,)`). `False` leaves it out, as timm's
            `Attention(proj_bias=False)` (AIMv2). Defaults to `True`.
        rope: Rotary position embeddings on the patch tokens' queries and
            keys: a `keras_vit.models.options.RotaryOptions` or its dict
            (`kind`, `temperature`, `rotate_half`; the coordinates come in
            the call). `"mixed"` adds the learned `rope_freqs` variable
            `(2, heads, D_h / 2)`. Defaults to `None`.
        attention_norm: A LayerNorm over the merged heads before the output
            projection (EVA-02-CLIP's `scale_attn_inner`; the `norm`
            sublayer). Defaults to `False`.
        layer_norm_epsilon: The epsilon of the query/key and attention norms.
            Defaults to 1e-6.
        norm: The kind of those norms: `"layer"` (LayerNorm, with a bias;
            default) or `"rms"` (RMSNorm, a scale only).
        lora_rank: With a rank, low-rank adapters are added to the
            projections named in `lora_targets` when the layer is built (as
            `keras.layers.Dense(lora_rank=...)`); see `enable_lora`.
            Defaults to `None`.
        lora_alpha: LoRA scale numerator: each update is
            `(lora_alpha / lora_rank) A B`. Defaults to `lora_rank`.
        lora_targets: Projections that get adapters, among `"query"`,
            `"key"`, `"value"` and `"out"`. Defaults to all four.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Tensor of shape `(batch, tokens, dim)`.
        rope: With rotary embeddings, the patch coordinates `(patches, 2)`
            (`keras_vit.layers.RotaryCoordinates`); the tokens before the
            last `patches` (class, registers) are not rotated.
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
        qkv_bias: bool | str = True,
        rope=None,
        attention_norm: bool = False,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        norm: str = "layer",
        proj_bias: bool = True,
        lora_rank: int | None = None,
        lora_alpha: float | None = None,
        lora_targets=PROJECTIONS,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if qkv_bias not in (True, False, "qv"):
            raise ValueError(
                "`qkv_bias` must be True, False or 'qv'. "
                f"Received: qkv_bias={qkv_bias!r}"
            )
        if int(num_heads) <= 0:
            raise ValueError(
                f"`num_heads` must be positive. Received: num_heads={num_heads}"
            )
        if norm not in NORM_KINDS:
            raise ValueError(f"`norm` must be one of {NORM_KINDS}. Received: {norm!r}")
        if not 0.0 <= attention_dropout_rate < 1.0:
            raise ValueError(
                "`attention_dropout_rate` must be in [0, 1). Received: "
                f"attention_dropout_rate={attention_dropout_rate}"
            )
        self.num_heads = int(num_heads)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        # The flag; `self.qkv_bias` is the variable (None without it).
        self.use_qkv_bias = qkv_bias if qkv_bias == "qv" else bool(qkv_bias)
        # The flag; `self.out_bias` is the variable (None without it).
        self.use_proj_bias = bool(proj_bias)
        # The kind of its norms (`self.norm` is the attention norm itself).
        self.norm_kind = norm
        self.rope = None if rope is None else dict(_rope_config(rope))
        self.attention_norm = bool(attention_norm)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        # A seed generator, not a Dropout sublayer: without sublayers (unless
        # `qk_norm`) the layer is a leaf, which `model.quantize` requires.
        if self.attention_dropout_rate > 0:
            self.seed_generator = keras.random.SeedGenerator()
        self.lora_rank = None if lora_rank is None else int(lora_rank)
        self.lora_alpha = lora_alpha
        self.lora_targets = subset_of(lora_targets, PROJECTIONS, "lora_targets")
        self.lora_enabled = False
        self.qk_norm = bool(qk_norm)
        # The norms stay in float when the layer is (re)built quantized,
        # e.g. under "int8_from_float32": its float source policy.
        policy = self.dtype_policy.name.split("_from_")[-1]
        epsilon = self.layer_norm_epsilon
        if self.qk_norm:
            self.query_norm = norm_layer(norm, epsilon, name="query_norm", dtype=policy)
            self.key_norm = norm_layer(norm, epsilon, name="key_norm", dtype=policy)
        if self.attention_norm:
            self.norm = norm_layer(norm, epsilon, name="norm", dtype=policy)

    def build(self, input_shape):
        dim = input_shape[-1]
        if dim % self.num_heads:
            raise ValueError(
                f"The width {dim} is not divisible by num_heads={self.num_heads}."
            )
        self.head_dim = dim // self.num_heads
        heads, head_dim = self.num_heads, self.head_dim
        # Variables in the order of the original checkpoints' layout.
        if self.quantization_mode is not None:
            self.quantized_build(input_shape, self.quantization_mode)
        else:
            self.qkv_kernel = self.add_weight(
                name="qkv_kernel",
                shape=(dim, 3, heads, head_dim),
                initializer=self._projections(dim, 3, (dim, 3, heads, head_dim)),
            )
        self.qkv_bias = None
        if self.use_qkv_bias == "qv":  # the key's bias is a constant zero
            self.qkv_bias = self.add_weight(
                name="qv_bias",
                shape=(2, heads, head_dim),
                initializer=self.bias_initializer,
            )
        elif self.use_qkv_bias:
            self.qkv_bias = self.add_weight(
                name="qkv_bias",
                shape=(3, heads, head_dim),
                initializer=self.bias_initializer,
            )
        if self.quantization_mode is None:
            self.out_kernel = self.add_weight(
                name="out_kernel",
                shape=(heads, head_dim, dim),
                initializer=self._projections(dim, 1, (heads, head_dim, dim)),
            )
        self.out_bias = None
        if self.use_proj_bias:
            self.out_bias = self.add_weight(
                name="out_bias", shape=(dim,), initializer=self.bias_initializer
            )
        if self.qk_norm:
            self.query_norm.build((None, None, head_dim))
            self.key_norm.build((None, None, head_dim))
        if self.attention_norm:
            self.norm.build((None, dim))
        self.rope_freqs = None
        self._rope_frequencies = None
        if self.rope is not None:
            kind, temperature = self.rope["kind"], self.rope["temperature"]
            if head_dim % 4:
                raise ValueError(
                    f"Rotary embeddings need a head width divisible by 4; "
                    f"{dim} / {heads} heads = {head_dim}."
                )
            if kind == "mixed":
                self.rope_freqs = self.add_weight(
                    name="rope_freqs",
                    shape=(2, heads, head_dim // 2),
                    initializer=_MixedFrequencies(temperature),
                    dtype="float32",
                )
            else:
                self._rope_frequencies = rotary.fixed_frequencies(
                    kind, head_dim, temperature
                )  # (D_h / 4,)
        self.built = True
        if self.lora_rank:
            self.enable_lora(self.lora_rank, self.lora_alpha, self.lora_targets)

    def _projections(self, dim, count, shape):
        """Initialises `count` stacked `(D, D)` projections, each with its own
        fan-in and fan-out, as separate Dense layers would."""

        def init(_, dtype=None):
            parts = [self.kernel_initializer((dim, dim), dtype) for _ in range(count)]
            return ops.reshape(ops.stack(parts, axis=1), shape)

        return init

    def call(self, inputs, training=None, return_attention_scores=False, rope=None):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        qkv_fn, out_fn = self._float_projections(dtype)  # LoRA added, if any
        return self._attend(
            inputs, qkv_fn, out_fn, training, return_attention_scores, rope
        )

    def _attend(
        self, inputs, qkv_fn, out_fn, training, return_attention_scores, rope=None
    ):
        """The forward pass, with the projections `qkv_fn` and `out_fn` of the
        `(B*N, D)` rows (float or quantized kernels)."""
        heads, head_dim = self.num_heads, self.head_dim
        dim = heads * head_dim
        batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        qkv = qkv_fn(ops.reshape(inputs, (-1, dim)))  # (B*N, 3D)
        if self.qkv_bias is not None:
            bias = ops.cast(self.qkv_bias, dtype)  # (3, H, Dh), or (2, H, Dh)
            if self.use_qkv_bias == "qv":  # the key's bias is a constant zero
                bias = ops.concatenate([bias[:1], ops.zeros_like(bias[:1]), bias[1:]])
            # 2-D matmul + `ops.add` (a BiasAdd on TensorFlow): one fused kernel.
            qkv = ops.add(qkv, ops.reshape(bias, (3 * dim,)))
        qkv = ops.reshape(qkv, (batch_size, length, 3, heads, head_dim))
        if self.qk_norm:
            query = self.query_norm(qkv[:, :, 0], training=training)
            key = self.key_norm(qkv[:, :, 1], training=training)
            qkv = ops.stack([query, key, qkv[:, :, 2]], axis=2)  # (B, N, 3, H, Dh)
        if self.rope is not None:
            qkv = self._rotate(qkv, rope)

        use_dropout = training and self.attention_dropout_rate > 0
        explicit = return_attention_scores or use_dropout
        if use_fused_attention() and not explicit:
            query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            context = ops.dot_product_attention(query, key, value)  # (B, N, H, Dh)
            scores = None
        else:
            context, scores = self._explicit_attention(
                qkv, training, use_dropout, return_attention_scores
            )  # (B, N, H, Dh), (B, H, N, N) or None

        context = ops.reshape(context, (-1, dim))  # (B*N, D)
        if self.attention_norm:
            context = self.norm(context, training=training)
        outputs = out_fn(context)  # (B*N, D)
        if self.out_bias is not None:
            outputs = ops.add(outputs, ops.cast(self.out_bias, dtype))
        outputs = ops.reshape(outputs, (batch_size, length, dim))  # (B, N, D)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def _rotate(self, qkv, coords):
        """Rotates the patch tokens' queries and keys of `(B, N, 3, H, Dh)`
        by the angles of their coordinates `(patches, 2)`."""
        if coords is None:
            raise ValueError(
                f"Layer {self.name!r} has rotary embeddings: call it with "
                "rope=<the patch coordinates> (keras_vit.layers.RotaryCoordinates)."
            )
        frequencies = (
            self.rope_freqs
            if self.rope_freqs is not None
            else ops.convert_to_tensor(self._rope_frequencies)
        )
        angles = rotary.rotary_angles(coords, frequencies)  # ([H,] P, Dh / 2)
        sin, cos = rotary.sin_cos(angles, self.rope["rotate_half"])  # ([H,] P, Dh)
        if len(sin.shape) == 3:  # per head: (H, P, Dh) -> (P, H, Dh)
            sin, cos = (ops.transpose(t, (1, 0, 2)) for t in (sin, cos))
        else:  # (P, Dh) -> (P, 1, Dh), the same for every head
            sin, cos = sin[:, None, :], cos[:, None, :]
        length = ops.shape(qkv)[1]
        prefix = length - ops.shape(coords)[0]  # class, registers: not rotated
        turned = []
        for part in (0, 1):  # the queries, the keys: (B, N, H, Dh)
            tokens = qkv[:, :, part]
            patches = rotary.apply_rotary(
                tokens[:, prefix:], sin, cos, self.rope["rotate_half"]
            )
            turned.append(ops.concatenate([tokens[:, :prefix], patches], axis=1))
        return ops.stack([*turned, qkv[:, :, 2]], axis=2)  # (B, N, 3, H, Dh)

    def _explicit_attention(self, qkv, training, use_dropout, with_scores):
        """`softmax(q k^T / sqrt(D_h)) v` from `(B, N, 3, H, Dh)`, head-major."""
        dtype = keras.backend.standardize_dtype(qkv.dtype)
        qkv = ops.transpose(qkv, (2, 0, 3, 1, 4))  # (3, B, H, N, Dh)
        # Unstack, not three slices: on TensorFlow the gradient of a slice
        # writes a zero-filled (3, B, H, N, Dh) tensor per slice and adds
        # the three up (12% of a ViT-S/16 training step); unstack's
        # gradient is a single stack.
        query, key, value = ops.unstack(qkv, 3, axis=0)  # (B, H, N, Dh) each
        query = query * ops.cast(self.head_dim**-0.5, dtype)
        in_bfloat16 = use_bfloat16_softmax() and dtype == "bfloat16"
        softmax_dtype = dtype if in_bfloat16 and not with_scores else "float32"
        recompute = training and use_recompute_activations()
        if recompute and not (with_scores or use_dropout):
            context = custom_grads.recomputing_attention(
                query, key, value, softmax_dtype
            )
            scores = None
        else:
            scores = custom_grads.attention_probabilities(query, key, softmax_dtype)
            probs = scores
            if use_dropout:
                probs = keras.random.dropout(
                    scores, self.attention_dropout_rate, seed=self.seed_generator
                )
            probs = ops.cast(probs, dtype)
            context = ops.einsum("bhqk,bhkd->bhqd", probs, value)  # (B, H, N, Dh)
        return ops.transpose(context, (0, 2, 1, 3)), scores  # (B, N, H, Dh)

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(
        self, inputs, training=None, return_attention_scores=False, rope=None
    ):
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
                "qkv_bias": self.use_qkv_bias,
                "rope": self.rope,
                "attention_norm": self.attention_norm,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "norm": self.norm_kind,
                "proj_bias": self.use_proj_bias,
                "lora_rank": self.lora_rank,
                "lora_alpha": self.lora_alpha,
                "lora_targets": list(self.lora_targets),
            }
        )
        return config


def _rope_config(rope) -> dict:
    """The fields the attention reads off a `RotaryOptions` (or its dict)."""
    fields = rope if isinstance(rope, dict) else vars(rope)
    return {
        "kind": fields.get("kind", "axial"),
        "temperature": float(fields.get("temperature", 10000.0)),
        "rotate_half": bool(fields.get("rotate_half", False)),
    }


class _MixedFrequencies(keras.initializers.Initializer):
    """RoPE-ViT's initial mixed frequencies `(2, heads, D_h / 2)`.

    Per head, the magnitudes `temperature ** (-4k / D_h)` along a random
    direction `theta` and the perpendicular one (`theta + pi / 2`), as
    RoPE-ViT's `init_random_2d_freqs` (Heo et al., 2024); the checkpoints'
    learned values replace them.
    """

    def __init__(self, temperature: float = 10.0, seed=None):
        self.temperature = float(temperature)
        self.seed = seed

    def __call__(self, shape, dtype=None):
        _, heads, half = shape
        quarter = half // 2
        index = ops.cast(ops.arange(quarter), "float32")
        magnitude = self.temperature ** (-4.0 * index / (4.0 * quarter))  # (D_h/4,)
        theta = keras.random.uniform(
            (heads, 1), 0.0, 2 * 3.141592653589793, seed=self.seed
        )
        directions = (theta, theta + 3.141592653589793 / 2)
        fx = ops.concatenate([magnitude * ops.cos(t) for t in directions], axis=-1)
        fy = ops.concatenate([magnitude * ops.sin(t) for t in directions], axis=-1)
        return ops.cast(ops.stack([fx, fy]), dtype or "float32")  # (2, H, D_h / 2)

    def get_config(self):
        return {"temperature": self.temperature, "seed": self.seed}
