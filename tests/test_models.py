"""The model zoo: exact sizes, numerics against NumPy, options and errors."""

import keras
import numpy as np
import pytest
import reference
from helpers import assign_reference_params
from helpers import images
from helpers import randomize
from helpers import tiny_model

import keras_vit

# Parameter counts with a 1000-class head at 224 px, as published with the
# reference implementation's model tests (google-research/vision_transformer).
PARAM_COUNTS = {
    "ViT_Ti16": 5_717_416,
    "ViT_S16": 22_050_664,
    "ViT_B8": 86_576_872,
    "ViT_B16": 86_567_656,
    "ViT_B32": 88_224_232,
    "ViT_L16": 304_326_632,
    "ViT_L32": 306_535_400,
    "ViT_H14": 632_045_800,
    "R50_ViT_B16": 98_659_112,
}


# The newer families' named models at their default arguments (DeiT and
# DeiT III with a 1000-class head at 224 px; DINOv2 at 518 px and SigLIP at
# 224 px without a head; FlexiViT at 240 px with a 1000-class head), counted
# by timm 1.0.31 (`sum(p.numel() for p in
# timm.create_model(name).parameters())`) for deit_{tiny,small,base}_patch16_224,
# deit_{tiny,small,base}_distilled_patch16_224, deit3_{small,base,large}_patch16_224,
# vit_{small,base,large,giant}_patch14_reg4_dinov2, vit_base_patch16_siglip_224,
# vit_so400m_patch14_siglip_224 and flexivit_{small,base,large}.
FAMILY_PARAM_COUNTS = {
    "DeiT_Ti16": 5_717_416,
    "DeiT_S16": 22_050_664,
    "DeiT_B16": 86_567_656,
    "DeiTDistilled_Ti16": 5_910_800,
    "DeiTDistilled_S16": 22_436_432,
    "DeiTDistilled_B16": 87_338_192,
    "DeiT3_S16": 22_059_496,
    "DeiT3_B16": 86_585_320,
    "DeiT3_L16": 304_374_760,
    "DINOv2_S14": 22_057_344,
    "DINOv2_B14": 86_582_016,
    "DINOv2_L14": 304_370_688,
    "DINOv2_g14": 1_136_483_840,
    "SigLIP_B16": 92_884_224,
    "SigLIP_So400m14": 427_680_704,
    "FlexiViT_S": 22_061_416,
    "FlexiViT_B": 86_589_160,
    "FlexiViT_L": 304_355_304,
    # The rotary families at their checkpoints' settings, as timm counts the
    # checkpoint of each (tests/fixtures/eva/param_counts.json): DINOv3 at
    # 256 px, EVA-02 MIM at 224 px and PE-Lang/Spatial without a head,
    # EVA-02-CLIP and PE-Core with their projection, RoPE-ViT with 1000.
    "DINOv3_S16": 21_586_944,
    "DINOv3_SPlus16": 28_683_264,
    "DINOv3_B16": 85_641_216,
    "DINOv3_L16": 303_079_424,
    "DINOv3_HPlus16": 840_509_440,
    "DINOv3_7B16": 6_716_030_976,
    "EVA02_Ti14": 5_502_144,
    "EVA02_S14": 21_621_120,
    "EVA02_B14": 85_758_720,
    "EVA02_L14": 303_268_800,
    "EVA02_CLIP_B16": 86_263_040,
    "EVA02_CLIP_L14": 304_105_152,
    "PE_Core_T16": 6_141_056,
    "PE_Core_S16": 23_783_168,
    "PE_Core_B16": 93_673_984,
    "PE_Core_L14": 317_152_256,
    "PE_Core_G14": 1_882_033_920,
    "PE_Lang_L14": 291_415_040,
    "PE_Lang_G14": 1_740_922_624,
    "PE_Spatial_T16": 5_683_200,
    "PE_Spatial_S16": 21_983_232,
    "PE_Spatial_B16": 86_433_792,
    "PE_Spatial_L14": 303_964_160,
    "PE_Spatial_G14": 1_851_887_104,
    "RoPEViT_S16": 21_984_232,
    "RoPEViT_B16": 86_434_792,
    "RoPEViT_L16": 304_174_056,
    "RoPEViTMixed_S16": 21_988_840,
    "RoPEViTMixed_B16": 86_444_008,
    "RoPEViTMixed_L16": 304_198_632,
    "RoPEViTAPE_S16": 22_059_496,
    "RoPEViTAPE_B16": 86_585_320,
    "RoPEViTAPE_L16": 304_374_760,
    "RoPEViTMixedAPE_S16": 22_064_104,
    "RoPEViTMixedAPE_B16": 86_594_536,
    "RoPEViTMixedAPE_L16": 304_399_336,
    # timm's vit_*_clip_* with a 1000-class head (the constructors' default).
    "CLIP_B32": 88_225_000,
    "CLIP_B16": 86_568_424,
    "CLIP_L14": 304_204_776,
    "CLIP_H14": 632_047_080,
    # timm's aimv2_*_patch14_224 (no head: the checkpoints have none), as
    # tests/fixtures/aimv2/aimv2.json records them.
    "AIMv2_L14": 309_197_824,
    "ResPostViT_B16": 86_538_472,  # timm's vit_base_patch16_rpn_224
    "AIMv2_H14": 680_851_968,
    "AIMv2_1B14": 1_234_958_336,
    "AIMv2_3B14": 2_720_658_432,
}


