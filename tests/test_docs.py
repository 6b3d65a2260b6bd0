"""Docs that cannot rot: every Python block of README.md and docs/*.md runs.

How the blocks run (the full convention is in `tests/doc_blocks.py`):

- blocks of one page run in order in one namespace and a fresh temporary
  working directory; a page's prelude (`doc_blocks.PRELUDES`) first makes
  the names its prose assumes (`images`, `model`, files it loads);
- inside `doc_blocks.tiny_world`: every ViT size is tiny, pretrained tags
  are random synthetic checkpoints, nothing is downloaded; before a page's
  first block, `doc_blocks.verify_tiny_world` builds ViT-B/16, L/16 and
  R50+B/16 there and fails the page if they are not tiny (the docs would
  build full-size models, GBs of memory);
- `<!-- doc-test: skip REASON -->` before a block skips it, with the reason
  in the test report (`pytest -rs`);
- blocks write to relative paths (the page's working directory), never to
  `/tmp`: a second run would find the first run's files.

A block that fails reports the page and line (`docs/models.md:42`) in its
traceback; a block after a failed one on the same page is reported as not
run rather than as a misleading `NameError`.
"""

import contextlib
import dataclasses
import os
import re
import sys
import traceback

import doc_blocks
import pytest
from doc_blocks import Block
from doc_blocks import DocCollectionError
from doc_blocks import parse_blocks

sys.path.insert(0, doc_blocks.REPO)  # `from keras_vit.recipes import train` in a block
os.environ.setdefault("MPLBACKEND", "Agg")

# KERAS_VIT_DOCS_ROOT runs the blocks of another checkout's pages (a scratch
# copy with a deliberate fault, to see this test fail).
DOCS_ROOT = os.environ.get("KERAS_VIT_DOCS_ROOT", doc_blocks.REPO)
BLOCKS = doc_blocks.collect_blocks(DOCS_ROOT)
MIGRATING = "docs/migrating.md"


class _Page:
    """The state of one page's run: its namespace, directory and progress."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.namespace = {"__name__": "__doc__"}
        self.started = False  # the prelude has run
        self.done = 0  # blocks of the page run so far
        self.prelude_error = None  # what the page's prelude raised
        self.failed = None  # the name of the first block that failed
        self.outcomes = {}  # block name -> the exception it raised, or a message


_PAGES: dict[str, _Page] = {}


@pytest.fixture(scope="module")
def keras_home(tmp_path_factory):
    return tmp_path_factory.mktemp("keras_home")


def _page_blocks(page):
    return [b for b in BLOCKS if b.page == page]


def _run_until(block: Block, keras_home, tmp_path_factory, monkeypatch):
    """Runs `block`'s page up to and including `block`; raises its failure.

    Blocks run once, in page order, whichever test asks first; each block's
    test then reports that block's own outcome.
    """
    page = _PAGES.get(block.page)
    if page is None:
        label = re.sub(r"\W", "_", block.page)
        page = _PAGES[block.page] = _Page(tmp_path_factory.mktemp(label))
    monkeypatch.chdir(page.workdir)
    blocks = _page_blocks(block.page)
    with doc_blocks.tiny_world(keras_home):
        if not page.started:
            page.started = True
            try:
                doc_blocks.verify_tiny_world()
                page.namespace.update(doc_blocks.PRELUDES.get(block.page, dict)())
            except Exception as error:
                page.prelude_error = error
        if page.prelude_error:
            raise page.prelude_error
        for earlier in blocks[page.done : blocks.index(block) + 1]:
            page.done += 1
            if page.failed:
                page.outcomes[earlier.name] = f"not run: {page.failed} failed first"
            elif not earlier.skip:
                try:
                    doc_blocks.run_block(earlier, page.namespace)
                except Exception as error:
                    page.failed = earlier.name
                    page.outcomes[earlier.name] = error
    outcome = page.outcomes.get(block.name)
    if isinstance(outcome, Exception):
        raise outcome
    if outcome:
        pytest.fail(outcome)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.name for b in BLOCKS])
def test_doc_block_runs(block, keras_home, tmp_path_factory, monkeypatch):
    if block.skip:
        pytest.skip(f"doc-test: skip {block.skip}")
    _run_until(block, keras_home, tmp_path_factory, monkeypatch)


def test_every_python_fence_is_collected():
    # An independent count: a fence the collector missed would never run.
    fences = 0
    for page in doc_blocks.doc_pages(DOCS_ROOT):
        with open(os.path.join(DOCS_ROOT, page), encoding="utf-8") as f:
            fences += sum(
                1 for line in f if re.match(r"^\s*```\s*(python|py)\s*$", line)
            )
    assert len(BLOCKS) == fences
    assert {b.page for b in BLOCKS} >= {"README.md", MIGRATING}


def test_blocks_use_relative_paths():
    # A block that writes to /tmp fails on its second run (the export exists)
    # and races other runs; blocks run in a fresh working directory instead.
    absolute = [
        b.name for b in BLOCKS if re.search(r"[\"'](/tmp|/home|/root|/var)/", b.code)
    ]
    assert absolute == []


def test_skip_markers_are_rare_and_explained():
    skipped = [b for b in BLOCKS if b.skip]
    assert len(skipped) <= 4, [b.name for b in skipped]
    assert all(len(b.skip.split()) >= 3 for b in skipped), [b.skip for b in skipped]


# --- The runner itself: it must fail when a block breaks -----------------------


PAGE = """# A page

