"""The model zoo: a family is one file, and nothing else lists it."""

import ast
import dataclasses
import pathlib
import subprocess
import sys
import textwrap

import keras
import pytest

import keras_vit
from keras_vit.models import zoo
from keras_vit.models.options import EncoderOptions

PACKAGE = pathlib.Path(keras_vit.__file__).parent
ZOO = PACKAGE / "models" / "zoo"
# Calls and subscripts that name a family by its registry key.
_REGISTRY_CALLS = {"named", "family_model"}
_REGISTRY_MAPPINGS = {"FAMILIES"}


def _family_files() -> dict[str, pathlib.Path]:
    """`{family name: the zoo file that registers it}`."""
    files = {}
    for path in sorted(ZOO.glob("*.py")):
        if path.stem == "__init__":
            continue
        module = sys.modules[f"keras_vit.models.zoo.{path.stem}"]
        for value in vars(module).values():
            if isinstance(value, zoo.Family) and path.stem != "registry":
                files.setdefault(value.name, path)
    assert set(files) == {f.name for f in zoo.families()}
    return files


def _strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module, docstrings left out."""
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            docstrings.add(id(body[0].value))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _registry_keys(tree: ast.AST) -> list[ast.Constant]:
    """String constants used as a family's key: `zoo.named("x")`,
    `family_model(v, "x")`, `FAMILIES["x"]`."""
    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name in _REGISTRY_CALLS:
                keys += [a for a in node.args if isinstance(a, ast.Constant)]
        elif isinstance(node, ast.Subscript):
            name = getattr(node.value, "attr", getattr(node.value, "id", None))
            if name in _REGISTRY_MAPPINGS and isinstance(node.slice, ast.Constant):
                keys.append(node.slice)
    return keys


def test_a_family_is_spelled_only_in_its_own_zoo_file():
    """Its constructors, timm names and architectures appear (as strings) in
    its zoo file alone, and no library module names it by its key; a shipped
    recipe config may pick a tag, as a user does."""
    owners = {}
    for family in zoo.families():
        words = {*family.models, *family.timm.architectures}
        words |= {w.timm_name for w in family.weights() if w.timm_name}
        if family.timm.writer:
            words.add(family.timm.writer)
        for word in words:
            owners.setdefault(word, set()).add(family.name)
    files = _family_files()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.parent == ZOO and path.name in ("registry.py", "__init__.py"):
            continue
        tree = ast.parse(path.read_text())
        own = {name for name, file in files.items() if file == path}
        for node in _strings(tree):
            families = owners.get(node.value, set())
            if families and not families & own:
                offenders.append(
                    f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
                )
        for node in _registry_keys(tree):
            if node.value in files and node.value not in own:
                offenders.append(
                    f"{path.relative_to(PACKAGE)}:{node.lineno}: key {node.value!r}"
                )
    assert not offenders, "Family names outside their zoo files:\n" + "\n".join(
        offenders
    )


def test_the_check_sees_a_family_listed_elsewhere(tmp_path, monkeypatch):
    """The test above fails for a module that names a family (it is not
    vacuous)."""
    module = PACKAGE / "models" / "_listing_probe.py"
    module.write_text(
        'FAMILY = "deit3_base_patch16_224"\n'
        "from keras_vit.models import zoo\n"
        'OPTIONS = zoo.named("dinov2").options\n'
    )
    try:
        with pytest.raises(AssertionError) as error:
            test_a_family_is_spelled_only_in_its_own_zoo_file()
    finally:
        module.unlink()
    assert "_listing_probe.py:1: 'deit3_base_patch16_224'" in str(error.value)
    assert "_listing_probe.py:3: key 'dinov2'" in str(error.value)


def test_every_table_that_listed_families_reads_the_zoo():
    """The checkpoints, the constructors, timm's head words and writer
    architectures come from the families' files."""
    names = {w.name for w in keras_vit.weights.PRETRAINED_WEIGHTS}
    assert names == {w.name for w in zoo.checkpoints()}
    # list_weights adds timm's catalog (generated from timm, not a hand list).
    assert names < {w.name for w in keras_vit.weights.list_weights()}
    assert "deit_small_distilled_patch16_224.fb_in1k" in names
    assert "flexivit_base.1200ep_in1k" in names
    assert zoo.timm_heads()["giant"] == 24 and zoo.timm_heads()["medium"] == 8
    distilled = EncoderOptions(distillation=True)
    assert zoo.writer_architecture(distilled) == "deit_base_distilled_patch16_224"
    swiglu = zoo.named("dinov2_swiglu").options
    assert zoo.writer_architecture(swiglu) == "vit_giant_patch14_reg4_dinov2"
    assert zoo.writer_architecture(EncoderOptions()) == "vit_base_patch16_224"
    assert zoo.family_of_timm("deit3_medium_patch16_224").name == "deit3"
    assert zoo.family_of_timm("deit_small_distilled_patch16_224").name == (
        "deit_distilled"
    )
    assert zoo.family_of_timm("deit_small_patch16_224").name == "deit"
    assert zoo.family_of_timm("vit_giant_patch14_reg4_dinov2").name == "dinov2_swiglu"
    assert zoo.family_of_timm("vit_base_patch16_224") is None


