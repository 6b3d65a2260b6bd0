"""Multi-head self-attention with a fused query/key/value projection."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit.layers.config import use_bfloat16_softmax
from keras_vit.layers.config import use_fused_attention
from keras_vit.layers.config import use_recompute_activations
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.recompute import after
from keras_vit.layers.utils import subset_of

# The projections that can carry LoRA adapters; the first three are the
# slices of the fused kernel, in its axis-1 order.
LORA_TARGETS = ("query", "key", "value", "out")
QKV = LORA_TARGETS[:3]
# Quantization modes with a quantized call path here.
QUANTIZATION_MODES = ("int8", "int4")


def _attention_probabilities(query, key, softmax_dtype):
    """`softmax(q k^T)` over the keys, computed in `softmax_dtype`."""
    logits = ops.einsum("bhqd,bhkd->bhqk", query, key)  # (B, H, N, N)
    return ops.softmax(ops.cast(logits, softmax_dtype), axis=-1)


def _recomputing_attention(query, key, value, softmax_dtype):
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
        probs = _attention_probabilities(query, key, softmax_dtype)
        context = ops.einsum("bhqk,bhkd->bhqd", ops.cast(probs, dtype), value)

        def backward(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            d_context = ops.cast(upstream, dtype)  # (B, H, N, Dh)
            (k,) = after(d_context, key)  # computed again, not merged
            probs = _attention_probabilities(query, k, softmax_dtype)
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


def _quantize_columns(kernel, mode):
    """`(D_in, D_out)` float -> (int8 values, scale `(D_out,)`), per column.

    int4 values are packed two per byte along the input axis.
    """
    if mode == "int8":
        values, scale = keras.quantizers.abs_max_quantize(kernel, axis=0, to_numpy=True)
    else:
        values, scale = keras.quantizers.abs_max_quantize(
            kernel, axis=0, value_range=(-8, 7), to_numpy=True
        )
        values, _, _ = keras.quantizers.pack_int4(values, axis=0)
    return values, ops.squeeze(scale, axis=0)


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

    Fine-tuning follows Keras's `Dense`/`EinsumDense` contracts for the two
    kernels (see `docs/finetuning.md`): `enable_lora` adds float32 adapters
    `A (D, r)`, `B (r, D)` per projection (B zero-initialised, so the layer
    starts unchanged) and freezes the kernels; `quantize("int8")` and
    `quantize("int4")` store each kernel per output channel (abs-max, int4
    packed two per byte) and quantize the inputs per row at run time.
    `"float8"` (Keras's delayed-scaling training mode) is not implemented
    for the fused kernels and raises `NotImplementedError`, which
    `model.quantize` turns into a warning, leaving the layer in float.

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
        lora_rank: int | None = None,
        lora_alpha: float | None = None,
        lora_targets=LORA_TARGETS,
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
        # A seed generator, not a Dropout sublayer: without sublayers (unless
        # `qk_norm`) the layer is a leaf, which `model.quantize` requires.
        if self.attention_dropout_rate > 0:
            self.seed_generator = keras.random.SeedGenerator()
        self.lora_rank = None if lora_rank is None else int(lora_rank)
        self.lora_alpha = lora_alpha
        self.lora_targets = subset_of(lora_targets, LORA_TARGETS, "lora_targets")
        self.lora_enabled = False
        self.qk_norm = bool(qk_norm)
        if self.qk_norm:
            # The norms stay in float when the layer is (re)built quantized,
            # e.g. under "int8_from_float32": its float source policy.
            policy = self.dtype_policy.name.split("_from_")[-1]
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

        if self.quantization_mode in QUANTIZATION_MODES:
            self._quantized_build(dim, self.quantization_mode)
        elif self.quantization_mode is not None:
            raise self._quantization_mode_error(self.quantization_mode)
        else:
            self.qkv_kernel = self.add_weight(
                name="qkv_kernel",
                shape=(dim, 3, heads, head_dim),
                initializer=self._projections(dim, 3, (dim, 3, heads, head_dim)),
            )
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
        self.out_bias = self.add_weight(
            name="out_bias", shape=(dim,), initializer=self.bias_initializer
        )
        if self.qk_norm:
            self.query_norm.build((None, None, head_dim))
            self.key_norm.build((None, None, head_dim))
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

    def _quantized_build(self, dim, mode):
        rows = dim if mode == "int8" else (dim + 1) // 2
        self.qkv_kernel = self.add_weight(
            name="qkv_kernel",
            shape=(rows, 3 * dim),
            initializer="zeros",
            dtype="int8",
            trainable=False,
        )
        self.qkv_kernel_scale = self.add_weight(
            name="qkv_kernel_scale",
            shape=(3 * dim,),
            initializer="ones",
            trainable=False,
        )
        self.out_kernel = self.add_weight(
            name="out_kernel",
            shape=(rows, dim),
            initializer="zeros",
            dtype="int8",
            trainable=False,
        )
        self.out_kernel_scale = self.add_weight(
            name="out_kernel_scale",
            shape=(dim,),
            initializer="ones",
            trainable=False,
        )
        self._is_quantized = True

    # -- LoRA ------------------------------------------------------------------
    def enable_lora(
        self,
        rank: int,
        lora_alpha: float | None = None,
        targets=LORA_TARGETS,
        a_initializer="he_uniform",
        b_initializer="zeros",
    ):
        """Adds LoRA adapters to the projections in `targets`, freezes the kernels.

        Each targeted projection `W (D, D)` becomes `W + (alpha / rank) A B`
        with float32 `A (D, rank)` and `B (rank, D)`; `B` starts at zero, so
        the outputs are unchanged until the adapters are trained. The query,
        key and value adapters are stored stacked: `qkv_lora_kernel_a`
        `(P, D, rank)` and `qkv_lora_kernel_b` `(P, rank, D)` for the `P`
        targeted slices of the fused kernel, in query-key-value order.

        Args:
            rank: The adapters' rank.
            lora_alpha: Scale numerator. Defaults to `rank` (scale 1).
            targets: Among `"query"`, `"key"`, `"value"`, `"out"`.
            a_initializer: Initializer of each `A`. Defaults to `"he_uniform"`.
            b_initializer: Initializer of each `B`. Defaults to `"zeros"`.

        Example:

        >>> layer = keras_vit.layers.MultiHeadSelfAttention(num_heads=2)
        >>> layer.build((None, 5, 8))
        >>> layer.enable_lora(4, lora_alpha=8, targets=("query", "value"))
        >>> [w.name for w in layer.trainable_weights]
        ['qkv_bias', 'out_bias', 'qkv_lora_kernel_a', 'qkv_lora_kernel_b']
        """
        if not self.built:
            raise ValueError("Cannot enable LoRA on a layer that is not built yet.")
        if self.lora_enabled:
            raise ValueError(f"LoRA is already enabled on layer {self.name!r}.")
        if int(rank) <= 0:
            raise ValueError(f"`rank` must be positive. Received: rank={rank}")
        targets = subset_of(targets, LORA_TARGETS, "lora_targets")
        dim = self.num_heads * self.head_dim
        a_init = keras.initializers.get(a_initializer)
        b_init = keras.initializers.get(b_initializer)
        count = sum(t in QKV for t in targets)
        self._tracker.unlock()
        try:
            if count:
                self.qkv_lora_kernel_a = self.add_weight(
                    name="qkv_lora_kernel_a",
                    shape=(count, dim, rank),
                    initializer=self._stacked(a_init, count, (dim, rank)),
                    dtype="float32",
                )
                self.qkv_lora_kernel_b = self.add_weight(
                    name="qkv_lora_kernel_b",
                    shape=(count, rank, dim),
                    initializer=self._stacked(b_init, count, (rank, dim)),
                    dtype="float32",
                )
            if "out" in targets:
                self.out_lora_kernel_a = self.add_weight(
                    name="out_lora_kernel_a",
                    shape=(dim, rank),
                    initializer=a_init,
                    dtype="float32",
                )
                self.out_lora_kernel_b = self.add_weight(
                    name="out_lora_kernel_b",
                    shape=(rank, dim),
                    initializer=b_init,
                    dtype="float32",
                )
        finally:
            self._tracker.lock()
        self.qkv_kernel.trainable = False
        self.out_kernel.trainable = False
        self.lora_enabled = True
        self.lora_rank = int(rank)
        self.lora_alpha = float(rank if lora_alpha is None else lora_alpha)
        self.lora_targets = targets

    @staticmethod
    def _stacked(initializer, count, shape):
        def init(_, dtype=None):
            return ops.stack([initializer(shape, dtype) for _ in range(count)])

        return init

    def lora_deltas(self):
        """The adapters' updates as `(qkv (D, 3D) or None, out (D, D) or None)`."""
        if not self.lora_enabled:
            return None, None
        dim = self.num_heads * self.head_dim
        scale = self.lora_alpha / self.lora_rank
        qkv = out = None
        if hasattr(self, "qkv_lora_kernel_a"):
            delta = ops.einsum(
                "pdr,pre->dpe", self.qkv_lora_kernel_a, self.qkv_lora_kernel_b
            )  # (D, P, D)
            parts = iter(ops.unstack(delta * scale, delta.shape[1], axis=1))
            zeros = ops.zeros((dim, dim), "float32")
            slices = [next(parts) if t in self.lora_targets else zeros for t in QKV]
            qkv = ops.reshape(ops.stack(slices, axis=1), (dim, 3 * dim))
        if hasattr(self, "out_lora_kernel_a"):
            out = scale * ops.matmul(self.out_lora_kernel_a, self.out_lora_kernel_b)
        return qkv, out

    def merged_kernels(self):
        """The float kernels with the adapters added, in the layer's shapes."""
        if self.quantization_mode is not None:
            raise ValueError(
                f"Layer {self.name!r} is quantized ({self.quantization_mode}); "
                "merge the adapters before quantizing."
            )
        dim = self.num_heads * self.head_dim
        qkv = ops.reshape(ops.cast(self.qkv_kernel, "float32"), (dim, 3 * dim))
        out = ops.reshape(ops.cast(self.out_kernel, "float32"), (dim, dim))
        qkv_delta, out_delta = self.lora_deltas()
        if qkv_delta is not None:
            qkv = qkv + qkv_delta
        if out_delta is not None:
            out = out + out_delta
        return (
            ops.reshape(qkv, self.qkv_kernel.shape),
            ops.reshape(out, self.out_kernel.shape),
        )

    # -- projections ------------------------------------------------------------
    def _float_projections(self, dtype):
        dim = self.num_heads * self.head_dim
        qkv = ops.reshape(self.qkv_kernel, (dim, 3 * dim))
        out = ops.reshape(self.out_kernel, (dim, dim))
        qkv_delta, out_delta = self.lora_deltas()
        if qkv_delta is not None:
            qkv = ops.add(ops.cast(qkv, "float32"), qkv_delta)
        if out_delta is not None:
            out = ops.add(ops.cast(out, "float32"), out_delta)
        qkv, out = ops.cast(qkv, dtype), ops.cast(out, dtype)
        return (lambda x: ops.matmul(x, qkv)), (lambda x: ops.matmul(x, out))

    def _quantized_projections(self, dtype):
        dim = self.num_heads * self.head_dim
        qkv_delta, out_delta = self.lora_deltas()

        def projection(kernel, scale, delta):
            kernel = ops.convert_to_tensor(kernel)
            if self.quantization_mode == "int4":
                kernel = keras.quantizers.unpack_int4(kernel, dim, axis=0)
            kernel_scale = ops.cast(scale, dtype)

            @ops.custom_gradient
            def matmul(x):
                # Inputs quantized per row, kernel per column: an int8 matmul
                # (int32 accumulation) divided by both scales.
                values, x_scale = keras.quantizers.abs_max_quantize(x, axis=-1)
                y = ops.cast(ops.matmul(values, kernel), dtype)
                y = ops.divide(y, ops.multiply(x_scale, kernel_scale))

                def grad(*args, upstream=None):
                    upstream = args[0] if upstream is None else upstream
                    w = ops.divide(ops.cast(kernel, dtype), kernel_scale)
                    return ops.matmul(upstream, ops.transpose(w))

                return y, grad

            def apply(x):
                y = matmul(x)
                if delta is not None:
                    y = ops.add(y, ops.matmul(x, ops.cast(delta, dtype)))
                return y

            return apply

        return (
            projection(self.qkv_kernel, self.qkv_kernel_scale, qkv_delta),
            projection(self.out_kernel, self.out_kernel_scale, out_delta),
        )

    def call(self, inputs, training=None, return_attention_scores=False):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        qkv_fn, out_fn = self._float_projections(dtype)
        return self._attend(inputs, qkv_fn, out_fn, training, return_attention_scores)

    def _int8_call(self, inputs, training=None, return_attention_scores=False):
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        qkv_fn, out_fn = self._quantized_projections(dtype)
        return self._attend(inputs, qkv_fn, out_fn, training, return_attention_scores)

    _int4_call = _int8_call

    def _float8_call(self, *args, **kwargs):
        raise self._float8_error()

    def _float8_error(self):
        return NotImplementedError(
            f"{type(self).__name__} has no 'float8' mode: Keras's float8 is a "
            "training mode with delayed scaling per kernel, not implemented for "
            "the fused projections here. Use 'int8' or 'int4'."
        )

    def _attend(self, inputs, qkv_fn, out_fn, training, return_attention_scores):
        heads, head_dim = self.num_heads, self.head_dim
        dim = heads * head_dim
        batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        # 2-D matmul + `ops.add` (a BiasAdd on TensorFlow): one fused kernel.
        bias = ops.reshape(ops.cast(self.qkv_bias, dtype), (3 * dim,))
        qkv = ops.add(qkv_fn(ops.reshape(inputs, (-1, dim))), bias)  # (B*N, 3D)
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
            in_bfloat16 = use_bfloat16_softmax() and dtype == "bfloat16"
            in_bfloat16 = in_bfloat16 and not return_attention_scores
            softmax_dtype = dtype if in_bfloat16 else "float32"
            recompute = training and use_recompute_activations()
            if recompute and not (return_attention_scores or use_dropout):
                context = _recomputing_attention(query, key, value, softmax_dtype)
                scores = None
            else:
                scores = _attention_probabilities(query, key, softmax_dtype)
                probs = scores
                if use_dropout:
                    probs = keras.random.dropout(
                        scores, self.attention_dropout_rate, seed=self.seed_generator
                    )
                probs = ops.cast(probs, dtype)
                context = ops.einsum("bhqk,bhkd->bhqd", probs, value)  # (B, H, N, Dh)
            context = ops.transpose(context, (0, 2, 1, 3))  # (B, N, H, Dh)

        context = ops.reshape(context, (-1, dim))  # (B*N, D)
        out_bias = ops.cast(self.out_bias, dtype)
        outputs = ops.add(out_fn(context), out_bias)  # (B*N, D)
        outputs = ops.reshape(outputs, (batch_size, length, dim))  # (B, N, D)
        if return_attention_scores:
            return outputs, scores
        return outputs

    # -- quantization -------------------------------------------------------------
    def quantize(self, mode=None, type_check=True, config=None):
        """Quantizes both kernels per output channel (`"int8"` or `"int4"`).

        Follows `keras.layers.Dense.quantize`: called by `model.quantize`,
        replaces the float kernels by int8 values (int4: packed two per byte)
        and a float scale per output column, and sets the dtype policy to
        `"{mode}_from_{policy}"`. Adapters, if any, stay in float32.
        """
        if type_check and type(self) is not MultiHeadSelfAttention:
            raise self._not_implemented_error(self.quantize)
        if mode == "float8":
            raise self._float8_error()
        if mode not in QUANTIZATION_MODES:
            raise self._quantization_mode_error(mode)
        dim = self.num_heads * self.head_dim
        qkv, qkv_scale = _quantize_columns(
            ops.reshape(self.qkv_kernel, (dim, 3 * dim)), mode
        )
        out, out_scale = _quantize_columns(
            ops.reshape(self.out_kernel, (dim, dim)), mode
        )
        del self.qkv_kernel
        del self.out_kernel
        self._quantized_build(dim, mode)
        self.qkv_kernel.assign(qkv)
        self.qkv_kernel_scale.assign(qkv_scale)
        self.out_kernel.assign(out)
        self.out_kernel_scale.assign(out_scale)
        if self.dtype_policy.quantization_mode is None:
            policy = keras.dtype_policies.get(f"{mode}_from_{self.dtype_policy.name}")
            self.dtype_policy = policy

    def _saved_names(self):
        names = ["qkv_kernel", "qkv_bias", "out_kernel", "out_bias"]
        if self.quantization_mode is not None:
            names += ["qkv_kernel_scale", "out_kernel_scale"]
        return names

    def _saved_values(self):
        """The variables to save, with the adapters merged (as `Dense`)."""
        values = {name: getattr(self, name) for name in self._saved_names()}
        if not self.lora_enabled:
            return values
        if self.quantization_mode is None:
            values["qkv_kernel"], values["out_kernel"] = self.merged_kernels()
            return values
        # Dequantize, add the adapters, quantize again.
        dim = self.num_heads * self.head_dim
        for prefix, delta in zip(("qkv", "out"), self.lora_deltas(), strict=True):
            if delta is None:
                continue
            kernel = ops.convert_to_tensor(values[f"{prefix}_kernel"])
            if self.quantization_mode == "int4":
                kernel = keras.quantizers.unpack_int4(kernel, dim, axis=0)
            scale = values[f"{prefix}_kernel_scale"]
            kernel = ops.divide(ops.cast(kernel, "float32"), scale) + delta
            kernel, scale = _quantize_columns(kernel, self.quantization_mode)
            values[f"{prefix}_kernel"] = kernel
            values[f"{prefix}_kernel_scale"] = scale
        return values

    def save_own_variables(self, store):
        # The kernels, biases (and scales) in a fixed order: quantizing
        # re-creates the kernels, which would move them in the tracked list.
        # Adapters are merged into the kernels, as `keras.layers.Dense` does;
        # `keras_vit.finetune.save_lora_weights` saves them alone.
        if not self.built:
            return
        for index, value in enumerate(self._saved_values().values()):
            store[str(index)] = value

    def load_own_variables(self, store):
        if not self.built:
            return
        names = self._saved_names()
        if len(store.keys()) != len(names):
            raise ValueError(
                f"Layer {self.name!r} expects {len(names)} variables "
                f"({', '.join(names)}); the file has {len(store.keys())}."
            )
        for index, name in enumerate(names):
            getattr(self, name).assign(store[str(index)])
        if self.lora_enabled:  # The kernels hold the merged adapters.
            for variable in self.trainable_weights:
                if "lora_kernel" in variable.name:
                    variable.assign(ops.zeros(variable.shape, variable.dtype))

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
                "lora_rank": self.lora_rank,
                "lora_alpha": self.lora_alpha,
                "lora_targets": list(self.lora_targets),
            }
        )
        return config