Text.

```python
import keras_vit

model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
```

```bash
python -m recipes.convert --help
```

<!-- doc-test: skip needs a TF Serving server -->
```python
stub.Predict(request)
```

- a list item with a block:

  ```python
  out = model(images)
  ```
"""


def test_parse_finds_python_blocks_lines_skips_and_indented_blocks():
    blocks = parse_blocks("page.md", PAGE)
    assert [(b.line, b.skip) for b in blocks] == [
        (6, None),
        (17, "needs a TF Serving server"),
        (23, None),
    ]
    assert blocks[2].code == "out = model(images)\n"
    assert blocks[0].name == "page.md:6"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("```python\nx = 1\n", "page.md:1: fence never closed"),
        ("<!-- doc-test: skip -->\n```python\nx\n```\n", "without a reason"),
        ("<!-- doc-test: skip a reason here -->\nText.\n", "not followed by a block"),
        ("<!-- doc-test: skip a reason here -->\n```bash\nls\n```\n", "only Python"),
    ],
)
def test_bad_pages_are_refused_with_the_line(text, message):
    with pytest.raises(DocCollectionError, match=re.escape(message)):
        parse_blocks("page.md", text)


def test_a_renamed_argument_fails_and_names_the_page_line(tmp_path):
    good = parse_blocks("page.md", PAGE)[0]
    broken = dataclasses.replace(good, code=good.code.replace("num_classes", "classes"))
    namespace = {}
    doc_blocks.run_block(good, namespace)
    assert namespace["model"].output_shape == (None, 3)
    with pytest.raises(TypeError, match="classes") as caught:
        doc_blocks.run_block(broken, {})
    frames = traceback.extract_tb(caught.value.__traceback__)
    assert ("page.md", 8) in [(f.filename, f.lineno) for f in frames]


def test_tiny_world_builds_tiny_models_and_synthesises_tags(tmp_path):
    import keras_vit

    with doc_blocks.tiny_world(tmp_path):
        model = keras_vit.ViT_L16(num_classes=5, image_size=32)
        loaded = keras_vit.ViT_B16(num_classes=7, image_size=32, weights="imagenet21k")
        with pytest.raises(OSError, match="no downloads"):
            import keras

            keras.utils.get_file("x.npz", origin="https://example.invalid/x.npz")
    assert model.get_layer("encoder_norm").get_weights()[0].shape == (40,)
    assert loaded.output_shape == (None, 7)
    assert os.listdir(tmp_path / "keras_vit") == ["imagenet21k_ViT-B_16.npz"]
    # Outside the tiny world, sizes are the real ones again.
    assert keras_vit.VARIANTS["L"].hidden_dim == 1024
    from keras_vit.models import variants

    assert variants.VARIANTS["L"].hidden_dim == 1024


def test_tiny_world_verification_fails_loudly_when_the_patch_is_lost(
    tmp_path, monkeypatch
):
    from keras_vit.models import variants

    real = (variants.VARIANTS, variants.BACKBONES)
    monkeypatch.setattr(doc_blocks, "_tiny_tables", lambda: real)
    # The weight budget stops the real ViT-B/16 after 5M of its 86M weights.
    with doc_blocks.tiny_world(tmp_path, max_weights=5_000_000):
        with pytest.raises(doc_blocks.NotTinyError) as caught:
            doc_blocks.verify_tiny_world()
    message = str(caught.value)
    assert "tiny-world patch is not in effect" in message
    assert "keras_vit.ViT_B16()" in message and "full-size" in message
    assert isinstance(caught.value.__cause__, doc_blocks.NotTinyError)


def test_tiny_world_verification_checks_the_parameter_count(tmp_path, monkeypatch):
    with doc_blocks.tiny_world(tmp_path):
        doc_blocks.verify_tiny_world()  # the tiny B/16: 98k parameters
        monkeypatch.setattr(doc_blocks, "MAX_PROBE_PARAMS", 1_000)
        expected = r"ViT_B16\(\) has [\d,]+ parameters"
        with pytest.raises(doc_blocks.NotTinyError, match=expected):
            doc_blocks.verify_tiny_world()


def test_a_block_building_too_many_weights_fails(tmp_path):
    import keras_vit

    with doc_blocks.tiny_world(tmp_path, max_weights=10_000):
        with pytest.raises(doc_blocks.NotTinyError, match="full-size model"):
            keras_vit.ViT("test/8", image_size=32)
    keras_vit.ViT("test/8", image_size=32)  # no budget outside


def test_variables_left_to_initialise_stay_outside_the_tiny_world(
    tmp_path, monkeypatch
):
    # tests/test_models.py counts every zoo model this way; the first symbolic
    # call of a keras-hub layer in a block would allocate them all (24 GiB).
    import keras

    import keras_vit
    from keras_vit import keras_internals

    before = list(doc_blocks._deferred_variables())
    with keras.StatelessScope(initialize_variables=False):
        keras_vit.ViT("test/8", image_size=32)
    left = list(doc_blocks._deferred_variables())
    assert len(left) > len(before)
    try:
        with doc_blocks.tiny_world(tmp_path):
            assert doc_blocks._deferred_variables() == []
            doc_blocks.verify_tiny_world()
        assert [id(v) for v in doc_blocks._deferred_variables()] == [
            id(v) for v in left
        ]
        monkeypatch.setattr(
            doc_blocks, "_set_aside_deferred_variables", contextlib.nullcontext
        )
        with doc_blocks.tiny_world(tmp_path):
            with pytest.raises(doc_blocks.NotTinyError, match="waiting for Keras"):
                doc_blocks.verify_tiny_world()
    finally:
        keras_internals.set_deferred_variables(before)


# --- The migration guide: every table row is exercised ------------------------


def _migration_rows():
    """`(their call, [what of ours it names])` per row of the guide's tables.

    What a row names: in each code span of its "keras_vit" cell, every
    identifier called or assigned (`ViT_B16(`, `image_size=`), the last part
    of a bare dotted name, and every quoted string (`"augreg_in21k"`).
    """
    with open(os.path.join(DOCS_ROOT, MIGRATING), encoding="utf-8") as f:
        lines = f.read().splitlines()
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 2 or set(cells[0]) <= set("-: "):
            continue
        if cells[1] == "keras_vit":
            continue  # the header
        names = []
        for span in re.findall(r"`([^`]+)`", cells[1]):
            strings = re.findall(r"\"([^\"]*)\"", span)
            bare = re.sub(r"\"[^\"]*\"", "", span)
            called = re.findall(r"([A-Za-z_][\w.]*)\s*[(=]", bare)
            if not called:
                called = re.findall(r"[A-Za-z_][\w.]*", bare)[:1]
            names += [("name", c.split(".")[-1]) for c in called]
            names += [("string", s) for s in strings]
        rows.append((cells[0], names))
    return rows


def test_every_migration_row_is_exercised_by_an_executed_block():
    rows = _migration_rows()
    assert len(rows) >= 40
    executed = "\n".join(b.code for b in BLOCKS if b.page == MIGRATING and not b.skip)
    missing = []
    for theirs, names in rows:
        if not names:
            missing.append(f"{theirs}: no code in the keras_vit cell")
        for kind, name in names:
            pattern = (
                rf"\b{re.escape(name)}\b"
                if kind == "name"
                else rf"[\"']{re.escape(name)}[\"']"
            )
            if not re.search(pattern, executed):
                missing.append(f"{theirs}: {name!r} is in no executed block")
    assert missing == []
