"""Pre-activation ResNets and AlterNets: sizes, layout, numerics, saving, errors."""

import dataclasses

import keras
import numpy as np
import pytest
import reference_cnn
from helpers import assert_config_is_constructor_args
from helpers import images

import keras_vit
from keras_vit.models.features import feature_extractor
from keras_vit.models.layout import LayoutError
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import drop_path_rates
from keras_vit.parkkim.cnn.alternet import AlterNet
from keras_vit.parkkim.cnn.alternet import AlterNet18
from keras_vit.parkkim.cnn.alternet import AlterNet50
from keras_vit.parkkim.cnn.layout import CNNLayout
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet18
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet50
from keras_vit.parkkim.cnn.resnet import ResNet
from keras_vit.parkkim.cnn.variants import ALTERNETS
from keras_vit.parkkim.cnn.variants import PREACT_RESNETS
from keras_vit.parkkim.cnn.variants import CNNVariant
from keras_vit.parkkim.layers.conv_blocks import PreActBlock
from keras_vit.parkkim.layers.local_attention import WindowAttention2D
from keras_vit.parkkim.layers.local_attention import relative_position_index
from keras_vit.parkkim.layers.msa_block import PreActAttentionBlock

FAMILIES = {"preact": (PreActResNet, PREACT_RESNETS), "alternet": (AlterNet, ALTERNETS)}
# Small rows run on CIFAR-stem inputs; the paper's rows at 224 px.
ROW_IMAGE_SIZE = {"test": 16, "mini": 32}


def _build(family, row, **kwargs):
    constructor, _ = FAMILIES[family]
    kwargs.setdefault("image_size", ROW_IMAGE_SIZE.get(row, 224))
    with keras.StatelessScope(initialize_variables=False):
        return constructor(row, **kwargs)


def _reference(family, row, num_classes=1000):
    """Reference shapes from the paper code's definitions (never our code)."""
    image = ROW_IMAGE_SIZE.get(row)
    if image is None:  # the paper's rows, ImageNet stem, 7x7 windows
        if family == "preact":
            block, depths = reference_cnn.PAPER_PREACT_RESNETS[row]
            return reference_cnn.module_shapes(block, depths, num_classes=num_classes)
        block, depths, msa = reference_cnn.PAPER_ALTERNETS[row]
        return reference_cnn.module_shapes(block, depths, msa, num_classes=num_classes)
    # Small rows: written out by hand from the table's comments.
    widths = (8, 16) if row == "test" else (16, 32, 64, 128)
    depths = (1, 2) if row == "test" else (2, 2, 2, 2)
    if family == "preact":
        return reference_cnn.module_shapes(
            "basic",
            depths,
            num_classes=num_classes,
            stem=False,
            widths=widths,
            stem_width=widths[0],
        )
    if row == "test":  # 16 px: stage 2 is 8x8 -> 4x4 windows -> (7, 7) table
        return reference_cnn.module_shapes(
            "basic",
            depths,
            (0, 1),
            num_classes=num_classes,
            stem=False,
            widths=widths,
            stem_width=8,
            heads=(1, 2),
            dim_head=4,
            windows=[None, (7, 7)],
        )
    # mini at 32 px: maps 32, 16, 8, 4; 4x4 windows everywhere -> (7, 7).
    return reference_cnn.module_shapes(
        "basic",
        depths,
        (0, 1, 1, 1),
        num_classes=num_classes,
        stem=False,
        widths=widths,
        stem_width=16,
        heads=(1, 2, 4, 8),
        dim_head=16,
        windows=[(7, 7)] * 4,
    )


ROWS = [(family, row) for family, (_, table) in FAMILIES.items() for row in table]