def _count(constructor, **kwargs):
    # Variables created in a stateless scope are never allocated, so even
    # ViT-H/14 is counted in a fraction of a second.
    with keras.StatelessScope(initialize_variables=False):
        model = constructor(**kwargs)
    return model.count_params()


@pytest.mark.parametrize("name", sorted(PARAM_COUNTS))
def test_parameter_count(name):
    assert _count(getattr(keras_vit, name)) == PARAM_COUNTS[name]


@pytest.mark.parametrize("name", sorted(keras_vit.NAMED_MODELS))
def test_parameter_count_equals_original_checkpoint_layout(name):
    spec = keras_vit.parse_variant(keras_vit.NAMED_MODELS[name])
    params = reference.make_vit_checkpoint(
        hidden_dim=spec.variant.hidden_dim,
        depth=spec.variant.depth,
        mlp_dim=spec.variant.mlp_dim,
        num_heads=spec.variant.num_heads,
        patch_size=spec.patch_size,
        image_size=(224, 224),
        num_classes=1000,
        resnet_layers=None if spec.backbone is None else spec.backbone.layers,
        shapes_only=True,
    )
    assert _count(getattr(keras_vit, name)) == reference.count_params(params)


@pytest.mark.parametrize("name", sorted(FAMILY_PARAM_COUNTS))
def test_family_parameter_count_equals_timm(name):
    assert _count(getattr(keras_vit.models, name)) == FAMILY_PARAM_COUNTS[name]


def test_every_family_model_is_counted_and_documented():
    assert set(keras_vit.models.FAMILY_MODELS) == set(FAMILY_PARAM_COUNTS)
    for name, (variant, _) in keras_vit.models.FAMILY_MODELS.items():
        assert getattr(keras_vit.models, name).__doc__.count(variant) >= 1


def test_every_named_model_is_tested():
    untested = set(keras_vit.NAMED_MODELS) - set(PARAM_COUNTS)
    assert untested == {"ViT_S32", "R26_ViT_S32", "R26_ViT_B32", "R50_ViT_L32"}
    for name, variant in keras_vit.NAMED_MODELS.items():
        assert getattr(keras_vit, name).__doc__.count(variant) >= 1


def test_every_variant_size_is_tested():
    variants = [*keras_vit.NAMED_MODELS.values()]
    variants += [v for v, _ in keras_vit.models.FAMILY_MODELS.values()]
    sizes = {keras_vit.parse_variant(v).size for v in variants}
    # Every row of the table has a named model (families may spell out sizes
    # of their own, e.g. DINOv3-H+'s "1280x32x5120x20").
    assert set(keras_vit.VARIANTS) - {"test"} <= sizes


def test_sizes_at_384_and_without_class_token_or_with_pre_logits():
    assert _count(keras_vit.ViT_B16, image_size=384) == 86_859_496
    assert _count(keras_vit.ViT_B16, class_token=False, pooling="gap") == 86_566_120
    assert (
        _count(keras_vit.ViT_B16, num_classes=21843, representation_size=768)
        == 103_186_515
    )


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_vit_l16_with_100_classes_works_as_written():
    model = keras_vit.ViT_L16(num_classes=100)
    assert model.name == "vit_l16"
    assert model.output_shape == (None, 100)
    assert model.count_params() == 304_326_632 - 1000 * 1025 + 100 * 1025
    out = model.predict(np.zeros((1, 224, 224, 3), "float32"), verbose=0)
    np.testing.assert_array_equal(out, 0.0)  # zero-initialised head


# --- numerics -----------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        dict(gelu="exact"),
        dict(gelu="tanh"),
        dict(gelu="exact", pooling="gap", class_token=False),
        dict(gelu="exact", representation_size=16, image_size=(32, 48)),
    ],
    ids=["exact", "tanh", "gap", "pre_logits_non_square"],
)
def test_tiny_model_matches_numpy_reference(options):
    gelu = options.pop("gelu")
    pooling = options.pop("pooling", "token")
    size = options.pop("image_size", (32, 32))
    params = reference.make_vit_checkpoint(
        hidden_dim=32,
        depth=2,
        mlp_dim=64,
        num_heads=2,
        patch_size=8,
        image_size=size,
        num_classes=10,
        **options,
    )
    model = tiny_model(
        image_size=size, pooling=pooling, gelu_approximate=gelu == "tanh", **options
    )
    assign_reference_params(model, params)
    x = images(batch=3, size=size)
    expected = reference.vit_forward(
        params, x, num_heads=2, patch_size=8, gelu=gelu, pooling=pooling
    )
    np.testing.assert_allclose(
        model.predict(x, verbose=0), expected, atol=1e-5, rtol=1e-5
    )


