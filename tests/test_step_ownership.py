"""A step owns the GPU work it launched (issue 25, item 3): iterations, ranks, compare and phases
count the same ops for a step, checked against plain Python over the JSON events."""

from __future__ import annotations

import re
from decimal import Decimal

import polars as pl
import pytest

from kview.analysis.compare import phase_windows, side_by_side
from kview.analysis.iterations import iteration_table
from kview.analysis.rank_summary import rank_summary
from kview.analysis.ranks import make_run
from kview.trace import open_trace

from conftest import KINETO, kineto_events

# HTA's public test trace of a TorchRec DDP rank: the CPU runs ahead of the GPU, so each
# ProfilerStep's work runs 160 ms past the step's CPU end
ASYNC = KINETO / "negative_queue_length_values_check__rank0.json.gz"


def _ns(v) -> int:
    return int(Decimal(str(v)) * 1000)


def _plain_steps(path):
    """Per ProfilerStep: (number, start, end, ops launched inside it as (start, end)), from the
    events: a GPU op's launch is the runtime call of its correlation id (its own start where
    none is recorded), owned by the step whose [start, end] holds it."""
    ev = [e for e in kineto_events(path) if e.get("ph") == "X"]
    steps = sorted(
        (int(m.group(1)), _ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0)))
        for e in ev
        if e.get("cat") == "user_annotation" and (m := re.fullmatch(r"ProfilerStep#(\d+)", e["name"]))
    )
    launch: dict[int, int] = {}
    for e in ev:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launch.setdefault(e["args"]["correlation"], _ns(e["ts"]))
    ops = []
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            s = _ns(e["ts"])
            t = launch.get(e.get("args", {}).get("correlation"), s)
            ops.append((t, s, s + _ns(e.get("dur", 0))))
    out = []
    for n, a, b in steps:
        out.append((n, a, b, [(s, f) for t, s, f in ops if a <= t <= b]))
    return out, ops


def _union(iv) -> int:
    total, reach = 0, None
    for s, f in sorted(iv):
        if reach is None or s > reach:
            total += f - s
            reach = f
        elif f > reach:
            total += f - reach
            reach = f
    return total


@pytest.fixture(scope="module")
def asynchronous():
    return open_trace(ASYNC, use_cache=False)


def test_each_iteration_owns_the_work_it_launched_with_its_tail(asynchronous):
    steps, ops = _plain_steps(ASYNC)
    table = iteration_table(make_run([asynchronous])).sort("Iteration")
    assert table["Iteration"].to_list() == [n for n, *_ in steps]
    for row, (_, a, b, mine) in zip(table.iter_rows(named=True), steps):
        last = max(f for _, f in mine)
        assert row["GPU ops"] == len(mine)
        assert row["Busy (ns)"] == _union(mine)
        assert row["Tail (ns)"] == max(last - b, 0) > 100_000_000  # the work runs 100+ ms past the CPU end
        assert row["Wall (ns)"] == max(last, b) - a
        assert row["Idle (ns)"] == row["Wall (ns)"] - row["Busy (ns)"] >= 0
    # nothing launched in a step is lost: the steps' ops and those launched outside every step
    # are all the ops
    inside = sum(len(m) for *_, m in steps)
    outside = sum(1 for t, _, _ in ops if not any(a <= t <= b for _, a, b, _ in steps))
    assert inside + outside == len(ops) and table["GPU ops"].sum() == inside
    # the Ranks view's sums are the iterations'
    summary = rank_summary(make_run([asynchronous])).row(0, named=True)
    assert summary["Tail (ns)"] == table["Tail (ns)"].sum() and summary["Busy (ns)"] == table["Busy (ns)"].sum()


def test_compare_and_iterations_count_the_same_ops_for_a_step(asynchronous):
    """compare's step columns (phases' rule: ops launched while the step was open) and the
    iteration table give each step the same ops."""
    table = iteration_table(make_run([asynchronous])).sort("Iteration")
    names = [f"ProfilerStep#{n}" for n in table["Iteration"].to_list()]
    frame = side_by_side(phase_windows(asynchronous, names), "range", "gpu", spread=False)
    steps, _ = _plain_steps(ASYNC)
    for n, _, _, mine in steps:
        row = frame.filter(pl.col("Range") == f"ProfilerStep#{n}")
        assert row[f"ProfilerStep#{n}"][0] == sum(f - s for s, f in mine)