@pytest.mark.parametrize("family,row", ROWS, ids=[f"{f}-{r}" for f, r in ROWS])
def test_parameter_count_equals_paper_code_definition(family, row):
    num_classes = 1000 if row not in ROW_IMAGE_SIZE else 10
    model = _build(family, row, num_classes=num_classes)
    shapes = _reference(family, row, num_classes)
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    # Trainable weights are PyTorch's parameters; BN running stats are buffers.
    assert trainable == reference_cnn.count(shapes, parameters_only=True)
    assert model.count_params() == reference_cnn.count(shapes)


def test_every_paper_row_has_an_independent_description():
    small = set(ROW_IMAGE_SIZE)
    assert set(reference_cnn.PAPER_PREACT_RESNETS) | small == set(PREACT_RESNETS)
    assert set(reference_cnn.PAPER_ALTERNETS) | small == set(ALTERNETS)


# Trainable counts (what the paper code's `count_parameters` prints), pinned
# as computed: neither the paper nor its repository publishes them.
PAPER_COUNTS = {
    ("preact", "50"): 25_549_352,
    ("alternet", "50"): 35_915_038,
    ("preact", "18"): 11_687_720,
    ("alternet", "18"): 9_968_803,
}


@pytest.mark.parametrize("key", sorted(PAPER_COUNTS))
def test_named_constructors_and_counts(key):
    constructor = {
        ("preact", "50"): PreActResNet50,
        ("alternet", "50"): AlterNet50,
        ("preact", "18"): PreActResNet18,
        ("alternet", "18"): AlterNet18,
    }[key]
    with keras.StatelessScope(initialize_variables=False):
        model = constructor()
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == PAPER_COUNTS[key]
    family = "preact_resnet" if key[0] == "preact" else "alternet"
    assert model.name == f"{family}{key[1]}"


def test_preact_resnet50_is_torchvision_resnet50_with_batch_norms_moved():
    # torchvision documents resnet50's num_params as 25,557,032 (post-act,
    # stride on the 3x3, BN after every conv, BN on projection shortcuts).
    # The pre-act net has the same convolutions and head but BN(in) before
    # each block instead of BN(w), BN(w), BN(4w) after the convolutions and
    # BN(4w) on projections, no stem BN, and one BN on the final 2048 maps.
    post, pre = 2 * 64, 2 * 2048  # stem BN; head BN (weight and bias each)
    channels = 64
    for stage, blocks in enumerate((3, 4, 6, 3)):
        width = 64 * 2**stage
        for _ in range(blocks):
            post += 2 * (width + width + 4 * width)
            if channels != 4 * width:
                post += 2 * 4 * width
            pre += 2 * (channels + width + width)
            channels = 4 * width
    with keras.StatelessScope(initialize_variables=False):
        model = PreActResNet50()
    trainable = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert trainable == 25_557_032 - post + pre


# --- layout and names ---------------------------------------------------------


def test_alternet50_layout_names_heads_and_windows():
    model = _build("alternet", "50")
    layout = CNNLayout.of(model)
    assert list(layout.block_names) == [
        "stage1_block1", "stage1_block2", "stage1_block3",
        "stage2_block1", "stage2_block2", "stage2_block3", "stage2_msa4",
        "stage3_block1", "stage3_msa2", "stage3_block3", "stage3_msa4",
        "stage3_block5", "stage3_msa6",
        "stage4_block1", "stage4_msa2", "stage4_block3", "stage4_msa4",
    ]  # fmt: skip
    assert layout.stage_names == (
        "stage1_block3", "stage2_msa4", "stage3_msa6", "stage4_msa4",
    )  # fmt: skip
    assert layout.msa_names == (
        "stage2_msa4", "stage3_msa2", "stage3_msa4",
        "stage3_msa6", "stage4_msa2", "stage4_msa4",
    )  # fmt: skip
    assert layout.pooled_name == "pool" and layout.head_name == "head"
    expected = {  # name: (heads, map side, window); stage 4 is global
        "stage2_msa4": (6, 28, (7, 7)),
        "stage3_msa2": (12, 14, (7, 7)),
        "stage4_msa4": (24, 7, (7, 7)),
    }
    for name, (heads, side, window) in expected.items():
        layer = model.get_layer(name)
        assert layer.num_heads == heads and layer.head_dim == 64
        assert layer.output.shape[1:3] == (side, side)
        assert layer.attention.window == window
    assert model.get_layer("stage4_msa4").output.shape[-1] == 2048
    assert [layer.name for layer in model.layers[:4]] == [
        "images",
        "stem_pad",
        "stem_conv",
        "stem_pool",
    ]
    assert [layer.name for layer in model.layers[-4:]] == [
        "head_norm",
        "head_relu",
        "pool",
        "head",
    ]


