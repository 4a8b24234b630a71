"""Phases: user ranges at the top of their thread's user-range nesting, GPU time counted as
`kview compare` counts it, on every public trace, and checked against a plain count."""

from __future__ import annotations

import sqlite3
from decimal import Decimal

import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.analysis.compare import diff, root_window, side_by_side
from kview.analysis.layers import phase_labels, phase_times, user_range_tree
from kview.analysis.overview import build
from kview.trace import open_trace

from conftest import KINETO, KINETO_TRACES, LM_TRACES, MTIA, PUBLIC, PUBLIC_TRACES, kineto_events, nightly_for

ALL = [p for p in [*PUBLIC_TRACES, *KINETO_TRACES, *LM_TRACES] if not p.name.startswith("rocprof")]


# the MTIA trace (87 MB of JSON) only in the nightly set: its own test opens it by default
@pytest.mark.parametrize("path", nightly_for(ALL, {MTIA}), ids=lambda p: p.name.split(".")[0])
def test_phases_agree_with_compare_overview_and_diff(path):
    t = open_trace(path, use_cache=False)
    p = phase_times(t)
    gpu = dict(side_by_side([root_window(t, None, "v")], "range", "gpu").select("Range", "v").iter_rows())
    cpu = dict(side_by_side([root_window(t, None, "v")], "range", "cpu").select("Range", "v").iter_rows())
    for row in p.iter_rows(named=True):
        assert row["GPU Time (ns)"] == gpu[row["Phase"]], row
        assert row["CPU Time (ns)"] == cpu[row["Phase"]], row
    assert build(t).phases.equals(p)
    d = diff(t, t)["Phases"]
    assert d["A (ns)"].to_list() == p["GPU Time (ns)"].to_list() and set(d["Δ (ns)"]) <= {0}


def _ns(v):
    return int((Decimal(v) * 1000).to_integral_value())


def test_phase_gpu_time_equals_a_plain_count_over_the_json():
    """DDP training (HTA's sample): GPU ops whose launch call started while the phase was open."""
    path = KINETO / "trace_filter__sampled_rank-0.json.gz"
    ev = [e for e in kineto_events(path) if e.get("ph") == "X"]
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in ev if e.get("cat") == "cuda_runtime"}
    gpu = [
        (launch.get(e["args"].get("correlation")), _ns(e.get("dur", 0)))
        for e in ev
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    trace = open_trace(path, use_cache=False)
    p = phase_times(trace)
    # the steps are the tops (`#` no longer makes a step an op marker; the encoder/decoder ranges
    # another thread opens inside them are no tops of their own), so their parts are the phases
    tops = user_range_tree(trace).filter(pl.col("depth") == 0)["label"].to_list()
    assert "ProfilerStep#551" in tops
    assert {"## forward ##", "## backward ##", "## optimizer ##"} <= set(p["Phase"].to_list())
    for row in p.iter_rows(named=True):
        windows = [
            (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
            for e in ev
            if e.get("cat") == "user_annotation" and e["name"] == row["Phase"]
        ]
        inside = [d for t, d in gpu if t is not None and any(s <= t <= f for s, f in windows)]
        assert (row["GPU Time (ns)"], row["GPU ops"]) == (sum(inside), len(inside)), row["Phase"]
    # DistributedDataParallel.forward is nested in the steps: not a phase with a sliver of time
    assert "DistributedDataParallel.forward" not in p["Phase"].to_list()


def test_phase_gpu_time_equals_a_plain_count_over_the_export():
    path = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    p = phase_times(open_trace(path, use_cache=False))
    assert p["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"]
    for row in p.iter_rows(named=True):
        got = con.execute(
            # the phase's ranges first (a few rows), so each launch is checked against them only
            "WITH w AS MATERIALIZED (SELECT start, end FROM NVTX_EVENTS WHERE text = ?)"
            " SELECT sum(g.end - g.start), count(*) FROM (SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"
            " UNION ALL SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, end,"
            " correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET) g JOIN CUPTI_ACTIVITY_KIND_RUNTIME r"
            " ON r.correlationId = g.correlationId WHERE EXISTS (SELECT 1 FROM w"
            " WHERE r.start BETWEEN w.start AND w.end)",
            (row["Phase"],),
        ).fetchone()
        assert (row["GPU Time (ns)"], row["GPU ops"]) == got
    total = con.execute(
        "SELECT (SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL) + (SELECT sum(end - start)"
        " FROM CUPTI_ACTIVITY_KIND_MEMCPY) + (SELECT sum(end - start) FROM"
        " CUPTI_ACTIVITY_KIND_MEMSET)"
    ).fetchone()[0]
    assert p["Share (%)"].to_list() == [round(v * 100 / total, 1) for v in p["GPU Time (ns)"]]


def test_library_ranges_and_op_markers_are_never_phases():
    t = open_trace(PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite", use_cache=False)
    labels = nv.labels(t)
    assert labels.filter(pl.col("label").str.starts_with("nccl")).height > 0  # NCCL's own ranges are there
    assert phase_labels(t) == []  # and the trace has no user ranges besides them
    mtia = open_trace(KINETO / "mtia_trace_single_rank__mtia_rank_0.json.gz", use_cache=False)
    assert not any(lab.startswith(("hccl:", "gloo:", "nccl:")) for lab in phase_labels(mtia))
    for name, marker in (
        ("ProfilerStep#5", False),
        ("## forward ##", False),
        ("Optimizer.step#SGD.step", True),
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True),
        ("aten::linear, seq = 3, op_id = 7", True),
        ("forward_pass", False),
    ):
        assert nv.is_op_marker(name) is marker, name


def test_steps_are_phases_unless_their_parts_fill_them():
    t = open_trace(KINETO / "call_stack__backward_thread.json", use_cache=False)
    # `## backward ##` fills a quarter of ProfilerStep#552: the step is the phase; its one kernel
    # is launched by the autograd thread and still counts in it
    assert phase_labels(t) == ["ProfilerStep#552"]
    assert phase_times(t).select("GPU Time (ns)", "GPU ops").row(0) == (45_000, 1)

    # kview's own captures: forward, backward and optimizer fill profiled_step
    lm = open_trace(next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite"), use_cache=False)
    assert phase_labels(lm) == ["forward_pass", "backward_pass", "optimizer_step"]