def test_hybrid_matches_numpy_reference():
    model = keras_vit.ViT(
        "test/8",
        backbone=keras_vit.ResNetSpec((1, 2), width=32),
        image_size=64,
        num_classes=5,
        gelu_approximate=True,
    )
    assert model.get_layer("block2_unit1_conv_proj").strides == (2, 2)
    keras_blocks = [
        layer.name for layer in model.layers if layer.name.startswith("encoderblock_")
    ]
    assert keras_blocks == ["encoderblock_0", "encoderblock_1"]  # test variant depth
    params = reference.make_vit_checkpoint(
        hidden_dim=32,
        depth=2,
        mlp_dim=64,
        num_heads=2,
        patch_size=1,
        image_size=(64, 64),
        num_classes=5,
        resnet_layers=(1, 2),
        resnet_width=32,
    )
    assign_reference_params(model, params)
    x = images(batch=2, size=(64, 64))
    expected = reference.vit_forward(
        params, x, num_heads=2, patch_size=1, gelu="tanh", resnet_layers=(1, 2)
    )
    np.testing.assert_allclose(
        model.predict(x, verbose=0), expected, atol=1e-4, rtol=1e-5
    )


def test_preprocessing_maps_pixels_to_model_range():
    model = tiny_model(include_preprocessing=True)
    plain = tiny_model()
    plain.set_weights(model.get_weights())
    randomize(plain)
    model.set_weights(plain.get_weights())
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        model.predict(pixels, verbose=0),
        plain.predict(pixels / 127.5 - 1.0, verbose=0),
        atol=1e-5,
    )


# --- options and outputs ------------------------------------------------------


def test_heads_and_pooling_outputs():
    assert tiny_model().output_shape == (None, 10)
    assert tiny_model(include_top=False).output_shape == (None, 32)
    assert tiny_model(include_top=False, representation_size=24).output_shape == (
        None,
        24,
    )
    assert tiny_model(include_top=False, pooling=None).output_shape == (None, 17, 32)
    model = tiny_model(class_token=False, pooling="gap")
    assert "class_token" not in [layer.name for layer in model.layers]
    assert model.get_layer("posembed_input").embedding.shape == (1, 16, 32)
    assert tiny_model(classifier_activation="softmax").predict(images(), verbose=0).sum(
        -1
    ) == pytest.approx(1.0)


def test_paper_initialisation():
    model = keras_vit.ViT("S/16", image_size=64, num_classes=7)
    head = model.get_layer("head")
    np.testing.assert_array_equal(head.kernel.numpy(), 0.0)
    np.testing.assert_array_equal(head.bias.numpy(), 0.0)
    np.testing.assert_array_equal(model.get_layer("class_token").token.numpy(), 0.0)
    assert model.get_layer("posembed_input").embedding.numpy().std() == pytest.approx(
        0.02, rel=0.1
    )
    block = model.get_layer("encoderblock_0")
    assert block.norm_1.epsilon == 1e-6 and block.norm_2.epsilon == 1e-6
    assert model.get_layer("encoder_norm").epsilon == 1e-6
    assert block.gelu_approximate is False
    qkv = block.attention.qkv_kernel.numpy()
    limit = np.sqrt(6 / (384 + 384))  # Xavier-uniform per (D, D) projection
    assert np.abs(qkv).max() <= limit and np.abs(qkv).max() > 0.9 * limit


def test_stochastic_depth_grows_linearly_with_depth():
    model = keras_vit.ViT("Ti/16", image_size=32, drop_path_rate=0.2)
    rates = [model.get_layer(f"encoderblock_{i}").drop_path_rate for i in range(12)]
    np.testing.assert_allclose(rates, np.linspace(0, 0.2, 12), atol=1e-7)


