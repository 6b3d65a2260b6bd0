"""One `EncoderOptions` object: every builder takes it whole, and a built
model gives it back."""

from __future__ import annotations

import dataclasses

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models import ViTLayout
from keras_vit.models.masked_patch import masked_patch_model
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import option_names
from keras_vit.models.zoo import FAMILIES

# Every option away from its default, in combinations that build.
KITCHEN_SINK = EncoderOptions(
    class_token=True,
    distillation=True,
    num_registers=2,
    no_embed_class=True,
    qk_norm=True,
    qkv_bias=False,
    layer_scale_init=1e-5,
    mlp="swiglu",
    gelu_approximate=True,
    dropout_rate=0.1,
    attention_dropout_rate=0.2,
    drop_path_rate=0.3,
    pooling="token",
)
CASES = {
    "default": EncoderOptions(),
    "kitchen_sink": KITCHEN_SINK,
    "gap_fc_norm": EncoderOptions(class_token=False, pooling="gap", fc_norm=True),
    "tokens_only": EncoderOptions(pooling=None),
    **{name: family.options for name, family in FAMILIES.items()},
}


def _layer_configs(model):
    ignore = {"name", "trainable", "dtype", "seed"}
    return [
        (layer.name, {k: v for k, v in layer.get_config().items() if k not in ignore})
        for layer in model.layers
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_built_model_gives_its_options_back(case):
    options = CASES[case]
    include_top = options.pooling is not None
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, include_top=include_top,
        options=options,
    )  # fmt: skip
    read = ViTLayout.of(model).encoder_options
    rebuilt = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, include_top=include_top, options=read
    )
    assert _layer_configs(rebuilt) == _layer_configs(model)
    # Equal up to what the built model cannot keep (see encoder_options).
    assert dataclasses.replace(read, no_embed_class=options.no_embed_class) == (
        dataclasses.replace(options, remat=False)
    )


def test_keywords_and_the_options_object_build_the_same_model():
    by_keywords = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, qk_norm=True, num_registers=2
    )
    by_object = keras_vit.ViT(
        "test/4",
        image_size=16,
        num_classes=3,
        options=EncoderOptions(qk_norm=True, num_registers=2),
    )
    assert _layer_configs(by_keywords) == _layer_configs(by_object)
    # Keywords override the object, one option at a time.
    mixed = keras_vit.ViT(
        "test/4", image_size=16, options=EncoderOptions(qk_norm=True), qk_norm=False
    )
    assert ViTLayout.of(mixed).encoder_options.qk_norm is False


def test_families_are_options_plus_model_defaults():
    model = keras_vit.models.DINOv2_S14(image_size=28)
    assert ViTLayout.of(model).encoder_options == FAMILIES["dinov2"].options
    assert model.output_shape == (None, 384)  # No classifier by default.
    assert FAMILIES["deit3"].arguments() == {
        "no_embed_class": True,
        "layer_scale_init": 1e-6,
    }
    # The caller's keywords override single options of the family.
    model = keras_vit.models.family_model(
        "test/4", "dinov2", image_size=16, qk_norm=True
    )
    assert ViTLayout.of(model).encoder_options.qk_norm is True
    assert ViTLayout.of(model).encoder_options.num_registers == 4


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(num_registers=-1), "`num_registers` must be an integer >= 0"),
        (dict(num_registers=True), "`num_registers` must be an integer >= 0"),
        (dict(qk_norm="yes"), "`qk_norm` must be True or False"),
        (dict(mlp="relu"), "`mlp` must be one of"),
        (dict(dropout_rate=1.0), r"`dropout_rate` must be a number in \[0, 1\)"),
        (dict(layer_scale_init=0.0), "`layer_scale_init` must be a positive"),
        (dict(class_token=False), "`pooling` needs a class token"),
        (dict(distillation=True, pooling="gap"), "`distillation` needs"),
        (dict(fc_norm=True, pooling=None), "`fc_norm` normalises the pooled"),
        (dict(remat=True, drop_path_rate=0.1), "`remat` needs dropout_rate"),
    ],
)
def test_bad_options_name_the_option(changes, message):
    with pytest.raises(ValueError, match=message):
        EncoderOptions(**changes)


def test_unknown_keywords_suggest_the_option():
    with pytest.raises(TypeError, match="'qk_nrom' \\(did you mean 'qk_norm'\\?\\)"):
        keras_vit.ViT("test/4", image_size=16, qk_nrom=True)
    with pytest.raises(TypeError, match="must be a keras_vit.EncoderOptions"):
        keras_vit.ViT("test/4", image_size=16, options={"qk_norm": True})


def test_every_option_reaches_the_masked_patch_model_and_back():
    options = dataclasses.replace(KITCHEN_SINK, distillation=False)
    model = masked_patch_model("test/4", image_size=16, options=options, seed=0)
    assert ViTLayout.of(model).encoder_options == options
    with pytest.raises(ValueError, match="no distillation token"):
        masked_patch_model("test/4", image_size=16, distillation=True)
    with pytest.raises(ValueError, match="needs a pooling"):
        masked_patch_model("test/4", image_size=16, pooling=None)