def test_each_checkpoint_carries_its_familys_contract():
    overridden = set()
    for family in zoo.families():
        for row, weights in zip(family.checkpoints, family.weights(), strict=True):
            assert weights.family == family.name
            # The family's statistics, unless the row states its own (DINOv3's
            # satellite files); timm's configs check both (test_pretrained_hub).
            own = dict(getattr(row, "contract", {}))
            if "mean" in own:
                overridden.add(weights.name)
            contract = weights.preprocessing
            assert contract.mean == own.get("mean", family.preprocessing.mean)
            assert contract.std == own.get("std", family.preprocessing.std)
            assert contract.image_size == (weights.image_size,) * 2, weights.name
    assert overridden == {  # The satellite files' statistics.
        "vit_large_patch16_dinov3.sat493m",
        "vit_large_patch16_dinov3_qkvb.sat493m",
        "vit_7b_patch16_dinov3.sat493m",
    }
    deit = keras_vit.weights.registry.find_name("deit_base_patch16_384.fb_in1k")
    assert deit.preprocessing.crop_fraction == 1.0  # the 384-px row's own
    assert keras_vit.weights.registry.find_name(
        "deit_small_patch16_224.fb_in1k"
    ).preprocessing.crop_fraction == pytest.approx(0.9)


def test_a_family_added_in_one_file_is_built_listed_and_written():
    """A new family needs its `Family` only: constructors, checkpoints by
    name, the family check and the writer's architecture follow."""
    code = textwrap.dedent(
        """
        import json
        import keras_vit
        from keras_vit.models import zoo
        from keras_vit.models.options import EncoderOptions

        mine = zoo.register(zoo.Family(
            name="mine",
            title="My ViT",
            options=EncoderOptions(qk_norm=True, num_registers=2),
            models={"Mine_T4": "test/4"},
            checkpoints=(zoo.TimmWeights("mine_tag", "test/4", "mine_test.x", 16, 3),),
            timm=zoo.TimmNames(architectures=("mine_*",), writer="mine_test",
                               writes_for={"num_registers": 2}),
        ))
        build = mine.constructor("Mine_T4")
        model = build(image_size=16, num_classes=3)
        layout = keras_vit.ViTLayout.of(model)
        print(json.dumps([
            model.name,
            layout.encoder_options.qk_norm,
            layout.num_registers,
            [w.name for w in keras_vit.weights.list_weights("mine*")],
            zoo.writer_architecture(layout.encoder_options),
            zoo.family_of_timm("mine_other").name,
        ]))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == (
        '["mine_test4", true, 2, ["mine_test.x"], "mine_test", "mine"]'
    )


def test_a_family_clash_and_an_unknown_option_are_refused():
    with pytest.raises(ValueError, match=r"\['DeiT3_S16'\] belong to another"):
        zoo.register(zoo.Family("copy", "Copy", models={"DeiT3_S16": "S/16"}))
    with pytest.raises(ValueError, match=r"unknown options \['qk_nrom'\]"):
        zoo.Family("bad", "Bad", timm=zoo.TimmNames(writes_for={"qk_nrom": True}))
    with pytest.raises(ValueError, match="Unknown family 'nope'"):
        zoo.named("nope")


def test_encoder_options_read_back_follows_the_block_options():
    """A block option is read back from the blocks' configs without being
    listed in the layout (its field says where it is read)."""
    block_fields = [
        f.name for f in dataclasses.fields(EncoderOptions) if "block" in f.metadata
    ]
    assert set(block_fields) == set(EncoderOptions().block_arguments(0, 1))
    options = EncoderOptions(
        qk_norm=True, qkv_bias=False, layer_scale_init=1e-4, mlp="swiglu",
        gelu_approximate=True, dropout_rate=0.1, attention_dropout_rate=0.2,
        drop_path_rate=0.3,
    )  # fmt: skip
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.ViT("test/4", image_size=16, options=options)
    assert keras_vit.ViTLayout.of(model).encoder_options == options