def test_non_square_and_other_sizes_run():
    model = tiny_model(image_size=(24, 40))
    assert model.predict(images(size=(24, 40)), verbose=0).shape == (2, 10)
    assert keras_vit.ViT("test/4", image_size=12).predict(
        images(size=(12, 12)), verbose=0
    ).shape == (2, 1000)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            dict(variant="test/8", image_size=30),
            r"height \(30\) is not divisible by the token stride 8",
        ),
        (dict(variant="test/8", image_size=(32, 36)), r"width \(36\) is not divisible"),
        (dict(variant="Q/16"), "Unknown variant size 'Q'"),
        (dict(variant="B16"), "Unknown variant 'B16'"),
        (dict(variant="R77+B/16"), "Unknown hybrid backbone 'R77'"),
        (
            dict(variant="test/6", backbone=(1,)),
            "not a multiple of the backbone's stride 4",
        ),
        (dict(variant="test/8", pooling=None), "needs `include_top=False`"),
        (dict(variant="test/8", class_token=False), "needs a class token"),
        (dict(variant="test/8", pooling="max"), "`pooling` must be one of"),
        (dict(variant="test/8", channels=0), "`channels` must be a positive integer"),
        (dict(variant="B/0"), "patch size in 'B/0' must be a positive integer"),
        (dict(variant="test/8", num_classes=0), "`num_classes` must be a positive"),
        (dict(variant="test/8", num_classes=2.5), "`num_classes` must be a positive"),
        (dict(variant="test/8", representation_size=0), "`representation_size`"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    variant = kwargs.pop("variant")
    kwargs.setdefault("image_size", 32)
    with pytest.raises(ValueError, match=message):
        keras_vit.ViT(variant, **kwargs)


def test_wrong_channel_count_raises_value_error():
    model = tiny_model()
    with pytest.raises(ValueError, match="incompatible"):
        model(np.zeros((1, 32, 32, 1), "float32"))
    gray = tiny_model(channels=1)
    assert gray.predict(np.zeros((1, 32, 32, 1), "float32"), verbose=0).shape == (1, 10)


# --- feature extraction and resizing -----------------------------------------


def test_feature_extractor_outputs():
    model = tiny_model(representation_size=16)
    randomize(model)
    features = keras_vit.feature_extractor(model)
    x = images()
    out = features(x)
    assert set(out) == {"pooled", "tokens", "block_0", "block_1"}
    assert out["pooled"].shape == (2, 16) and out["tokens"].shape == (2, 17, 32)
    head = model.get_layer("head")
    logits = np.asarray(out["pooled"]) @ head.kernel.numpy() + head.bias.numpy()
    np.testing.assert_allclose(logits, model(x), atol=1e-5)
    norm = model.get_layer("encoder_norm")
    np.testing.assert_allclose(norm(out["block_1"]), out["tokens"], atol=1e-5)
    only_last = keras_vit.feature_extractor(model, blocks=[-1], include_tokens=False)
    assert set(only_last(x)) == {"pooled", "block_1"}
    with pytest.raises(ValueError, match="out of range"):
        keras_vit.feature_extractor(model, blocks=[5])


def test_with_image_size_resamples_and_keeps_everything_else():
    model = tiny_model()
    randomize(model)
    bigger = keras_vit.with_image_size(model, (48, 64))
    assert bigger.input_shape == (None, 48, 64, 3)
    table = bigger.get_layer("posembed_input").embedding.numpy()
    expected = keras_vit.resample_position_embedding(
        model.get_layer("posembed_input").embedding.numpy(), (6, 8), (4, 4)
    )
    np.testing.assert_allclose(table, expected, atol=1e-6)
    for name in ("embedding", "encoderblock_1", "head"):
        for a, b in zip(
            model.get_layer(name).weights,
            bigger.get_layer(name).weights,
            strict=True,
        ):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    same = keras_vit.with_image_size(model, 32)
    np.testing.assert_allclose(same(images()), model(images()), atol=1e-6)
    with pytest.raises(ValueError, match="not a multiple of the model's token stride"):
        keras_vit.with_image_size(model, 36)


# --- precision, training, compilation -----------------------------------------


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_model(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_model()
    randomize(model, scale=0.05)
    assert model.get_layer("encoderblock_0").compute_dtype == policy.split("_")[1]
    out = model.predict(images(), verbose=0)
    assert out.dtype == np.float32  # float32 logits from the head
    keras.config.set_dtype_policy("float32")
    reference_model = tiny_model()
    reference_model.set_weights(model.get_weights())
    np.testing.assert_allclose(
        out, reference_model.predict(images(), verbose=0), atol=0.1
    )


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_one_training_step_reduces_the_loss(policy):
    keras.config.set_dtype_policy(policy)
    model = tiny_model(dropout_rate=0.0)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=False,
    )
    x, y = images(batch=16), np.arange(16) % 10
    before = model.evaluate(x, y, verbose=0)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    after = model.evaluate(x, y, verbose=0)
    assert after < before


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_model_compiles_with_xla():
    model = tiny_model(drop_path_rate=0.1, dropout_rate=0.1)
    randomize(model, scale=0.05)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    x, y = images(batch=8), np.arange(8) % 10
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    eager = model(x, training=False)
    np.testing.assert_allclose(model.predict(x, verbose=0), eager, atol=1e-5)
