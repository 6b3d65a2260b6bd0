"""The one description of a built ViT, and blocks that report their insides."""

from __future__ import annotations

import ast
import pathlib

import keras
import numpy as np
import pytest
import reference
from helpers import assign_reference_params
from helpers import images

import keras_vit
from keras_vit.models import layout as names
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ViTLayout
from keras_vit.models.masked_patch import masked_patch_model

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_layout_of_a_vit():
    model = keras_vit.ViT("test/4", image_size=(16, 24), num_classes=3)
    layout = ViTLayout.of(model)
    assert layout.block_names == ("encoderblock_0", "encoderblock_1")
    assert layout.grid_size == (4, 6) and layout.num_patches == 24
    assert layout.num_prefix_tokens == 1 and layout.depth == 2
    assert layout.image_size == (16, 24) and layout.channels == 3
    assert layout.stride == (4, 4)
    assert layout.pooled_name == "pool" and layout.head_name == "head"
    assert not layout.has_preprocessing
    assert layout.block(-1) is model.get_layer("encoderblock_1")
    assert layout.position_embedding is model.get_layer("posembed_input")
    assert layout.block_indices("all") == [0, 1]
    assert layout.block_indices([-1, 0, 1]) == [0, 1]
    with pytest.raises(ValueError, match="out of range for a model with 2 blocks"):
        layout.block_indices([2])


def test_layout_of_other_shapes_of_vit():
    gap = keras_vit.ViT(
        "test/4", image_size=16, pooling="gap", class_token=False,
        representation_size=8, include_preprocessing=True,
    )  # fmt: skip
    layout = ViTLayout.of(gap)
    assert layout.num_prefix_tokens == 0 and layout.pooled_name == "pre_logits"
    assert layout.has_preprocessing
    headless = keras_vit.ViT("test/4", image_size=16, include_top=False, pooling=None)
    layout = ViTLayout.of(headless)
    assert layout.head is None and layout.pooled_name is None
    with pytest.raises(LayoutError, match="no pooling layer"):
        layout.pooled  # noqa: B018
    hybrid = keras_vit.ViT("test/8", image_size=32, backbone=(1,))
    assert ViTLayout.of(hybrid).stride == (8, 8)
    masked = masked_patch_model("test/4", image_size=16, seed=0)
    assert ViTLayout.of(masked).grid_size == (4, 4)


def test_layout_counts_every_prefix_token():
    # [class, distillation, 4 registers, patches]; the position table of a
    # `no_embed_class` model has no prefix rows, the layout still counts them.
    dinov2 = keras_vit.ViT(
        "test/4", image_size=16, num_registers=4, no_embed_class=True,
        layer_scale_init=1e-5,
    )  # fmt: skip
    layout = ViTLayout.of(dinov2)
    assert (layout.num_prefix_tokens, layout.num_registers) == (5, 4)
    assert layout.position_embedding.num_prefix_tokens == 0
    assert layout.tokens_name == "encoder_norm"
    distilled = ViTLayout.of(keras_vit.ViT("test/4", image_size=16, distillation=True))
    assert distilled.num_prefix_tokens == 2 and distilled.num_registers == 0
    assert distilled.position_embedding.num_prefix_tokens == 2
    fc = ViTLayout.of(
        keras_vit.ViT("test/4", image_size=16, pooling="gap", fc_norm=True)
    )
    assert fc.pooled_name == "fc_norm" and fc.tokens_name == "encoderblock_1"
    siglip = ViTLayout.of(
        keras_vit.ViT("test/4", image_size=16, class_token=False, pooling="map")
    )
    assert siglip.num_prefix_tokens == 0 and siglip.pooled_name == "pool"


def test_layout_refuses_other_models():
    inputs = keras.Input((8, 8, 3))
    other = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="plain")
    with pytest.raises(LayoutError, match="'plain' has no Transformer blocks"):
        ViTLayout.of(other)