def test_preact_resnet_names_and_strides():
    model = _build("preact", "50")
    names = CNNLayout.of(model).block_names
    assert len(names) == 16 and all("_block" in n for n in names)
    strides = {n: model.get_layer(n).strides for n in names}
    assert [n for n, s in strides.items() if s == 2] == [
        "stage2_block1",
        "stage3_block1",
        "stage4_block1",
    ]
    assert model.get_layer("stage4_block3").output.shape == (None, 7, 7, 2048)


@pytest.mark.parametrize("constructor", [AlterNet, PreActResNet, ResNet])
def test_drop_path_grows_linearly_over_all_blocks(constructor):
    model = constructor("test", image_size=16, drop_path_rate=0.2)
    rates = [model.get_layer(n).drop_path_rate for n in CNNLayout.of(model).block_names]
    np.testing.assert_allclose(rates, [0.0, 0.1, 0.2])
    # One ramp for every family: the ViT's encoder draws the same rates.
    assert tuple(rates) == drop_path_rates(0.2, 3)
    block = EncoderOptions(drop_path_rate=0.2).block_arguments
    assert tuple(block(i, 3)["drop_path_rate"] for i in range(3)) == tuple(rates)
    assert drop_path_rates(0.3, 1) == (0.0,)


# --- options ------------------------------------------------------------------

CONSTRUCTORS = {"resnet": ResNet, "preact": PreActResNet, "alternet": AlterNet}


@pytest.mark.parametrize("family", sorted(CONSTRUCTORS))
def test_options_whole_or_by_keyword_build_the_same_model(family):
    constructor = CONSTRUCTORS[family]
    chosen = {"stem": "cifar", "pooling": "max", "drop_path_rate": 0.2,
              "classifier_activation": "softmax"}  # fmt: skip
    if family == "alternet":
        chosen.update(window_size=2, dropout_rate=0.1)
    common = {"image_size": 16, "num_classes": 3, "name": "m"}
    by_keyword = constructor("test", **common, **chosen)
    whole = constructor("test", **common, options=CNNOptions(**chosen))
    mixed = constructor(
        "test", **common, options=CNNOptions(**chosen).replace(pooling="avg"),
        pooling="max",
    )  # fmt: skip
    assert whole.to_json() == by_keyword.to_json() == mixed.to_json()
    default = constructor("test", **common)
    assert default.to_json() == constructor("test", **common, options=None).to_json()
    assert default.to_json() != whole.to_json()


def test_constructors_take_the_options_whole():
    # The EncoderOptions lesson: variant, the model's own arguments, `options`
    # and `**cnn_options` (they were 10 and 12 named parameters).
    import inspect

    for constructor in CONSTRUCTORS.values():
        parameters = inspect.signature(constructor).parameters
        assert list(parameters) == [
            "variant", "num_classes", "image_size", "channels", "include_top",
            "name", "options", "cnn_options",
        ]  # fmt: skip


