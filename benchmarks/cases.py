"""The benchmark's cases: what is measured, and in which order.

Each case runs in its own subprocess. Cases of one scenario (task, model,
image size, batch, precision) are listed next to each other with the
implementations alternating (keras_vit, timm, keras-hub, keras_vit, ...), so
the machine's load at that moment weighs on all of them alike.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

IMPLEMENTATIONS = ("keras_vit", "timm", "keras_hub", "data")
PRECISIONS = ("float32", "bfloat16", "int8")


@dataclass(frozen=True)
class Case:
    """One measurement.

    Attributes:
        impl: `"keras_vit"`, `"timm"`, `"keras_hub"` or `"data"` (the input
            pipeline).
        task: `"infer"`, `"train"` (one optimizer step) or `"data"`.
        mode: How it runs: `"predict"` (Keras `predict_on_batch`, the
            `tf.function` Keras builds), `"predict+xla"`, or
            `"predict+bf16-weights"` (keras_vit built under the `bfloat16`
            policy: bfloat16 variables), `"predict+dynamic"` (keras_vit built
            with `dynamic_image_size=True`), `"predict+int8"` or
            `"predict+int4"` (keras_vit after `keras_vit.finetune.quantize`,
            head in float), `"litert"` (keras_vit exported with
            `export_tflite(quantize="int8")`, run by LiteRT's interpreter
            on uint8 images: the int8 serving path); `"train"`,
            `"train+xla"`, `"train+remat"`
            (`keras_vit.ViT(remat=True)`) or `"train+lora"` (rank 8 on
            q/k/v, out and MLP; `train_on_batch`); `"predict+jax"` and
            `"train+jax"`: the same on Keras's JAX backend (XLA-compiled
            steps); `"eager"` or `"compile"` (timm
            with `torch.compile`), `"compile+freeze"` (inference with
            Inductor's weight freezing, as Intel recommends on CPUs),
            `"dynamic"` (timm after `torch.ao.quantization.quantize_dynamic`
            of its `nn.Linear` layers, int8), `"pt2e+compile"` (timm
            quantized to int8 by torchao's PT2E flow with
            `X86InductorQuantizer`, calibrated on the input batch, then
            `torch.compile` with freezing); for the data pipeline, `"crop+flip"` or
            `"crop+flip+randaugment"`.
        precision: `"float32"`, `"bfloat16"` (Keras `mixed_bfloat16`;
            timm `torch.autocast(dtype=torch.bfloat16)`) or `"int8"`
            (int8 weights and matrix products; see the modes).
        variant: ViT size and patch, e.g. `"B/16"`.
        image_size: Square input side.
        batch: Images per call or step.
        warmup: Untimed calls after the first one.
        iters: Timed calls.
    """

    impl: str
    task: str
    mode: str
    precision: str
    variant: str
    image_size: int
    batch: int
    warmup: int = 1
    iters: int = 5

    def __post_init__(self):
        if self.impl not in IMPLEMENTATIONS:
            raise ValueError(f"Unknown impl {self.impl!r}; one of {IMPLEMENTATIONS}.")
        if self.precision not in PRECISIONS:
            raise ValueError(
                f"Unknown precision {self.precision!r}; one of {PRECISIONS}."
            )
        if self.batch <= 0 or self.iters <= 0 or self.warmup < 0:
            raise ValueError(f"batch and iters must be positive, warmup >= 0: {self}")

    @property
    def scenario(self) -> tuple:
        """Cases sharing a scenario are compared with each other."""
        return (self.task, self.variant, self.image_size, self.batch, self.precision)

    @property
    def name(self) -> str:
        return (
            f"{self.task} {self.variant}@{self.image_size} b{self.batch} "
            f"{self.precision} {self.impl} {self.mode}"
        )

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Case:
        return cls(**json.loads(text))


def _scenario(task, variant, size, batch, precision, entries, warmup, iters):
    return [
        Case(impl, task, mode, precision, variant, size, batch, warmup, iters)
        for impl, mode in entries
    ]


KV, TIMM, HUB = "keras_vit", "timm", "keras_hub"
# Models of a keras_vit family (the benchmark's `variant` "<family>:<size>"):
# the family, keras_vit's variant, timm's architecture and the image size.
FAMILY_MODELS = {
    "dinov3:S/16": ("dinov3", "S/16", "vit_small_patch16_dinov3", 256),
    "eva02:S/14": ("eva02", "384x12x1024x6/14", "eva02_small_patch14_224", 224),
}


def quick_cases() -> list[Case]:
    """About 5 minutes: the headline comparisons with few iterations."""
    infer = [(KV, "predict"), (TIMM, "eager"), (HUB, "predict")]
    train = [(KV, "train"), (TIMM, "eager"), (KV, "train+jax")]
    cases = []
    for precision in ("float32", "bfloat16"):
        cases += _scenario("infer", "B/16", 224, 8, precision, infer, 1, 3)
    cases += _scenario(
        "infer",
        "B/16",
        224,
        8,
        "float32",
        [(KV, "predict+dynamic"), (KV, "predict+jax")],
        1,
        3,
    )
    cases += _scenario("train", "S/16", 224, 32, "float32", train, 1, 3)
    cases.append(Case("data", "data", "crop+flip", "float32", "S/16", 224, 32, 2, 10))
    return cases


def side_by_side_cases() -> list[Case]:
    """What users feel, ours against timm's best modes (`--side-by-side`).

    Inference at batch 8 for ViT-S/16 and ViT-B/16 in float32, bfloat16 and
    int8 (timm's eager, compiled-and-frozen and int8 modes), and the ViT-S/16
    training step at batch 32 in float32 and bfloat16: steady step, first
    step (the user's path: `compile`, then `train_on_batch`) and peak RSS.
    """
    cases = []
    for variant in ("S/16", "B/16"):
        modes = {
            "float32": [(KV, "predict"), (TIMM, "eager"), (TIMM, "compile+freeze")],
            "bfloat16": [
                (KV, "predict"),
                (TIMM, "eager"),
                (KV, "predict+bf16-weights"),
                (TIMM, "compile+freeze"),
            ],
            "int8": [(KV, "litert"), (TIMM, "dynamic"), (TIMM, "pt2e+compile")],
        }
        for precision, entries in modes.items():
            cases += _scenario("infer", variant, 224, 8, precision, entries, 1, 5)
    for precision in ("float32", "bfloat16"):
        entries = [(KV, "train"), (TIMM, "eager")]
        cases += _scenario("train", "S/16", 224, 32, precision, entries, 0, 3)
    # The rotary families (DINOv3 any-size by default, as timm builds it).
    for model, (_, _, _, size) in FAMILY_MODELS.items():
        entries = [(KV, "predict"), (TIMM, "eager"), (TIMM, "compile+freeze")]
        cases += _scenario("infer", model, size, 8, "float32", entries, 1, 5)
    return cases


def full_cases() -> list[Case]:
    """All the issue's cases (about 25 minutes on 2 cores)."""
    cases = []
    # ViT-B/16 @224, batch 8: every mode of every implementation.
    b8 = {
        "float32": [
            (KV, "predict"),
            (TIMM, "eager"),
            (HUB, "predict"),
            (KV, "predict+xla"),
            (TIMM, "compile"),
            (HUB, "predict+xla"),
            (KV, "predict+dynamic"),
            (KV, "predict+jax"),
        ],
        "bfloat16": [
            (KV, "predict"),
            (TIMM, "eager"),
            (HUB, "predict"),
            (KV, "predict+xla"),
            (TIMM, "compile"),
            (KV, "predict+bf16-weights"),
            (KV, "predict+jax"),
        ],
    }
    for precision, entries in b8.items():
        cases += _scenario("infer", "B/16", 224, 8, precision, entries, 1, 5)
    # Batch 1 and 32, B/16 @384 and L/16 @224: the default modes.
    default = [(KV, "predict"), (TIMM, "eager"), (HUB, "predict")]
    two = [(KV, "predict"), (TIMM, "eager")]
    for precision in ("float32", "bfloat16"):
        batch1 = default + (
            [(KV, "predict+bf16-weights")] if precision == "bfloat16" else []
        )
        cases += _scenario("infer", "B/16", 224, 1, precision, batch1, 2, 7)
        cases += _scenario("infer", "B/16", 224, 32, precision, default[:2], 0, 3)
        cases += _scenario("infer", "B/16", 384, 8, precision, two, 0, 3)
        cases += _scenario("infer", "L/16", 224, 8, precision, two, 0, 3)
    # Cost growth with the image size (224 and 384 above, batch 8).
    cases += _scenario("infer", "B/16", 512, 8, "float32", two, 0, 3)
    # Training steps (AdamW, batch 32); the first step traces and compiles.
    train = {
        ("S/16", "float32"): [
            (KV, "train"),
            (TIMM, "eager"),
            (HUB, "train"),
            (KV, "train+xla"),
            (TIMM, "compile"),
            (KV, "train+jax"),
        ],
        ("S/16", "bfloat16"): [(KV, "train"), (TIMM, "eager"), (KV, "train+jax")],
        ("Ti/16", "float32"): [(KV, "train"), (TIMM, "eager")],
        ("Ti/16", "bfloat16"): [(KV, "train"), (TIMM, "eager")],
    }
    for (variant, precision), entries in train.items():
        cases += _scenario("train", variant, 224, 32, precision, entries, 0, 3)
    for mode in ("crop+flip", "crop+flip+randaugment"):
        cases.append(Case("data", "data", mode, "float32", "S/16", 224, 32, 2, 10))
    return cases


def finetune_cases() -> list[Case]:
    """The fine-tuning add-ons (issue 16, `--finetune`), keras_vit only.

    Quantized inference next to float32 (B/16, batch 8), and training steps
    with and without remat, and with LoRA (batch 32), each pair adjacent so
    that the machine's load weighs on both.
    """
    infer = [(KV, "predict"), (KV, "predict+int8"), (KV, "predict+int4")]
    cases = _scenario("infer", "B/16", 224, 8, "float32", infer, 1, 3)
    train = [(KV, "train"), (KV, "train+remat")]
    cases += _scenario(
        "train", "S/16", 224, 32, "float32", [*train, (KV, "train+lora")], 0, 3
    )
    cases += _scenario("train", "B/16", 224, 32, "float32", train, 0, 2)
    return cases
