"""A/B measurements of the speed levers tried on keras_vit (the lever log).

Each lever compares variants of the same ViT in one process where it can
(the variants are traced into separate `tf.function`s and called in turn,
A/B/A/B, so the machine's load weighs on both), or in alternating subprocesses
where the lever is a process setting (threads, oneDNN). Reported per variant:
the median wall-clock img/s and the best CPU-time img/s (images per CPU
second of this process, which moves little with other processes' load).

The "before" implementations below are the layer calls keras_vit had before
this work (`ops.dot_product_attention` on `(B, N, H, Dh)` slices, 3-D dense
layers, `+` for the biases), and a separate-projection variant; they are
patched in only while their variant is traced. The levers that have a public
speed switch (`keras_vit.layers.fused_attention`, `bfloat16_softmax`,
`closed_form_layer_norm`, `erf_gelu`, `recompute_activations`) are flipped
with its context manager while their variant is traced.

Usage:

    python benchmarks/levers.py                      # every lever, B/16 b8
    python benchmarks/levers.py --lever attention --precision bfloat16
    python benchmarks/levers.py --lever train --variant S/16 --batch 32
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from unittest import mock

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

LEVERS = ("attention", "xla", "call", "policy", "threads", "onednn", "train")


# --- alternative layer calls ------------------------------------------------


def attention_before(self, inputs, training=None, return_attention_scores=False):
    """The earlier call: 3-D matmul, `+` bias, `ops.dot_product_attention`."""
    from keras import ops

    dim = self.num_heads * self.head_dim
    batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
    kernel = ops.reshape(ops.cast(self.qkv_kernel, inputs.dtype), (dim, 3 * dim))
    bias = ops.reshape(ops.cast(self.qkv_bias, inputs.dtype), (3 * dim,))
    qkv = ops.matmul(inputs, kernel) + bias  # (B, N, 3D)
    qkv = ops.reshape(qkv, (batch_size, length, 3, self.num_heads, self.head_dim))
    query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # (B, N, H, Dh)
    context = ops.dot_product_attention(query, key, value)  # (B, N, H, Dh)
    context = ops.reshape(context, (batch_size, length, dim))
    out_kernel = ops.reshape(ops.cast(self.out_kernel, context.dtype), (dim, dim))
    return ops.matmul(context, out_kernel) + ops.cast(self.out_bias, context.dtype)


def attention_separate(self, inputs, training=None, return_attention_scores=False):
    """Three separate Q, K, V projections (2-D, fused bias), head-major core."""
    from keras import ops

    heads, head_dim = self.num_heads, self.head_dim
    dim = heads * head_dim
    batch_size, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
    x = ops.reshape(inputs, (-1, dim))
    kernel = ops.cast(self.qkv_kernel, x.dtype)  # (D, 3, H, Dh)
    bias = ops.cast(self.qkv_bias, x.dtype)  # (3, H, Dh)
    parts = []
    for i in range(3):
        part = ops.add(
            ops.matmul(x, ops.reshape(kernel[:, i], (dim, dim))),
            ops.reshape(bias[i], (dim,)),
        )
        part = ops.reshape(part, (batch_size, length, heads, head_dim))
        parts.append(ops.transpose(part, (0, 2, 1, 3)))  # (B, H, N, Dh)
    query, key, value = parts
    query = query * ops.cast(head_dim**-0.5, x.dtype)
    logits = ops.einsum("bhqd,bhkd->bhqk", query, key)
    probs = ops.cast(ops.softmax(ops.cast(logits, "float32"), axis=-1), x.dtype)
    context = ops.transpose(ops.einsum("bhqk,bhkd->bhqd", probs, value), (0, 2, 1, 3))
    out_kernel = ops.reshape(ops.cast(self.out_kernel, x.dtype), (dim, dim))
    outputs = ops.add(
        ops.matmul(ops.reshape(context, (-1, dim)), out_kernel),
        ops.cast(self.out_bias, x.dtype),
    )
    return ops.reshape(outputs, (batch_size, length, dim))


def block_before(self, inputs, training=None, return_attention_scores=False):
    """The earlier block: the MLP's dense layers on 3-D `(B, N, D)` tensors."""
    from keras import ops

    x = inputs + self.attention(self.norm_1(inputs), training=training)
    y = self.mlp_dense_1(self.norm_2(x))
    y = self.mlp_dense_2(ops.gelu(y, approximate=self.gelu_approximate))
    return x + y


@contextlib.contextmanager
def patched(attention_call=None, block_call=None):
    from keras_vit.layers import MultiHeadSelfAttention
    from keras_vit.layers import TransformerBlock

    saved = MultiHeadSelfAttention.call, TransformerBlock.call
    MultiHeadSelfAttention.call = attention_call or saved[0]
    TransformerBlock.call = block_call or saved[1]
    try:
        yield
    finally:
        MultiHeadSelfAttention.call, TransformerBlock.call = saved