def test_cnn_options_are_frozen_and_validated():
    options = CNNOptions(stem="cifar")
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.stem = "imagenet"
    assert options.replace(pooling=None).pooling is None
    assert options.for_variant(ALTERNETS["50"]) == CNNOptions(
        stem="cifar", window_size=7
    )
    for bad, match in [
        ({"stem": "big"}, "`stem` must be one of"),
        ({"pooling": "gap"}, "`pooling` must be one of"),
        ({"drop_path_rate": 1.0}, "`drop_path_rate` must be a number in"),
        ({"dropout_rate": True}, "`dropout_rate` must be a number in"),
        ({"window_size": 0}, "`window_size` must be a positive integer"),
        ({"window_size": 2.0}, "`window_size` must be a positive integer"),
        ({"classifier_activation": 3}, "`classifier_activation` must be"),
    ]:
        with pytest.raises(ValueError, match=match):
            CNNOptions(**bad)
    with pytest.raises(TypeError, match="did you mean 'drop_path_rate'"):
        options.replace(drop_path=0.1)


def test_keywords_are_checked_against_the_constructor():
    with pytest.raises(TypeError, match="'drop_path' \\(did you mean 'drop_path_rate'"):
        AlterNet("test", image_size=16, drop_path=0.1)
    with pytest.raises(TypeError, match="'num_class' \\(did you mean 'num_classes'"):
        PreActResNet("test", image_size=16, num_class=3)
    with pytest.raises(TypeError, match="must be a keras_vit.parkkim.cnn.CNNOptions"):
        AlterNet("test", image_size=16, options={"stem": "cifar"})


@pytest.mark.parametrize("constructor", [ResNet, PreActResNet])
def test_msa_options_are_refused_without_msa_blocks(constructor):
    # As keywords they are not the constructor's (as before); in `options`
    # they are named.
    with pytest.raises(TypeError, match="'window_size'"):
        constructor("test", image_size=16, window_size=4)
    with pytest.raises(ValueError, match="`dropout_rate` applies to MSA blocks"):
        constructor("test", image_size=16, options=CNNOptions(dropout_rate=0.1))


# --- numerics -----------------------------------------------------------------


def _numpy_local_attention(x, wq, wkv, wo, bo, table, heads, window):
    """The paper code's LocalAttention + Attention2d in NumPy (NHWC)."""
    b, h, w, _ = x.shape
    inner = wq.shape[1]
    dh = inner // heads
    out = np.zeros((b, h, w, wo.shape[1]))
    coords = [(r, c) for r in range(window) for c in range(window)]
    bias = np.array(
        [
            [table[k[0] - q[0] + window - 1, k[1] - q[1] + window - 1] for k in coords]
            for q in coords
        ]
    )
    for i in range(0, h, window):
        for j in range(0, w, window):
            patch = x[:, i : i + window, j : j + window].reshape(b, -1, x.shape[-1])
            q = (patch @ wq).reshape(b, -1, heads, dh).transpose(0, 2, 1, 3)
            kv = patch @ wkv
            k = kv[..., :inner].reshape(b, -1, heads, dh).transpose(0, 2, 1, 3)
            v = kv[..., inner:].reshape(b, -1, heads, dh).transpose(0, 2, 1, 3)
            dots = q @ k.transpose(0, 1, 3, 2) * dh**-0.5 + bias
            attn = np.exp(dots - dots.max(-1, keepdims=True))
            attn /= attn.sum(-1, keepdims=True)
            ctx = (attn @ v).transpose(0, 2, 1, 3).reshape(b, -1, inner)
            y = ctx @ wo + bo
            out[:, i : i + window, j : j + window] = y.reshape(b, window, window, -1)
    return out


def test_window_attention_matches_numpy_reference():
    layer = WindowAttention2D(num_heads=2, head_dim=3, output_dim=5, window_size=2)
    x = images(batch=2, size=(4, 6), channels=4).astype("float64")
    layer.build(x.shape)
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.5, weight.shape).astype("float32"))
    wq, wkv, wo, bo = (
        w.numpy()
        for w in (
            layer.query.kernel,
            layer.key_value.kernel,
            layer.output_projection.kernel,
            layer.output_projection.bias,
        )
    )
    table = layer.relative_position_bias.numpy()
    expected = _numpy_local_attention(x, wq, wkv, wo, bo, table, 2, 2)
    actual = layer(x.astype("float32"))
    np.testing.assert_allclose(actual, expected, atol=2e-5, rtol=1e-5)


