"""The paper's ViT (Dosovitskiy et al., 2021) and its AugReg checkpoints.

The original ImageNet-21k pre-training and its ImageNet-1k fine-tunes, and
the "How to train your ViT?" (AugReg, Steiner et al., 2022) runs: original
`.npz` files of the public `vit_models` bucket of
google-research/vision_transformer, read with the paper's `[-1, 1]` input
contract.

- `imagenet21k`: the paper's ImageNet-21k pre-training (21,843 classes, with
  the `pre_logits` layer; the L/32 and H/14 heads were zeroed by the
  authors, so use them for fine-tuning).
- `imagenet21k+imagenet2012`: those models fine-tuned on ImageNet-1k at
  384 px; `imagenet21k+imagenet2012_224` at 224 px (B/16, L/16).
- `augreg_in21k`, `augreg_in21k_ft_in1k`, `augreg_in21k_ft_in1k_384`: the
  AugReg checkpoints, pre-trained on ImageNet-21k, and fine-tuned on
  ImageNet-1k at 224 or 384 px.

Example:

```python
model = keras_vit.ViT_B16(weights="augreg_in21k_ft_in1k")
```
"""

from __future__ import annotations

from keras_vit.models.preprocessing import PAPER
from keras_vit.models.zoo.registry import IMAGENET1K_CLASSES as IN1K
from keras_vit.models.zoo.registry import IMAGENET21K_CLASSES as IN21K
from keras_vit.models.zoo.registry import BucketWeights
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import register


def original(variant: str, stem: str, width: int | None, tags=None):
    """The paper's files of one model: ImageNet-21k (with `pre_logits` of
    `width`), then its ImageNet-1k fine-tunes, `(tag, size, file suffix)`
    each (default: the 384-px one)."""
    rows = [
        BucketWeights("imagenet21k", variant, f"imagenet21k/{stem}", 224, IN21K,
                      width, file_name=f"imagenet21k_{stem}.npz"),
    ]  # fmt: skip
    if tags is None:
        tags = (("imagenet21k+imagenet2012", 384, ""),)
    for tag, size, suffix in tags:
        folder = "imagenet21k+imagenet2012"
        rows.append(
            BucketWeights(tag, variant, f"{folder}/{stem}{suffix}", size, IN1K,
                          file_name=f"{folder}_{stem}{suffix}.npz"),
        )  # fmt: skip
    return rows


_I1K = "--imagenet2012-steps_20k"


def augreg(tag: str, variant: str, run: str, size: int, classes: int):
    """An AugReg file (`augreg/<run>.npz`)."""
    return BucketWeights(tag, variant, f"augreg/{run}", size, classes)


def augreg_runs(variant: str, run: str, lr_224: str, lr_384: str | None):
    """An AugReg run's ImageNet-21k file and its ImageNet-1k fine-tunes (at
    224 px with learning rate `lr_224`, and at 384 px with `lr_384`)."""
    rows = [
        augreg("augreg_in21k", variant, run, 224, IN21K),
        augreg("augreg_in21k_ft_in1k", variant, f"{run}{_I1K}-lr_{lr_224}-res_224",
               224, IN1K),
    ]  # fmt: skip
    if lr_384 is not None:
        rows.append(
            augreg("augreg_in21k_ft_in1k_384", variant,
                   f"{run}{_I1K}-lr_{lr_384}-res_384", 384, IN1K)
        )  # fmt: skip
    return rows


_224 = (("imagenet21k+imagenet2012", 384, ""),
        ("imagenet21k+imagenet2012_224", 224, "-224"))  # fmt: skip
# The AugReg runs' common part of their names (as the bucket names them).
_RUN = "i21k-300ep-lr_0.001"

VIT = register(
    Family(
        name="vit",
        title="ViT",
        preprocessing=PAPER,
        paper=True,
        exported=("keras_vit",),
        models={
            "ViT_Ti16": "Ti/16",
            "ViT_S16": "S/16",
            "ViT_S32": "S/32",
            "ViT_B8": "B/8",
            "ViT_B16": "B/16",
            "ViT_B32": "B/32",
            "ViT_L16": "L/16",
            "ViT_L32": "L/32",
            "ViT_H14": "H/14",
        },  # fmt: skip
        checkpoints=(
            *original("B/16", "ViT-B_16", 768, _224),
            *original("B/32", "ViT-B_32", 768),
            *original("L/16", "ViT-L_16", 1024, _224),
            *original("L/32", "ViT-L_32", 1024),
            *original("H/14", "ViT-H_14", 1280, ()),  # no ImageNet-1k fine-tune
            # The AugReg runs (as the bucket names them, with the fine-tune
            # learning rates at 224 and 384 px).
            *augreg_runs(
                "Ti/16", f"Ti_16-{_RUN}-aug_none-wd_0.03-do_0.0-sd_0.0", "0.03", "0.03"
            ),
            *augreg_runs(
                "S/16", f"S_16-{_RUN}-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03", "0.03"
            ),
            *augreg_runs(
                "S/32", f"S_32-{_RUN}-aug_light1-wd_0.03-do_0.0-sd_0.0", "0.03", "0.03"
            ),
            *augreg_runs(
                "B/16", f"B_16-{_RUN}-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.01", "0.01"
            ),
            *augreg_runs(
                "B/8", f"B_8-{_RUN}-aug_medium1-wd_0.1-do_0.0-sd_0.0", "0.01", None
            ),
            *augreg_runs(
                "L/16", f"L_16-{_RUN}-aug_medium1-wd_0.1-do_0.1-sd_0.1", "0.01", "0.01"
            ),
            augreg(
                "augreg_in21k",
                "B/32",
                f"B_32-{_RUN}-aug_medium1-wd_0.03-do_0.0-sd_0.0",
                224,
                IN21K,
            ),
            augreg(
                "augreg_in21k_ft_in1k",
                "B/32",
                f"B_32-{_RUN}-aug_medium1-wd_0.03-do_0.0-sd_0.0{_I1K}-lr_0.03-res_224",
                224,
                IN1K,
            ),
            augreg(
                "augreg_in21k_ft_in1k_384",
                "B/32",
                f"B_32-{_RUN}-aug_light1-wd_0.1-do_0.0-sd_0.0{_I1K}-lr_0.03-res_384",
                384,
                IN1K,
            ),
        ),  # fmt: skip
        timm=TimmNames(
            writer="vit_base_patch16_224",
            size_words={
                "tiny": 3,
                "small": 6,
                "base": 12,
                "large": 16,
                "huge": 16,
                "gigantic": 16,
            },  # fmt: skip
        ),
    )
)

ViT_Ti16 = VIT.constructor("ViT_Ti16")
ViT_S16 = VIT.constructor("ViT_S16")
ViT_S32 = VIT.constructor("ViT_S32")
ViT_B8 = VIT.constructor("ViT_B8")
ViT_B16 = VIT.constructor("ViT_B16")
ViT_B32 = VIT.constructor("ViT_B32")
ViT_L16 = VIT.constructor("ViT_L16")
ViT_L32 = VIT.constructor("ViT_L32")
ViT_H14 = VIT.constructor("ViT_H14")