def sliced_qkv():
    """q, k, v cut from the stacked tensor by three slices, not one unstack."""
    import keras

    def unstack(x, num=None, axis=0):
        return [x[i] for i in range(num)]

    return mock.patch.object(keras.ops, "unstack", unstack)


def ops_gelu_in_training():
    """`keras.ops.gelu` (TensorFlow's erfc form) in training too."""
    from keras_vit import layers

    return layers.erf_gelu(False)


def keras_layer_norm_gradient():
    """Keras' layer normalization op, differentiated by TensorFlow."""
    from keras_vit import layers

    return layers.closed_form_layer_norm(False)


def float32_softmax():
    """The attention softmax in float32 under a bfloat16 policy too."""
    from keras_vit import layers

    return layers.bfloat16_softmax(False)


def activations_kept():
    """Attention probabilities and GELU output kept for the backward pass."""
    from keras_vit import layers

    return layers.recompute_activations(False)


@contextlib.contextmanager
def gelu_op_by_op():
    """The training GELU differentiated op by op (x, erf argument, CDF and
    output kept), as a separate op before the second dense layer."""
    from keras import ops

    from keras_vit import layers
    from keras_vit.layers import transformer_block

    def differentiated(x):
        cdf = 0.5 + 0.5 * ops.erf(ops.cast(x, "float32") * 0.7071067811865476)
        return x * ops.cast(cdf, x.dtype)

    with layers.recompute_activations(False):
        with mock.patch.object(transformer_block, "_erf_gelu", differentiated):
            yield


def fused_attention():
    """The attention core as `keras.ops.dot_product_attention`."""
    from keras_vit import layers

    return layers.fused_attention(True)


def traced_train_step(model, x, patch=contextlib.nullcontext):
    """A `tf.function` computing the loss and every gradient (no optimizer)."""
    import keras
    import numpy as np
    import tensorflow as tf

    labels = tf.constant(np.arange(len(x)) % 1000)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(images):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        # Reduced so that no gradient is pruned from the graph.
        return tf.add_n([tf.reduce_sum(tf.cast(g, "float32")) for g in grads])

    function = tf.function(step)
    with patch():
        function.get_concrete_function(tf.constant(x))
    tensor = tf.constant(x)
    return lambda: function(tensor).numpy()


# --- in-process A/B -----------------------------------------------------------


def build(precision: str, variant: str, image_size: int, policy: str | None = None):
    import keras
    import numpy as np

    import keras_vit

    keras.config.set_dtype_policy(
        policy or ("mixed_bfloat16" if precision == "bfloat16" else "float32")
    )
    model = keras_vit.ViT(variant, image_size=image_size)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape))
    return model


def images(batch: int, image_size: int):
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")


def traced(
    model,
    x,
    jit_compile=False,
    attention_call=None,
    block_call=None,
    switch=contextlib.nullcontext,
):
    """A `tf.function` of the model traced with the given layer calls/switch."""
    import tensorflow as tf

    function = tf.function(lambda t: model(t, training=False), jit_compile=jit_compile)
    with patched(attention_call, block_call), switch():
        function.get_concrete_function(tf.constant(x))
    tensor = tf.constant(x)
    return lambda: function(tensor).numpy()


def interleave(variants: dict, batch: int, rounds: int) -> dict:
    """Calls each variant twice, then `rounds` times in turn; returns stats."""
    for step in variants.values():
        step()
        step()
    walls = {name: [] for name in variants}
    cpus = {name: [] for name in variants}
    for _ in range(rounds):
        for name, step in variants.items():
            cpu, wall = time.process_time(), time.perf_counter()
            step()
            walls[name].append(time.perf_counter() - wall)
            cpus[name].append(time.process_time() - cpu)
    return {
        name: {
            "img_s": batch / statistics.median(walls[name]),
            "img_per_cpu_s": batch / min(cpus[name]),
        }
        for name in variants
    }


def max_difference(variants: dict) -> dict:
    import numpy as np

    outputs = {name: np.asarray(step(), "float32") for name, step in variants.items()}
    first = next(iter(outputs.values()))
    return {name: float(np.abs(out - first).max()) for name, out in outputs.items()}