def test_window_attention_is_local_inside_windows_and_global_beyond():
    layer = WindowAttention2D(num_heads=1, head_dim=4, output_dim=4, window_size=2)
    x = images(batch=1, size=(4, 4), channels=4)
    y = x.copy()
    y[0, 0, 0] += 5.0  # perturb one pixel of the top-left window
    changed = np.abs(np.asarray(layer(y)) - np.asarray(layer(x))).max(-1)[0] > 1e-6
    expected = np.zeros((4, 4), bool)
    expected[:2, :2] = True
    np.testing.assert_array_equal(changed, expected)

    wide = WindowAttention2D(num_heads=1, head_dim=4, output_dim=4, window_size=7)
    changed = np.abs(np.asarray(wide(y)) - np.asarray(wide(x))).max(-1)[0] > 1e-6
    assert changed.all()  # a map smaller than the window: global attention
    assert wide.window == (4, 4)


def test_relative_position_index_known_answer():
    # Positions (0,0), (0,1), (1,0), (1,1); offsets indexed in a 3x3 table.
    np.testing.assert_array_equal(
        relative_position_index(2, 2),
        [[4, 5, 7, 8], [3, 4, 6, 7], [1, 2, 4, 5], [0, 1, 3, 4]],
    )


def test_strided_block_samples_like_the_shortcut():
    # A 3x3/2 convolution with symmetric padding centres its taps on the even
    # pixels, where the 1x1/2 shortcut samples: an impulse at an odd pixel
    # (1, 1) reaches output (0, 0) and (1, 1) through the 3x3 taps, one at an
    # even pixel (2, 2) reaches output (1, 1) only (and the shortcut).
    block = PreActBlock(1, strides=2, bottleneck=False)
    block.build((1, 6, 6, 1))
    block.conv_1.kernel.assign(np.ones((3, 3, 1, 1), "float32"))
    identity = np.pad(np.ones((1, 1), "float32"), 1).reshape(3, 3, 1, 1)
    block.conv_2.kernel.assign(identity)
    block.shortcut.kernel.assign(np.zeros((1, 1, 1, 1), "float32"))
    for position, reached in (
        ((1, 1), [(0, 0), (0, 1), (1, 0), (1, 1)]),
        ((2, 2), [(1, 1)]),
    ):
        x = np.zeros((1, 6, 6, 1), "float32")
        x[0, position[0], position[1], 0] = 10.0
        base = block(np.zeros_like(x)).numpy()[0, ..., 0]
        out = block(x).numpy()[0, ..., 0]
        hit = sorted(zip(*np.nonzero(np.abs(out - base) > 1e-6), strict=True))
        assert [tuple(map(int, p)) for p in hit] == reached


# --- saving, precision, training --------------------------------------------


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        values = rng.normal(0, 0.2, weight.shape)
        if "variance" in weight.path:
            values = np.abs(values) + 0.5
        weight.assign(values.astype(weight.dtype))


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_keras_file_round_trip_is_bit_identical(family, tmp_path):
    constructor, _ = FAMILIES[family]
    model = constructor("test", image_size=16, num_classes=3)
    _randomize(model)
    x = images(batch=2, size=(16, 16))
    expected = model.predict(x, verbose=0)
    path = tmp_path / "model.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_array_equal(restored.predict(x, verbose=0), expected)
    assert restored.to_json() == model.to_json()
    assert not any(isinstance(layer, keras.layers.Lambda) for layer in model.layers)


def test_layer_configs_are_constructor_arguments():
    for layer in (
        PreActBlock(4),
        WindowAttention2D(2, 4, 8),
        PreActAttentionBlock(4, 2),
    ):
        assert_config_is_constructor_args(layer)
        type(layer).from_config(layer.get_config())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_mixed_bfloat16_gives_float32_logits(family):
    keras.config.set_dtype_policy("mixed_bfloat16")
    constructor, _ = FAMILIES[family]
    model = constructor("test", image_size=16, num_classes=3)
    assert model.get_layer("stage2_block1").compute_dtype == "bfloat16"
    logits = model(images(batch=2, size=(16, 16)), training=True)
    assert logits.dtype == "float32"
    assert np.isfinite(logits.numpy()).all()


