"""Mistakes get help: a mistyped command or option is named with what was meant, a filter that
cannot match or an operator kview lacks is one line naming what exists, `layer:` matches whole
segments, and a mistyped script for `kview capture` is one line before anything runs."""

from __future__ import annotations

import json

import pytest

from kview.analysis import filters
from kview.capture import command
from kview.cli import main

from conftest import LM_TRACES

SAMPLE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")


def _err(capsys, *argv: str) -> str:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse leaves through exit
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1, (rc, out, err)
    return err


@pytest.mark.parametrize(
    ("argv", "meant"),
    [
        (["kernal", str(SAMPLE)], "`kview kernels`"),
        (["overveiw", str(SAMPLE)], "`kview overview`"),
        (["kernels", str(SAMPLE), "--fliter", "gemm"], "--filter"),
        (["stats", str(SAMPLE), "--reprot", "cuda_api_sum"], "--report"),
        (["kernels", str(SAMPLE), "--formt=csv"], "--format"),
    ],
)
def test_a_typo_gets_did_you_mean(capsys, argv, meant):
    err = _err(capsys, *argv)
    assert f"did you mean {meant}" in err


def test_a_missing_trace_is_still_a_missing_trace(capsys):
    err = _err(capsys, "no_such_trace.sqlite")
    assert "no such file" in err and "did you mean" not in err


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("dir:backward", ["fprop", "bprop", "optim"]),
        ("cat:matmul", ["gemm", "attention", "memcpy"]),
        ("dur=50us", ["<", "<=", ">=", "==", "!="]),
    ],
)
def test_a_filter_that_cannot_match_names_what_exists(capsys, expr, names):
    with pytest.raises(filters.FilterError) as e:
        filters.parse(expr)
    assert all(n in str(e.value) for n in names)
    err = _err(capsys, "kernels", str(SAMPLE), "--filter", expr)
    assert err.startswith("kview: --filter: ")


def test_layer_matches_whole_segments(capsys):
    rows = json.loads(_run(capsys, "kernels", str(SAMPLE), "-f", "json"))
    layers = {r["Layer"] for r in rows if r["Layer"]}
    assert any(x.startswith("layer_10") for x in layers) and any(x.startswith("layer_1:") for x in layers)
    got = json.loads(_run(capsys, "kernels", str(SAMPLE), "--filter", "layer:layer_1", "-f", "json"))
    want = [r["Idx"] for r in rows if r["Layer"] and "layer_1" in r["Layer"].split(":")]
    assert [r["Idx"] for r in got] == want and want
    # a segment further in, and a regex over one segment
    sub = json.loads(_run(capsys, "kernels", str(SAMPLE), "--filter", "layer:attention_sublayer", "-f", "json"))
    assert {r["Idx"] for r in sub} == {r["Idx"] for r in rows if "attention_sublayer" in (r["Layer"] or "").split(":")}
    nums = json.loads(_run(capsys, "kernels", str(SAMPLE), "--filter", r"layer:layer_1\d", "-f", "json"))
    assert nums and all(r["Layer"].split(":")[0] in {"layer_10", "layer_11"} for r in nums)


def _run(capsys, *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_a_mistyped_script_is_one_line_before_anything_runs(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('ran')\n")
    monkeypatch.chdir(tmp_path)
    for cmd in (["python", "tran.py"], ["tran.py"]):
        with pytest.raises(command.CommandError) as e:
            command.parse(cmd)
        assert str(e.value) == "tran.py: no such script (did you mean train.py?)"
    assert command.parse(["python", "train.py"]).target == "train.py"
