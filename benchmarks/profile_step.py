"""Where a training step's time goes: keras_vit's op by op, next to timm's.

One ViT training step (AdamW, cross-entropy, random images) is profiled
after two warm-up steps, in each framework, in its own subprocess:

- keras_vit: the step Keras traces for `train_on_batch`, timed per graph
  node by TensorFlow's profiler (its host events, read from the trace);
- timm: `torch.profiler` over the same step (self CPU time per ATen op).

Op times are summed by op type and by category (matmul and convolution,
attention softmax, normalisation, GELU, other element-wise work, the
optimizer's update, the rest). An op's time is its own wall time: ops that
run side by side on the two cores (TensorFlow's inter-op parallelism) are
each counted in full, so a framework's total can exceed its step's wall time.

Usage:

    python benchmarks/profile_step.py                  # S/16, batch 32
    ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 \\
        python benchmarks/profile_step.py --variant S/16   # as on an AVX2 CPU
    python benchmarks/profile_step.py --only keras_vit --top 25

Needs keras_vit; the timm side needs timm and torch (benchmarks/README.md)
and is reported as unavailable without them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

NUM_CLASSES = 1000

# (category, regular expression on the op type), first match wins.
CATEGORIES = [
    ("matmul, conv", r"MatMul|Einsum|Conv|^(aten::)?(mm|addmm|bmm|baddbmm|linear)$"),
    ("attention core", r"scaled_dot_product|flash_attention"),
    ("softmax", r"Softmax|softmax"),
    ("layer norm", r"layer_norm|Rsqrt|Mean|SquaredDifference"),
    ("GELU", r"Erf|gelu|Exp$"),
    ("optimizer", r"Assign|ResourceApply|adam|_foreach|lerp|addcdiv|addcmul"),
    (
        "element-wise, reductions",
        r"Mul|Add|Sub|Sum|Div|Neg|Square|Sqrt|Maximum|"
        r"BiasAdd|Cast|Select|Pow|Tile|Max$|^aten::(mul|add|sub|sum|div|copy_|fill_|"
        r"zero_|sqrt|neg|where|clone|cat|_to_copy|max)",
    ),
    (
        "layout (transpose, reshape, copy)",
        r"Transpose|Reshape|Pack|Unpack|Concat|"
        r"Slice|Identity|Copy|Squeeze|ExpandDims|^aten::(contiguous|permute|transpose|"
        r"view|reshape|t|unbind|select|slice|expand|as_strided|empty)",
    ),
]


def category(op: str) -> str:
    for name, pattern in CATEGORIES:
        if re.search(pattern, op):
            return name
    return "other"


def _inputs(batch, image_size, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, (batch,))
    return images, labels


def profile_keras_vit(variant: str, batch: int, image_size: int) -> dict:
    import glob
    import tempfile

    import keras
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    import keras_vit
    from keras_vit.training import build_optimizer

    model = keras_vit.ViT(variant, image_size=image_size, num_classes=NUM_CLASSES)
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    build_optimizer(model)
    images, labels = _inputs(batch, image_size)
    for _ in range(2):
        model.train_on_batch(images, labels)
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        start = time.perf_counter()
        model.train_on_batch(images, labels)
        wall = time.perf_counter() - start
        tf.profiler.experimental.stop()
        (path,) = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
    # Graph nodes are the host events named "<node name>:<op type>".
    times = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                match = re.fullmatch(r"[^\s:]+:(\w+)", name)
                if match:
                    times[match.group(1)] += event.duration_ps / 1e9
    return {"wall_ms": wall * 1e3, "op_ms": dict(times)}


def profile_timm(variant: str, batch: int, image_size: int) -> dict:
    import torch
    from torch_runner import import_timm
    from torch_runner import timm_name

    timm = import_timm()
    model = timm.create_model(
        timm_name(variant, image_size),
        pretrained=False,
        num_classes=NUM_CLASSES,
        img_size=image_size,
    )
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    images, labels = _inputs(batch, image_size)
    images = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(labels)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(images), labels).backward()
        optimizer.step()

    for _ in range(2):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        start = time.perf_counter()
        step()
        wall = time.perf_counter() - start
    times = collections.Counter()
    for event in p.key_averages():
        if event.self_cpu_time_total > 0:
            times[event.key] += event.self_cpu_time_total / 1e3
    return {"wall_ms": wall * 1e3, "op_ms": dict(times)}


def _child(impl: str, args) -> dict:
    command = [
        sys.executable,
        os.path.abspath(__file__),
        "--child",
        impl,
        "--variant",
        args.variant,
        "--batch",
        str(args.batch),
        "--image-size",
        str(args.image_size),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, cwd=HERE)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("PROFILE ")]
    if proc.returncode or not lines:
        tail = " | ".join(proc.stderr.strip().splitlines()[-2:])
        return {"error": f"exit {proc.returncode}: {tail}"}
    return json.loads(lines[-1][len("PROFILE ") :])


def report(results: dict, top: int) -> str:
    impls = [name for name in results if "error" not in results[name]]
    lines = []
    for name, result in results.items():
        if "error" in result:
            lines.append(f"{name}: unavailable ({result['error']})")
    if not impls:
        return "\n".join(lines)
    totals = {
        name: collections.Counter({c: 0.0 for c, _ in CATEGORIES} | {"other": 0.0})
        for name in impls
    }
    for name in impls:
        for op, ms in results[name]["op_ms"].items():
            totals[name][category(op)] += ms
    header = "| category | " + " | ".join(f"{n} ms" for n in impls) + " |"
    lines += [header, "|---" * (len(impls) + 1) + "|"]
    for cat in [c for c, _ in CATEGORIES] + ["other"]:
        lines.append(
            f"| {cat} | " + " | ".join(f"{totals[n][cat]:.0f}" for n in impls) + " |"
        )
    lines.append(
        "| **sum of op times** | "
        + " | ".join(f"**{sum(totals[n].values()):.0f}**" for n in impls)
        + " |"
    )
    lines.append(
        "| step wall time | "
        + " | ".join(f"{results[n]['wall_ms']:.0f}" for n in impls)
        + " |"
    )
    for name in impls:
        ops = sorted(results[name]["op_ms"].items(), key=lambda kv: -kv[1])[:top]
        lines += ["", f"{name}: the {top} most expensive op types (ms)"]
        lines += [f"  {ms:8.1f}  {op}  [{category(op)}]" for op, ms in ops]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="S/16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--only", choices=("keras_vit", "timm"))
    parser.add_argument("--top", type=int, default=15, help="op types listed")
    parser.add_argument(
        "--child", choices=("keras_vit", "timm"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        run = profile_keras_vit if args.child == "keras_vit" else profile_timm
        result = run(args.variant, args.batch, args.image_size)
        print("PROFILE " + json.dumps(result), flush=True)
        return 0
    impls = [args.only] if args.only else ["keras_vit", "timm"]
    results = {impl: _child(impl, args) for impl in impls}
    capped = {
        k: os.environ[k]
        for k in (
            "ONEDNN_MAX_CPU_ISA",
            "ATEN_CPU_CAPABILITY",
            "MKL_ENABLE_INSTRUCTIONS",
        )
        if os.environ.get(k)
    }
    print(
        f"ViT-{args.variant} @{args.image_size}, batch {args.batch}, float32, "
        f"one training step; caps: {capped or 'none'}; load {os.getloadavg()[0]:.2f}"
    )
    print(report(results, args.top))
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