def lever_in_process(lever: str, args) -> tuple[dict, dict]:
    x = images(args.batch, args.image_size)
    if lever == "policy":
        mixed = build("bfloat16", args.variant, args.image_size)
        pure = build("bfloat16", args.variant, args.image_size, policy="bfloat16")
        pure.set_weights(mixed.get_weights())
        variants = {
            "mixed_bfloat16 (float32 variables)": traced(mixed, x),
            "bfloat16 variables (cast once)": traced(pure, x),
        }
        return variants, max_difference(variants)
    model = build(args.precision, args.variant, args.image_size)
    if lever == "attention":
        variants = {
            "now: 2-D fused matmul+bias(+GELU), head-major attention": traced(model, x),
            "before: 3-D dense, ops.dot_product_attention": traced(
                model, x, attention_call=attention_before, block_call=block_before
            ),
            "2-D MLP only (attention as before)": traced(
                model, x, attention_call=attention_before
            ),
            "separate Q/K/V projections": traced(
                model, x, attention_call=attention_separate
            ),
            "fused_attention switch on (ops.dot_product_attention)": traced(
                model, x, switch=fused_attention
            ),
        }
    elif lever == "train":
        variants = {
            "now (unstack, erf GELU, closed-form LN grad, bf16 softmax, "
            "recomputed activations)": (traced_train_step(model, x)),
            "q/k/v as three slices": traced_train_step(model, x, sliced_qkv),
            "keras.ops.gelu in training": traced_train_step(
                model, x, ops_gelu_in_training
            ),
            "Keras LayerNormalization gradient": traced_train_step(
                model, x, keras_layer_norm_gradient
            ),
            "float32 softmax (matters under bfloat16 only)": traced_train_step(
                model, x, float32_softmax
            ),
            "activations kept (recompute_activations off)": traced_train_step(
                model, x, activations_kept
            ),
            "... and GELU differentiated op by op": traced_train_step(
                model, x, gelu_op_by_op
            ),
        }
    elif lever == "xla":
        variants = {
            "tf.function": traced(model, x),
            "tf.function(jit_compile=True)": traced(model, x, jit_compile=True),
        }
    elif lever == "call":
        model.compile(jit_compile=False)
        import tensorflow as tf

        tensor = tf.constant(x)
        variants = {
            "tf.function(model(x))": traced(model, x),
            "model.predict_on_batch(x)": lambda: model.predict_on_batch(x),
            "model.predict(x)": lambda: model.predict(x, verbose=0),
            "model(x) eager": lambda: model(tensor, training=False).numpy(),
        }
    else:
        raise ValueError(f"Unknown in-process lever {lever!r}.")
    return variants, max_difference(variants)


# --- process-level A/B --------------------------------------------------------


PROCESS_VARIANTS = {
    "threads": {
        "TF defaults (intra = inter = cores)": {},
        "inter-op 1": {"inter": 1},
        "intra-op 1, inter-op 1": {"intra": 1, "inter": 1},
    },
    "onednn": {
        "TF_ENABLE_ONEDNN_OPTS=1 (default)": {"env": {"TF_ENABLE_ONEDNN_OPTS": "1"}},
        "TF_ENABLE_ONEDNN_OPTS=0 (Eigen)": {"env": {"TF_ENABLE_ONEDNN_OPTS": "0"}},
    },
}


def child(settings: dict, args) -> dict:
    """Times the default model under process settings (run in a subprocess)."""
    import tensorflow as tf

    if "intra" in settings:
        tf.config.threading.set_intra_op_parallelism_threads(settings["intra"])
    if "inter" in settings:
        tf.config.threading.set_inter_op_parallelism_threads(settings["inter"])
    model = build(args.precision, args.variant, args.image_size)
    step = traced(model, images(args.batch, args.image_size))
    return interleave({"one": step}, args.batch, args.rounds)["one"]


def lever_processes(lever: str, args) -> dict:
    collected = {name: [] for name in PROCESS_VARIANTS[lever]}
    for _ in range(2):  # A/B, then A/B again in fresh processes
        for name, settings in PROCESS_VARIANTS[lever].items():
            env = dict(os.environ, **settings.get("env", {}))
            command = [
                sys.executable,
                __file__,
                "--child",
                json.dumps(settings),
                "--precision",
                args.precision,
                "--batch",
                str(args.batch),
                "--variant",
                args.variant,
                "--image-size",
                str(args.image_size),
                "--rounds",
                str(args.rounds),
            ]
            output = subprocess.run(command, capture_output=True, text=True, env=env)
            line = [s for s in output.stdout.splitlines() if s.startswith("CHILD ")]
            if not line:
                raise RuntimeError(f"{name} failed: {output.stderr[-500:]}")
            collected[name].append(json.loads(line[-1][len("CHILD ") :]))
    return {
        name: {
            "img_s": statistics.median(r["img_s"] for r in runs),
            "img_per_cpu_s": max(r["img_per_cpu_s"] for r in runs),
        }
        for name, runs in collected.items()
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lever", choices=LEVERS, action="append")
    parser.add_argument(
        "--precision", default="float32", choices=("float32", "bfloat16")
    )
    parser.add_argument("--variant", default="B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print("CHILD " + json.dumps(child(json.loads(args.child), args)), flush=True)
        return 0
    print(
        f"ViT-{args.variant} @{args.image_size}, batch {args.batch}, {args.precision}, "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for lever in args.lever or LEVERS:
        if lever in PROCESS_VARIANTS:
            stats, diffs = lever_processes(lever, args), {}
        else:
            variants, diffs = lever_in_process(lever, args)
            stats = interleave(variants, args.batch, args.rounds)
        print(f"\n[{lever}]")
        for name, s in stats.items():
            diff = f"  max|diff| {diffs[name]:.2e}" if name in diffs else ""
            speed = f"{s['img_s']:7.2f} img/s  {s['img_per_cpu_s']:6.2f} img/CPU-s"
            print(f"  {name:58} {speed}{diff}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