def _string_literals(path: pathlib.Path):
    """`(line, text)` of every string constant, f-string parts included."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


# Strings that name a layer of a built ViT. `keras_vit/layers/` is excluded:
# a layer names its own weights ("embedding", "token"), a separate namespace.
_LAYER_NAMES = {
    names.PREPROCESSING, names.EMBEDDING, names.CLASS_TOKEN, names.POSEMB,
    names.POSEMB_DROPOUT, names.ENCODER_NORM, names.POOL, names.PRE_LOGITS,
    names.HEAD, names.PATCH_CORRUPTION, names.MEAN_COLOR_TARGETS,
    names.MASKED_PATCH_HEAD, names.DIST_TOKEN, names.REGISTER_TOKENS,
    names.FC_NORM, names.HEAD_DIST, names.DIST_POOL, names.DISTILLED_LOGITS,
}  # fmt: skip


# Strings equal to a layer name that name something else.
_NOT_LAYER_NAMES = {
    # A weight name (`posembed_input/embedding`) in the no-decay rule.
    ("keras_vit/training/optimizers.py", "embedding"),
    # The original checkpoint layout's key parts, spelled once in the weights
    # vocabulary: they match the layers' names because those were chosen to
    # match them, but a file's keys must not follow a renamed layer.
    ("keras_vit/weights/keys.py", "embedding"),
    ("keras_vit/weights/keys.py", "fc_norm"),
    ("keras_vit/weights/keys.py", "pre_logits"),
    ("keras_vit/weights/keys.py", "head"),
    ("keras_vit/weights/keys.py", "head_dist"),
    # keras-hub's and timm's own parameter names in their dialects' tables.
    ("keras_vit/weights/dialects/keras_hub.py", "class_token"),
    ("keras_vit/weights/dialects/keras_hub.py", "pre_logits"),
    ("keras_vit/weights/dialects/keras_hub.py", "register_tokens"),
    ("keras_vit/weights/dialects/timm.py", "dist_token"),
    ("keras_vit/weights/dialects/timm.py", "head"),
    ("keras_vit/weights/dialects/timm.py", "fc_norm"),
    ("keras_vit/weights/dialects/timm.py", "head_dist"),
    # Encoder options named like the layers they add, in the options'
    # own validation messages.
    ("keras_vit/models/options.py", "class_token"),
    ("keras_vit/models/options.py", "fc_norm"),
    ("keras_vit/models/options.py", "encoder_norm"),
    # The same options, set by a family (PE's models have no class token).
    ("keras_vit/models/zoo/pe.py", "class_token"),
    # timm's Eva argument, in the arguments keras_vit's options give it.
    ("keras_vit/weights/dialects/timm_args.py", "class_token"),
    # A word of a refusal message ("fc_norm" has no keras-hub counterpart).
    ("keras_vit/interop/keras_hub.py", "fc_norm"),
    ("keras_vit/interop/keras_hub_dinov3.py", "fc_norm"),
    # Encoder options, in the lists of those a converter or writer maps
    # (`EncoderOptions.departures` refuses the others).
    ("keras_vit/interop/keras_hub.py", "class_token"),
    ("keras_vit/interop/keras_hub_dinov3.py", "class_token"),
    ("keras_vit/interop/keras_hub_dinov3.py", "encoder_norm"),
    ("keras_vit/weights/dialects/timm_args.py", "fc_norm"),
    ("keras_vit/weights/dialects/timm_args.py", "encoder_norm"),
    # The encoder option, in the differences an init_from file is told by.
    ("keras_vit/recipes/initialise.py", "fc_norm"),
    # timm's `model_args` names, in the config save_pretrained writes.
    ("keras_vit/pretrained.py", "class_token"),
    ("keras_vit/pretrained.py", "fc_norm"),
    ("keras_vit/pretrained.py", "head"),
}
# The input contract's argument, attribute and config key, which the
# rescaling layer it builds is named after.
_WORDS = {"preprocessing"}


def test_no_layer_name_is_spelled_outside_the_layout():
    offenders = []
    files = [*ROOT.glob("keras_vit/**/*.py"), *ROOT.glob("recipes/**/*.py")]
    for path in files:
        relative = path.relative_to(ROOT).as_posix()
        if relative == "keras_vit/models/layout.py" or relative.startswith(
            "keras_vit/layers/"
        ):
            continue
        for line, value in _string_literals(path):
            if (relative, value) in _NOT_LAYER_NAMES or value in _WORDS:
                continue
            if value in _LAYER_NAMES or value.startswith(names.BLOCK_PREFIX):
                offenders.append(f"{relative}:{line}: {value!r}")
    assert not offenders, "Layer names spelled outside models/layout.py:\n" + (
        "\n".join(offenders)
    )


def test_no_isinstance_scans_for_the_position_embedding():
    offenders = [
        f"{path.relative_to(ROOT)}"
        for path in ROOT.glob("keras_vit/**/*.py")
        if "isinstance(" in (text := path.read_text())
        and "AddPositionEmbedding)" in text
    ]
    assert not offenders, offenders


# -- blocks report their own intermediates ----------------------------------


def test_block_intermediates_equal_the_reference():
    params = reference.make_vit_checkpoint(
        hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=4,
        image_size=(16, 16), seed=3,
    )  # fmt: skip
    model = keras_vit.ViT("test/4", image_size=16, num_classes=10)
    assign_reference_params(model, params)
    block = ViTLayout.of(model).block(1)
    x = np.random.default_rng(0).normal(size=(2, 17, 32)).astype("float32")
    y, out = block(x, return_intermediates=True)
    after_attention = x + reference.attention(
        reference.layer_norm(
            x,
            params["Transformer/encoderblock_1/LayerNorm_0/scale"],
            params["Transformer/encoderblock_1/LayerNorm_0/bias"],
        ),
        params,
        "Transformer/encoderblock_1/MultiHeadDotProductAttention_1",
    )
    expected, weights = reference.encoder_block(x, params, 1, gelu="exact")
    np.testing.assert_allclose(out["after_attention"], after_attention, atol=1e-5)
    np.testing.assert_allclose(out["scores"], weights, atol=1e-6)
    np.testing.assert_allclose(out["outputs"], expected, atol=1e-5)
    np.testing.assert_allclose(out["mlp"], expected - after_attention, atol=1e-5)
    np.testing.assert_allclose(out["attention"], after_attention - x, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(y), np.asarray(block(x)))


def test_block_intermediates_in_a_functional_graph():
    block = keras_vit.layers.TransformerBlock(num_heads=2, mlp_dim=16)
    tokens = keras.Input((5, 8))
    outputs, out = block(tokens, return_intermediates=True)
    assert set(out) == {"scores", "attention", "after_attention", "mlp", "outputs"}
    assert tuple(out["scores"].shape) == (None, 2, 5, 5)
    model = keras.Model(tokens, {"y": outputs, **out})
    result = model(np.ones((3, 5, 8), "float32"))
    assert result["scores"].shape == (3, 2, 5, 5)
    np.testing.assert_allclose(
        result["after_attention"] + result["mlp"], result["y"], atol=1e-6
    )


def test_analyses_use_the_block_record_not_a_replay(monkeypatch):
    """The analyses ask the block; a block that reports other values shows up."""
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    block_type = type(ViTLayout.of(model).block(0))
    original = block_type.call

    def marked(self, inputs, training=None, return_attention_scores=False,
               return_intermediates=False):  # fmt: skip
        result = original(
            self, inputs, training, return_attention_scores, return_intermediates
        )
        if return_intermediates:
            result[1]["after_attention"] = result[1]["after_attention"] * 0 + 7.0
        return result

    monkeypatch.setattr(block_type, "call", marked)
    from keras_vit.analysis._walk import BlockWalker

    step = next(BlockWalker(model).walk(images(1, (16, 16)), after_attention=True))
    assert np.allclose(np.asarray(step.after_attention), 7.0)
