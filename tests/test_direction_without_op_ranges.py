"""Direction without op ranges (issue 25, item 2): many real exports hold only the user's ranges
(forward_pass / backward_pass / optimizer_step), no PyTorch op ranges. The backward pass still
shows: a GPU op launched from the autograd engine's thread, or while a range named like backward
is open in its process, is bprop; Layers say in one line that the layer of that work cannot be
known instead of showing 0.

The trace without op ranges is made from the LM sample (an nsys export with op ranges and the
user ranges profiled_step > forward_pass / backward_pass / optimizer_step) by deleting, with
sqlite3, every NVTX range that is an op range: those whose text holds `seq = ` or `op_id = `, or
starts with `autograd::`. What the backward work is comes from the untouched file: the GPU ops
whose launch call ran on the thread named `pt_autograd_0`."""

from __future__ import annotations

import shutil
import sqlite3

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.analysis.layers import backward_unplaced, layer_times
from kview.cli import main
from kview.trace import open_trace

from conftest import SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
TEXT = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def _strip_op_ranges(src, dst, rename_engine: bool = False):
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    con.execute(
        f"DELETE FROM NVTX_EVENTS WHERE {TEXT} GLOB '*seq = *' OR {TEXT} GLOB '*op_id = *' OR {TEXT} GLOB 'autograd::*'"
    )
    if rename_engine:  # the thread's name gives nothing away: only the open backward_pass does
        con.execute("UPDATE StringIds SET value = 'worker' WHERE value GLOB 'pt_autograd_*'")
    con.commit()
    left = con.execute(f"SELECT count(*), sum({TEXT} = 'backward_pass') FROM NVTX_EVENTS").fetchone()
    con.close()
    return left


def _engine_ops(path) -> set[tuple[int, int]]:
    """(start, correlation) of every GPU op the autograd engine's thread launched."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    engine = {
        tid
        for tid, name in con.execute(
            "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId"
        )
        if name.startswith("pt_autograd_")
    }
    launches = {
        corr
        for tid, corr in con.execute("SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME")
        if tid in engine
    }
    out = set()
    for table in GPU_TABLES:
        out |= {(s, c) for s, c in con.execute(f"SELECT start, correlationId FROM {table}") if c in launches}
    con.close()
    return out


@pytest.fixture(scope="module")
def stripped(tmp_path_factory):
    d = tmp_path_factory.mktemp("no_op_ranges")
    plain = d / "lm_no_op_ranges.sqlite"
    renamed = d / "lm_no_op_ranges_unnamed_engine.sqlite"
    for path, rename in ((plain, False), (renamed, True)):
        left, bwd = _strip_op_ranges(LM, path, rename)
        assert bwd == 1 and 0 < left < 200  # the user ranges stay, the op ranges are gone
    return plain, renamed


@pytest.mark.parametrize("which", [0, 1], ids=["engine thread named", "engine thread unnamed"])
def test_backward_work_is_bprop_without_op_ranges(stripped, which):
    truth = _engine_ops(LM)
    assert len(truth) > 1000
    a = attribute(open_trace(stripped[which], use_cache=False))
    keyed = a.select("Start (ns)", "Correlation", "Direction")
    mine = keyed.filter(
        pl.struct("Start (ns)", "Correlation").is_in(
            pl.DataFrame(sorted(truth), schema=["Start (ns)", "Correlation"], orient="row")
            .select(pl.struct("Start (ns)", "Correlation"))
            .to_series()
            .implode()
        )
    )
    assert mine.height == len(truth)
    share = (mine["Direction"] == "bprop").mean()
    assert share is not None and share >= 0.99
    # the forward pass stays forward: nothing launched on the main thread inside forward_pass is bprop
    con = sqlite3.connect(f"file:{stripped[which]}?mode=ro", uri=True)
    ((lo, hi),) = con.execute(f"SELECT start, end FROM NVTX_EVENTS WHERE {TEXT} = 'forward_pass'").fetchall()
    con.close()
    fwd = a.filter(
        (pl.col("Start (ns)") > lo)
        & (pl.col("Start (ns)") < hi)
        & ~pl.struct("Start (ns)", "Correlation").is_in(
            mine.select(pl.struct("Start (ns)", "Correlation")).to_series().implode()
        )
    )
    assert fwd.height > 0 and (fwd["Direction"] != "bprop").all()


def test_layers_say_the_backward_layer_cannot_be_known(stripped, capsys):
    trace = open_trace(stripped[0], use_cache=False)
    note = backward_unplaced(trace)
    n_bprop = attribute(trace).filter(pl.col("Direction") == "bprop").height
    assert f"{n_bprop:,} backward GPU ops" in note and "cannot be known" in note
    t = layer_times(trace)
    assert t.height == 12 and t["Backward (ns)"].null_count() == t.height  # empty, not 0
    assert (t["Total (ns)"] == t["Forward (ns)"]).all()
    assert main(["layers", str(stripped[0]), "--no-cache"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and note in err[0]
    # with op ranges the layer is known: no note, Backward filled
    full = open_trace(LM, use_cache=False)
    assert backward_unplaced(full) == "" and layer_times(full)["Backward (ns)"].min() > 0
