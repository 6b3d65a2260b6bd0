"""Tests of `python -m recipes.compare`: a tiny real run, failures, `--help`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("fourier", "variance", "hessian", "noise", "distance")


def _quick(out, *extra):
    return ["--quick", "--out", str(out), *extra]


def test_help_is_fast_and_imports_no_tensorflow():
    code = (
        "import sys, contextlib, io\n"
        "from recipes import compare\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        compare.main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "assert '--quick' in out.getvalue()\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--models", "vit,bogus"], "--models: unknown model(s) ['bogus']"),
        (["--vit", "96,6,192"], "--vit: not a ViT shape"),
        (["--seeds", "0"], "--seeds: not a positive integer: '0'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    from recipes import compare

    with pytest.raises(SystemExit) as raised:
        compare.main(argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_quick_run_writes_table_figures_json_and_tensorboard(tmp_path, capsys):
    from recipes import compare

    assert compare.main(_quick(tmp_path)) == 0
    for stem in (*FIGURES, "vit_distance", "vit_position"):
        with open(tmp_path / f"{stem}.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "table.md").read_text()
    assert table.startswith("| model | params | FLOPs/img | test accuracy % |")
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == [
        "| ViT",
        "| PreActResNet",
        "| AlterNet",
    ]
    results = json.loads((tmp_path / "results.json").read_text())
    assert [row["model"] for row in results["rows"]] == ["vit", "resnet", "alternet"]
    for row in results["rows"]:
        assert 0 <= row["accuracy"][0] <= 1 and row["parameters"] > 0
        assert row["flops"] > 0 and row["hessian_count"] == 1
    alternet = results["runs"]["alternet"][0]
    assert alternet["distances"]["labels"] == ["stage2_msa2"]
    assert results["runs"]["resnet"][0]["distances"]["labels"] == []
    assert len(alternet["depth"]["delta"]) == 4  # stem + 3 blocks
    assert sorted(os.listdir(tmp_path / "runs")) == [
        "alternet_seed0.json",
        "resnet_seed0.json",
        "vit_seed0.json",
    ]
    events = os.listdir(tmp_path / "tensorboard" / "comparison")
    assert events and events[0].startswith("events.out.tfevents")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".partial-")]
    # A second invocation reuses the finished runs instead of training again.
    capsys.readouterr()
    assert compare.main(_quick(tmp_path, "--models", "resnet")) == 0
    assert "reusing" in capsys.readouterr().out


def test_a_diverged_run_exits_1_and_leaves_earlier_outputs(tmp_path, capsys):
    from recipes import compare

    (tmp_path / "table.md").write_text("earlier table\n")
    with pytest.raises(SystemExit) as raised:
        compare.main(_quick(tmp_path, "--models", "resnet", "--learning-rate", "1e30"))
    assert raised.value.code == 1
    assert "resnet seed 0 diverged" in capsys.readouterr().err
    assert (tmp_path / "table.md").read_text() == "earlier table\n"
    assert not (tmp_path / "results.json").exists()


def test_a_torn_run_file_is_trained_again(tmp_path):
    from recipes import compare

    args = compare.resolve(compare.build_parser().parse_args(_quick(tmp_path)))
    key = compare.run_key(args)
    path = tmp_path / "vit_seed0.json"
    path.write_text(json.dumps({"settings": key, "accuracy": 0.5}))
    assert compare._finished_run(str(path), key)["accuracy"] == 0.5
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # a writer killed half-way
    assert compare._finished_run(str(path), key) is None
    other = dict(key, epochs=key["epochs"] + 1)  # other settings: not reused
    path.write_text(text)
    assert compare._finished_run(str(path), other) is None


def test_a_figure_that_fails_half_way_leaves_the_old_png(tmp_path, monkeypatch):
    from keras_vit.analysis import plotting
    from recipes import compare

    target = tmp_path / "fourier.png"
    target.write_bytes(b"old figure")

    def broken_save(figure, path, dpi=100):
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(plotting, "save_figure", broken_save)
    with pytest.raises(OSError, match="disk full"):
        compare._save_png(object(), str(target))
    assert target.read_bytes() == b"old figure"
    assert os.listdir(tmp_path) == ["fourier.png"]  # no temporary file left