def test_msa_block_attention_scores_under_mixed_precision():
    keras.config.set_dtype_policy("mixed_bfloat16")
    block = PreActAttentionBlock(
        4, num_heads=2, head_dim=4, window_size=2, bottleneck=False
    )
    out, scores = block(
        images(batch=3, size=(4, 6), channels=4), return_attention_scores=True
    )
    assert out.shape == (3, 4, 6, 4) and out.dtype == "bfloat16"
    assert scores.shape == (3, 6, 2, 4, 4) and scores.dtype == "float32"
    np.testing.assert_allclose(scores.numpy().sum(-1), 1.0, atol=1e-5)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_one_training_step_lowers_the_loss(family):
    constructor, _ = FAMILIES[family]
    model = constructor("test", image_size=16, num_classes=3)
    x = images(batch=8, size=(16, 16))
    y = np.arange(8) % 3
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss_fn)
    before = float(loss_fn(y, model(x, training=True)))
    model.train_on_batch(x, y)
    after = float(loss_fn(y, model(x, training=True)))
    assert after < before


def test_headless_outputs():
    model = AlterNet("test", image_size=16, include_top=False, pooling=None)
    assert model.output_shape == (None, 8, 8, 16)
    model = PreActResNet("test", image_size=16, include_top=False, pooling="max")
    assert model.output_shape == (None, 16)


# --- errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: AlterNet("49"), "Unknown AlterNet variant '49'"),
        (lambda: PreActResNet("50", image_size=200), "`image_size`"),
        (lambda: AlterNet("50", image_size=32, stem="cifar"), "`window_size`=7"),
        (lambda: AlterNet("test", image_size=16, window_size=3), "`window_size`=3"),
        (lambda: AlterNet("test", image_size=16, window_size=0), "`window_size`"),
        (lambda: AlterNet("test", image_size=16, stem="big"), "`stem`"),
        (lambda: PreActResNet("test", image_size=16, pooling=None), "`pooling=None`"),
        (lambda: PreActResNet("test", image_size=16, pooling="gap"), "`pooling`"),
        (lambda: AlterNet("test", image_size=16, drop_path_rate=1.0), "drop_path_rate"),
        (lambda: AlterNet("test", image_size=16, dropout_rate=-1), "dropout_rate"),
        (lambda: PreActResNet("test", image_size=16, num_classes=0), "num_classes"),
        (lambda: PreActResNet("test", image_size=16, channels=0), "`channels`"),
        (lambda: PreActResNet(ALTERNETS["test"], image_size=16), "`variant`"),
        (
            lambda: CNNVariant("basic", (2, 1), (8, 16), (0, 1), (1, 1)),
            "`msa_blocks`: stage 2 has 1 MSA blocks but only 1",
        ),
        (lambda: CNNVariant("wide", (2,)), "`block`"),
        (lambda: CNNVariant("basic", (2, 2), widths=(8,)), "`widths`"),
        (lambda: CNNVariant("basic", (2, 2), (8, 16), (0, 1)), "`num_heads`"),
        (lambda: PreActBlock(4, strides=3), "`strides`"),
        (lambda: WindowAttention2D(0, 4, 4), "`num_heads`"),
    ],
)
def test_bad_arguments_name_the_argument(build, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace("[", r"\[")):
        build()


def _bn_params(layer):
    return [
        w.numpy().astype("float64")
        for w in (layer.gamma, layer.beta, layer.moving_mean, layer.moving_variance)
    ]


