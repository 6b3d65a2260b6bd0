r"""Your own images: a pretrained ViT-S/16 fine-tuned on an image folder.

Command:
    keras-vit train --config folder_finetune --set dataset=folder:DIR
    # from a checkout: python -m recipes.train --config folder_finetune \
    #     --set dataset=folder:DIR

`DIR` holds one sub-folder of images per class (`DIR/cat/1.jpg`,
`DIR/dog/2.png`, ...; JPEG, PNG, GIF, BMP or WebP). The config has no
dataset of its own: without `--set dataset=folder:DIR` the run is refused
in one line. Nine tenths of the images train; the other tenth (a fixed
draw, the same on every run) is the validation and test split. A folder
with a `test/` sub-folder of its own (`DIR/train/<class>/`,
`DIR/test/<class>/`) uses it with `--set val_split=test --set
test_split=test`.

Weights: `init_from="augreg_in21k"`, the AugReg ViT-S/16 pre-trained on
ImageNet-21k at 224 px ("How to train your ViT?", Steiner et al. 2022,
who recommend the ImageNet-21k checkpoints for transfer). It is downloaded
into the Keras cache once (about 120 MB); offline, the run stops in one line
naming the URL and the directory to put the file in. Any other source
works the same way, e.g. `--set init_from=runs/other/final.keras` or a
checkpoint name `keras_vit.from_pretrained` takes (`--set
init_from=hf://timm/vit_small_patch16_224.augreg_in21k`); one that does not
fit this model is refused, naming what differs and the `--set` overrides
that fit it.

Hardware: one GPU; on a CPU it runs too, slowly (ViT-S/16 at 224 px).

Expected accuracy and time: not measured (they depend on your images). The
run prints the held-out tenth's accuracy at the end and writes the model to
`runs/folder_finetune/final.keras`.

Recipe (the ViT paper's fine-tuning, §3.2 and Appendix B.1.1, as
`cifar10_finetune_b16`): the pre-trained head is dropped and a
zero-initialised head added for your classes; the class token is pooled
(`pooling="token"`, as the checkpoint was trained); images get an
Inception crop and a random flip and are resized to 224 px, the
checkpoint's resolution; SGD with momentum 0.9, no weight decay, 100
warm-up steps then cosine decay, gradient clipping at global norm 1, batch
64 and learning rate 0.01 (from the paper's fine-tuning grid {0.001,
0.003, 0.01, 0.03}, which it swept at batch 512). Unlike
`cifar10_finetune_b16` there is no Polyak averaging: over the few
hundred steps of a small folder, an average with momentum 0.9999 would
stay close to the pre-trained weights and their zero head.
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.recipes.configs.base import TrainConfig


def get_config() -> TrainConfig:
    return TrainConfig(
        name="folder_finetune",
        dataset="",  # Yours: --set dataset=folder:DIR.
        train_split="train[:90%]",
        val_split="train[90%:]",
        test_split="train[90%:]",
        image_size=224,
        global_batch_size=64,
        crop_area_range=(0.05, 1.0),
        random_flip=True,
        variant="S/16",
        encoder=EncoderOptions(class_token=True, pooling="token"),
        init_from="augreg_in21k",
        optimizer="sgd",
        learning_rate=0.01,
        momentum=0.9,
        weight_decay=0.0,
        warmup_steps=100,
        schedule="cosine",
        global_clipnorm=1.0,
        epochs=10,
        mixed_precision="auto",
        verbose=2,
    )
