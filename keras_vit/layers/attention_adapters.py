"""LoRA adapters and int8/int4 kernels for the fused attention projections.

`MultiHeadSelfAttention` keeps its query, key and value kernels as one
fused `(D, 3, heads, D_h)` kernel, which Keras's `Dense.enable_lora` and
`Dense.quantize` cannot reach. `FusedKernelAdapters` gives the layer the
same contracts for its two kernels, in one place:

- LoRA (as `keras.layers.Dense`): `enable_lora` adds float32 adapters and
  freezes the kernels; `.keras` files store the kernels with the adapters
  merged (`save_own_variables`), and `merged_kernels` gives them.
- Quantization (as `Dense`): `quantize("int8" | "int4")` stores each kernel
  per output column, `quantized_build` builds a layer saved that way, and
  Keras calls `quantized_call` for a layer whose dtype policy says so.

The Keras implementation details this relies on (unlocking a built layer's
state, the quantized flag) are in `keras_vit/keras_internals.py`, probed by
`tests/test_keras_internals.py`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit import keras_internals
from keras_vit.layers import custom_grads
from keras_vit.utils import subset_of

# The layer's projections, each of which can carry LoRA adapters (the
# model-level targets are `keras_vit.models.options.LORA_TARGETS`); the first
# three are the slices of the fused kernel, in its axis-1 order.
PROJECTIONS = ("query", "key", "value", "out")
QKV = PROJECTIONS[:3]
# Quantization modes with a quantized call path here.
QUANTIZATION_MODES = ("int8", "int4")


def quantize_columns(kernel, mode):
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


def _stacked(initializer, count, shape):
    def init(_, dtype=None):
        return ops.stack([initializer(shape, dtype) for _ in range(count)])

    return init


class FusedKernelAdapters:
    """LoRA and quantization of `MultiHeadSelfAttention`'s fused kernels.

    A mixin: the layer provides `num_heads`, `head_dim`, the variables
    `qkv_kernel`, `qkv_bias` (or `None`), `out_kernel` and `out_bias` (or
    `None`), the `lora_*` attributes of its constructor, and
    `_attend(inputs, qkv_fn, out_fn, training, return_attention_scores)`,
    the forward pass around two projection functions.
    """

    # -- LoRA ------------------------------------------------------------------
    def enable_lora(
        self,
        rank: int,
        lora_alpha: float | None = None,
        targets=PROJECTIONS,
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
        targets = subset_of(targets, PROJECTIONS, "lora_targets")
        dim = self.num_heads * self.head_dim
        a_init = keras.initializers.get(a_initializer)
        b_init = keras.initializers.get(b_initializer)
        count = sum(t in QKV for t in targets)

        def adapter(name, shape, initializer):
            return self.add_weight(
                name=name, shape=shape, initializer=initializer, dtype="float32"
            )

        with keras_internals.state_unlocked(self):
            if count:
                a = _stacked(a_init, count, (dim, rank))
                b = _stacked(b_init, count, (rank, dim))
                self.qkv_lora_kernel_a = adapter(
                    "qkv_lora_kernel_a", (count, dim, rank), a
                )
                self.qkv_lora_kernel_b = adapter(
                    "qkv_lora_kernel_b", (count, rank, dim), b
                )
            if "out" in targets:
                self.out_lora_kernel_a = adapter(
                    "out_lora_kernel_a", (dim, rank), a_init
                )
                self.out_lora_kernel_b = adapter(
                    "out_lora_kernel_b", (rank, dim), b_init
                )
        self.qkv_kernel.trainable = False
        self.out_kernel.trainable = False
        self.lora_enabled = True
        self.lora_rank = int(rank)
        self.lora_alpha = float(rank if lora_alpha is None else lora_alpha)
        self.lora_targets = targets

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

    # -- the two projections, as functions of the (B*N, D) rows ------------------
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

        def projection(kernel, scale, delta):
            kernel = ops.convert_to_tensor(kernel)
            if self.quantization_mode == "int4":
                kernel = keras.quantizers.unpack_int4(kernel, dim, axis=0)
            scale = ops.cast(scale, dtype)

            def apply(x):
                y = custom_grads.quantized_matmul(x, kernel, scale)
                if delta is not None:
                    y = ops.add(y, ops.matmul(x, ops.cast(delta, dtype)))
                return y

            return apply

        qkv_delta, out_delta = self.lora_deltas()
        return (
            projection(self.qkv_kernel, self.qkv_kernel_scale, qkv_delta),
            projection(self.out_kernel, self.out_kernel_scale, out_delta),
        )

    # -- quantization: Keras's protocol --------------------------------------------
    def quantized_build(self, input_shape, mode, config=None):
        """Creates the int8 kernels (int4: packed two per byte) and their scales."""
        if mode not in QUANTIZATION_MODES:
            raise self._mode_error(mode)
        dim = input_shape[-1]
        rows = dim if mode == "int8" else (dim + 1) // 2

        def frozen(name, shape, dtype, initializer):
            return self.add_weight(
                name=name,
                shape=shape,
                initializer=initializer,
                dtype=dtype,
                trainable=False,
            )

        with keras_internals.state_unlocked(self):
            self.qkv_kernel = frozen("qkv_kernel", (rows, 3 * dim), "int8", "zeros")
            self.qkv_kernel_scale = frozen("qkv_kernel_scale", (3 * dim,), None, "ones")
            self.out_kernel = frozen("out_kernel", (rows, dim), "int8", "zeros")
            self.out_kernel_scale = frozen("out_kernel_scale", (dim,), None, "ones")
        keras_internals.mark_quantized(self)

    def quantize(self, mode=None, type_check=True, config=None):
        """Quantizes both kernels per output channel (`"int8"` or `"int4"`).

        Follows `keras.layers.Dense.quantize`: called by `model.quantize`,
        replaces the float kernels by int8 values (int4: packed two per byte)
        and a float scale per output column, and sets the dtype policy to
        `"{mode}_from_{policy}"`. Adapters, if any, stay in float32.
        `"float8"` (Keras's delayed-scaling training mode) is not implemented
        for the fused kernels and raises `NotImplementedError`, which
        `model.quantize` turns into a warning, leaving the layer in float.
        """
        # As `Dense.quantize`: a subclass may change the call that
        # `quantized_call` mirrors, so only the class itself is quantized.
        if type_check and FusedKernelAdapters not in type(self).__bases__:
            raise NotImplementedError(
                f"Layer {type(self).__name__} does not have a `quantize` method "
                "implemented."
            )
        if mode not in QUANTIZATION_MODES:
            raise self._mode_error(mode)
        dim = self.num_heads * self.head_dim
        qkv, qkv_scale = quantize_columns(
            ops.reshape(self.qkv_kernel, (dim, 3 * dim)), mode
        )
        out, out_scale = quantize_columns(
            ops.reshape(self.out_kernel, (dim, dim)), mode
        )
        del self.qkv_kernel
        del self.out_kernel
        self.quantized_build((None, None, dim), mode)
        self.qkv_kernel.assign(qkv)
        self.qkv_kernel_scale.assign(qkv_scale)
        self.out_kernel.assign(out)
        self.out_kernel_scale.assign(out_scale)
        if self.dtype_policy.quantization_mode is None:
            policy = keras.dtype_policies.get(f"{mode}_from_{self.dtype_policy.name}")
            self.dtype_policy = policy

    def quantized_call(
        self, inputs, training=None, return_attention_scores=False, rope=None
    ):
        """The call of a quantized layer (Keras calls it instead of `call`)."""
        if self.quantization_mode not in QUANTIZATION_MODES:
            raise self._mode_error(self.quantization_mode)
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        qkv_fn, out_fn = self._quantized_projections(dtype)
        return self._attend(
            inputs, qkv_fn, out_fn, training, return_attention_scores, rope
        )

    def _mode_error(self, mode):
        name = type(self).__name__
        if mode == "float8":
            return NotImplementedError(
                f"{name} has no 'float8' mode: Keras's float8 is a training mode "
                "with delayed scaling per kernel, not implemented for the fused "
                "projections here. Use 'int8' or 'int4'."
            )
        return NotImplementedError(
            f"Invalid quantization mode for {name}: expected one of "
            f"{QUANTIZATION_MODES}. Received: quantization_mode={mode}"
        )

    # -- saving: the adapters merged, as Dense does ----------------------------------
    def _saved_names(self):
        names = ["qkv_kernel", "qkv_bias", "out_kernel", "out_bias"]
        if self.qkv_bias is None:
            names.remove("qkv_bias")
        if self.out_bias is None:
            names.remove("out_bias")
        if getattr(self, "rope_freqs", None) is not None:
            names.append("rope_freqs")
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
            kernel, scale = quantize_columns(kernel, self.quantization_mode)
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