@pytest.mark.parametrize("bottleneck", [True, False], ids=["bottleneck", "basic"])
def test_preact_block_matches_paper_definition(bottleneck):
    block = PreActBlock(3, strides=2, bottleneck=bottleneck)
    x = images(batch=2, size=(6, 6), channels=5).astype("float64")
    block.build(x.shape)
    _randomize(block, seed=2)
    p = {
        "bn": _bn_params(block.norm_1),
        "bn2": _bn_params(block.norm_2),
        "shortcut": block.shortcut.kernel.numpy().astype("float64"),
        "conv1": block.conv_1.kernel.numpy(),
        "conv2": block.conv_2.kernel.numpy(),
    }
    if bottleneck:
        p["bn3"] = _bn_params(block.norm_3)
        p["conv3"] = block.conv_3.kernel.numpy()
    expected = reference_cnn.preact_block_forward(x, p, 2, bottleneck)
    actual = block(x.astype("float32"), training=False)
    assert actual.shape == expected.shape == (2, 3, 3, 3 * (4 if bottleneck else 1))
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("widen", [True, False], ids=["projection", "identity"])
def test_msa_block_matches_paper_definition(widen):
    channels = 4 if widen else 8
    block = PreActAttentionBlock(
        8, num_heads=2, head_dim=3, window_size=2, bottleneck=False
    )
    x = images(batch=2, size=(4, 4), channels=channels).astype("float64")
    block.build(x.shape)
    _randomize(block, seed=3)
    att = block.attention
    p = {
        "norm1": _bn_params(block.norm_1),
        "norm2": _bn_params(block.norm_2),
        "conv": block.reduce.kernel.numpy(),
        "to_q": att.query.kernel.numpy()[None, None],
        "to_kv": att.key_value.kernel.numpy()[None, None],
        "to_out": att.output_projection.kernel.numpy()[None, None],
        "to_out_bias": att.output_projection.bias.numpy(),
        "pos_embedding": att.relative_position_bias.numpy(),
    }
    assert (block.shortcut is not None) == widen
    if widen:
        p["shortcut"] = block.shortcut.kernel.numpy()
    expected = reference_cnn.msa_block_forward(x, p, heads=2, window=2)
    actual = block(x.astype("float32"), training=False)
    np.testing.assert_allclose(actual, expected, atol=1e-4, rtol=1e-4)


def test_whole_model_matches_paper_definition():
    model = AlterNet("test", image_size=16, num_classes=3)
    _randomize(model, seed=4)
    x = images(batch=2, size=(16, 16)).astype("float64")

    def block_params(layer):
        if isinstance(layer, PreActAttentionBlock):
            att = layer.attention
            p = {
                "norm1": _bn_params(layer.norm_1),
                "norm2": _bn_params(layer.norm_2),
                "conv": layer.reduce.kernel.numpy(),
                "to_q": att.query.kernel.numpy()[None, None],
                "to_kv": att.key_value.kernel.numpy()[None, None],
                "to_out": att.output_projection.kernel.numpy()[None, None],
                "to_out_bias": att.output_projection.bias.numpy(),
                "pos_embedding": att.relative_position_bias.numpy(),
            }
        else:
            p = {
                "bn": _bn_params(layer.norm_1),
                "bn2": _bn_params(layer.norm_2),
                "conv1": layer.conv_1.kernel.numpy(),
                "conv2": layer.conv_2.kernel.numpy(),
            }
        if layer.shortcut is not None:
            p["shortcut"] = layer.shortcut.kernel.numpy()
        return p

    y = reference_cnn.conv2d(x, model.get_layer("stem_conv").kernel.numpy())
    y = reference_cnn.preact_block_forward(
        y, block_params(model.get_layer("stage1_block1")), 1, False
    )
    y = reference_cnn.preact_block_forward(
        y, block_params(model.get_layer("stage2_block1")), 2, False
    )
    y = reference_cnn.msa_block_forward(
        y, block_params(model.get_layer("stage2_msa2")), heads=2, window=4
    )
    y = np.maximum(
        reference_cnn.batch_norm(y, _bn_params(model.get_layer("head_norm"))), 0
    )
    head = model.get_layer("head")
    expected = y.mean((1, 2)) @ head.kernel.numpy() + head.bias.numpy()
    np.testing.assert_allclose(
        model.predict(x, verbose=0), expected, atol=1e-4, rtol=1e-4
    )