def test_option_names_are_the_fields():
    assert option_names() == tuple(f.name for f in dataclasses.fields(EncoderOptions))
    assert EncoderOptions(num_registers=3, distillation=True).num_prefix_tokens == 5


FAMILY_OPTIONS = [
    "qk_norm=true",
    "qkv_bias=false",
    "num_registers=2",
    "layer_scale_init=1e-5",
    "no_embed_class=yes",
    "mlp=swiglu",
]


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_masked_pretraining_with_every_family_option_fine_tunes_from_its_encoder(
    tmp_path,
):
    from keras_vit.recipes import pretrain_masked
    from keras_vit.recipes import train

    sets = [
        "variant=test/4", "epochs=1", "steps_per_epoch=2", "global_batch_size=16",
        f"workdir={tmp_path / 'pre'}", "fewshot_every=0", "monitor_images=0",
        "verbose=0", *FAMILY_OPTIONS,
    ]  # fmt: skip
    argv = ["--config", "masked_digits"]
    for item in sets:
        argv += ["--set", item]
    result = pretrain_masked.main(argv)
    encoder_path = tmp_path / "pre" / "encoder.keras"
    assert encoder_path.exists() and (tmp_path / "pre" / "final.keras").exists()
    encoder = result["encoder"]
    read = ViTLayout.of(encoder).encoder_options
    assert (read.qk_norm, read.num_registers, read.layer_scale_init, read.mlp) == (
        True,
        2,
        1e-5,
        "swiglu",
    )
    # The pre-trained encoder equals the pre-training model's, weight by weight.
    pretrained = {w.path: w for w in result["model"].weights}
    for weight in encoder.weights:
        np.testing.assert_array_equal(
            np.asarray(weight), np.asarray(pretrained[weight.path])
        )

    tune = [
        "variant=test/4", "image_size=16", "epochs=1", "steps_per_epoch=2",
        "global_batch_size=16", f"workdir={tmp_path / 'tune'}", "verbose=0",
        "monitor_images=0", f"init_from={encoder_path}", "pooling=token",
        "class_token=true", *FAMILY_OPTIONS,
    ]  # fmt: skip
    argv = ["--config", "digits"]
    for item in tune:
        argv += ["--set", item]
    tuned = train.main(argv)
    assert (tmp_path / "tune" / "final.keras").exists()
    assert 0.0 <= tuned["test"]["accuracy"] <= 1.0


def test_any_size_can_be_spelled_as_a_variant():
    from keras_vit.models.variants import custom_spec
    from keras_vit.models.variants import parse_variant

    spec = parse_variant("192x12x768x3/2")  # Park & Kim's CIFAR ViT-Ti.
    assert spec == custom_spec(2, hidden_dim=192, depth=12, mlp_dim=768, num_heads=3)
    assert (spec.patch_size, spec.total_stride, spec.name) == (
        2,
        2,
        "vit_192x12x768x3_p2",
    )
    model = keras_vit.ViT("32x2x64x2/4", image_size=16, num_classes=3)
    reference = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    assert model.count_params() == reference.count_params()
    for bad in ("96x6x192x5/4", "0x1x1x1/2", "96x6/4"):
        with pytest.raises(ValueError, match="96x6|0x1x1x1|Unknown variant"):
            parse_variant(bad)


def test_park_and_kim_cifar_vit_ti_has_their_parameter_count():
    # xxxnell/how-do-vits-work's CIFAR ViT-Ti: timm's VisionTransformer at 32
    # px, patch 2, width 192, depth 12, 3 heads, qkv_bias=False (5,403,172
    # parameters with 100 classes, counted from their code).
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.ViT(
            "192x12x768x3/2", image_size=32, num_classes=100, qkv_bias=False
        )
        assert model.count_params() == 5_403_172


def test_a_family_refuses_a_whole_options_object():
    with pytest.raises(TypeError, match="DINOv2 with registers models take single"):
        keras_vit.models.DINOv2_S14(options=EncoderOptions(qk_norm=True))


@pytest.mark.parametrize(
    "build, misspelt, meant",
    [
        (keras_vit.ViT, "num_class", "num_classes"),
        (keras_vit.ViT, "qknorm", "qk_norm"),
        (keras_vit.models.masked_patch_model, "colour_bits", "color_bits"),
    ],
)
def test_a_misspelt_keyword_suggests_the_builders_own_argument(build, misspelt, meant):
    with pytest.raises(TypeError, match=f"'{misspelt}' \\(did you mean '{meant}'"):
        build("test/4", image_size=16, **{misspelt: 1})


def test_a_model_spec_is_a_variant_and_refuses_another_backbone():
    spec = keras_vit.models.parse_variant("test/4")
    assert keras_vit.models.parse_variant(spec) is spec
    model = keras_vit.models.masked_patch_model(spec, image_size=16)
    assert ViTLayout.of(model).depth == spec.variant.depth
    with pytest.raises(ValueError, match="`backbone=` cannot change a ModelSpec"):
        keras_vit.ViT(spec, image_size=16, backbone=(3, 4))


def test_masked_pre_training_refuses_fc_norm():
    with pytest.raises(ValueError, match="fc_norm=True leaves them unnormalised"):
        masked_patch_model("test/4", image_size=16, fc_norm=True)