def keras_vit_vit():
    from keras_vit.models.vit import ViT

    return ViT("test/4", image_size=16, num_classes=3)


def test_feature_extractor_per_block_and_stage():
    model = AlterNet("test", image_size=16, num_classes=3)
    features = feature_extractor(model)
    out = features(images(batch=2, size=(16, 16)))
    assert sorted(out) == ["block_0", "block_1", "block_2", "features", "pooled"]
    assert out["block_0"].shape == (2, 16, 16, 8)
    assert out["block_2"].shape == (2, 8, 8, 16)
    np.testing.assert_allclose(
        out["pooled"], np.mean(out["features"], (1, 2)), atol=1e-6
    )
    assert (
        features.count_params()
        == model.count_params() - model.get_layer("head").count_params()
    )
    only = feature_extractor(
        model, blocks=[-1], include_pooled=False, include_tokens=False
    )
    assert list(only.output) == ["block_2"]
    with pytest.raises(ValueError, match="Block index 3 is out of range"):
        feature_extractor(model, blocks=[3])
    headless = PreActResNet("test", image_size=16, include_top=False, pooling=None)
    with pytest.raises(LayoutError, match="include_pooled=False"):
        feature_extractor(headless)
    vit = feature_extractor(keras_vit_vit(), blocks=[-1])  # The other kind.
    assert sorted(vit.output) == ["block_1", "pooled", "tokens"]


def test_maps_smaller_than_window_or_kernel_build():
    # 16 px on "mini": stage 4 is 2x2, smaller than the 4x4 window (global
    # attention, a 3x3 bias table); 8 px: stage 3's 2x2 map goes through the
    # padded 3x3/2 convolution to 1x1.
    model = AlterNet("mini", image_size=16, num_classes=10)
    att = model.get_layer("stage4_msa2").attention
    assert att.window == (2, 2) and tuple(att.relative_position_bias.shape) == (3, 3)
    model = PreActResNet("mini", image_size=8, include_top=False, pooling=None)
    assert model.output_shape == (None, 1, 1, 128)


def test_feature_extractor_is_one_contract_for_vits_and_cnns():
    model = keras_vit.AlterNet("test", num_classes=3, image_size=16)
    features = keras_vit.feature_extractor(model, blocks=[-1])
    x = np.zeros((2, 16, 16, 3), "float32")
    out = features(x)
    # (The deprecated `keras_vit.cnn_feature_extractor` alias left with the
    # move of the CNNs into `keras_vit.parkkim`.)
    assert set(out) == {"pooled", "features", "block_2"}
    names = {"pooled": "pool", "features": "head_relu", "block_2": "stage2_msa2"}
    direct = keras.Model(
        model.input, {key: model.get_layer(n).output for key, n in names.items()}
    )(x)
    for key in out:
        np.testing.assert_array_equal(np.asarray(out[key]), np.asarray(direct[key]))
    inputs = keras.Input((4, 4, 3))
    other = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="plain")
    with pytest.raises(LayoutError, match="'plain' was not built by keras_vit"):
        keras_vit.feature_extractor(other)


def test_one_dispatcher_tells_the_model_families_apart():
    from keras_vit.models import ModelLayout
    from keras_vit.models import ViTLayout

    assert isinstance(ModelLayout.of(keras_vit_vit()), ViTLayout)
    for build in (keras_vit.AlterNet, keras_vit.PreActResNet):
        layout = ModelLayout.of(build("test", num_classes=3, image_size=16))
        assert isinstance(layout, CNNLayout) and layout.final_key == "features"
    assert ModelLayout.of(keras_vit_vit()).final_key == "tokens"
