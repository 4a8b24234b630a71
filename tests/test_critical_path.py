"""The critical path of each step (`kview critical-path`) against a plain walk back from each
step's end, written out op by op over the raw events (SQL over the nsys export, the JSON)."""

from __future__ import annotations

import polars as pl
import pytest
from test_launches import SYNCS, _kineto_truth, _launch_of, _nsys_truth, from_zero

from kview.analysis import critical_path as cp
from kview.trace import open_trace

from conftest import KINETO, KINETO_TRACES, MTIA, PUBLIC, PUBLIC_TRACES, nightly_for


def _walk(ops, calls, w0, w1, thread):
    """(gpu, cpu, launch, ops on path) of the window [w0, w1], walking back op by op."""
    launch = _launch_of(ops, calls)
    nodes = [
        dict(o, L=launch[o["corr"]]) for o in ops if o["corr"] in launch and w0 <= launch[o["corr"]]["start"] <= w1
    ]
    nodes.sort(key=lambda o: (o["start"], o["end"]))
    syncs = [c for c in calls if c["name"] in SYNCS and w0 <= c["end"] <= w1]

    def waited(tid, before):
        """The latest sync on `tid` ending by `before` that waited for an op: (its end, the op)."""
        best = None
        for c in syncs:
            if c["tid"] != tid or c["end"] > before:
                continue
            done = [o for o in nodes if o["end"] <= c["end"]]
            if not done:
                continue
            o = max(done, key=lambda o: o["end"])
            if o["end"] > c["start"] and (best is None or c["end"] > best[0]):
                best = (c["end"], o)
        return best

    gpu = cpu = lau = n = 0
    last = max(nodes, key=lambda o: o["end"]) if nodes else None
    if last is not None and last["end"] >= w1:
        k = last
    else:
        b = waited(thread, w1) if thread is not None else None
        if b is None:
            return 0, w1 - w0, 0, 0
        cpu += w1 - b[1]["end"]
        k = b[1]
    while k is not None:
        n += 1
        same = [
            o for o in nodes if (o["device"], o["stream"]) == (k["device"], k["stream"]) and o["start"] < k["start"]
        ]
        p = max(same, key=lambda o: o["start"]) if same else None
        other = [o for o in nodes if o["device"] == k["device"] and o["end"] <= k["start"]]
        # the latest to end (ties: the last in stream and start order); none if it started with k
        x = max(other, key=lambda o: (o["end"], o["stream"], o["start"])) if other else None
        x = None if x is not None and x["start"] >= k["start"] else x
        dep = x if x is not None and (p is None or x["end"] > p["end"]) else p
        if dep is not None and dep["end"] >= k["L"]["start"]:
            if dep["end"] < k["L"]["end"]:  # the launch call still ran: k waited for its launch
                gpu += k["end"] - k["start"]
                lau += k["start"] - dep["end"]
            else:
                gpu += k["end"] - dep["end"]
            k = dep
            continue
        b = waited(k["L"]["tid"], k["L"]["start"])
        gpu += k["end"] - k["start"]
        lau += k["start"] - k["L"]["start"]
        cpu += k["L"]["start"] - (b[0] if b else w0) + ((b[0] - b[1]["end"]) if b else 0)
        k = b[1] if b else None
    return gpu, cpu, lau, n


@pytest.mark.parametrize(
    "path, truth",
    [
        (PUBLIC / "dlprof_lenet_nsys2022.1.sqlite", _nsys_truth),
        (KINETO / "trace_filter__sampled_rank-0.json.gz", _kineto_truth),
    ],
    ids=lambda p: getattr(p, "name", ""),
)
def test_each_step_against_a_walk_back_from_its_end(path, truth):
    trace = open_trace(path, use_cache=False)
    ops, calls = from_zero(*truth(path), trace.origin)
    table = cp.step_table(trace)
    nodes, steps = cp.path_nodes(trace)
    assert table.height == steps.height >= 1
    for row, st in zip(table.iter_rows(named=True), steps.iter_rows(named=True)):
        thread = None
        if row["Step"] != "(whole trace)":
            from kview.analysis.steps import step_instances

            s = step_instances(trace).filter(pl.col("start") == st["w_start"])
            thread = s["global_tid"][0]
        gpu, cpu, lau, n = _walk(ops, calls, st["w_start"], st["w_end"], thread)
        assert (row["GPU (ns)"], row["CPU (ns)"], row["Launch (ns)"], row["Ops on path"]) == (gpu, cpu, lau, n)
        assert gpu + cpu + lau == row["Length (ns)"]
        host = cpu + lau
        assert row["Bound by"] == ("CPU-bound" if 2 * host > row["Length (ns)"] else "GPU-bound")
    top = cp.top_ops(trace, 0)
    assert int(top["On path (ns)"].sum()) == int(table["Length (ns)"].sum())
    for kind, col in (("GPU", "GPU (ns)"), ("CPU", "CPU (ns)"), ("launch", "Launch (ns)")):
        assert int(top.filter(pl.col("Kind") == kind)["On path (ns)"].sum()) == int(table[col].sum())


@pytest.mark.parametrize(
    "path", [PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite", KINETO / "trace_filter__sampled_rank-0.json.gz"]
)
def test_iterations_carry_each_steps_verdict(path):
    """`kview iterations` takes each iteration's verdict from the step of its own process."""
    from kview.analysis.iterations import iteration_table
    from kview.analysis.ranks import make_run
    from kview.documents.ranks import run_tables

    trace = open_trace(path, use_cache=False)
    run = make_run([trace])
    table = run_tables(run, "iterations")["iterations"]
    assert table.drop("CPU share (%)", "Bound by").equals(iteration_table(run))
    steps = cp.step_table(trace)
    assert table["Bound by"].null_count() == 0
    for row in table.iter_rows(named=True):
        if run.units.height > 1:  # one export of several processes: the rank's own process
            gpid = run.units.filter(pl.col("rank") == row["Rank"])["global_pid"][0]
            mine = steps.filter(pl.col("PID") == (gpid >> 24) % (1 << 24))
        else:
            mine = steps.filter(pl.col("Step") == row["Step"])
        assert mine.height == 1
        assert (row["CPU share (%)"], row["Bound by"]) == (mine["CPU share (%)"][0], mine["Bound by"][0])
    assert steps["PID"].n_unique() == run.units.height


@pytest.mark.parametrize(
    "path",
    # the MTIA trace (87 MB of JSON) only in the nightly set: its own test opens it by default
    nightly_for([p for p in (*KINETO_TRACES, *PUBLIC_TRACES) if not p.name.startswith("rocprof")], {MTIA}),
    ids=lambda p: p.name.split(".")[0],
)
def test_every_path_covers_its_step(path):
    """On every public trace: GPU + CPU + launch time is the path's length (a link loop or a
    lost link would break the sum), the ops on the paths add up to it, each op at most once."""
    trace = open_trace(path, use_cache=False)
    table = cp.step_table(trace)
    assert (table["GPU (ns)"] + table["CPU (ns)"] + table["Launch (ns)"] == table["Length (ns)"]).all()
    assert (table["GPU (ns)"] >= 0).all() and (table["CPU (ns)"] >= 0).all()
    assert int(cp.top_ops(trace, 0)["On path (ns)"].sum()) == int(table["Length (ns)"].sum())
    nodes, _ = cp.path_nodes(trace)
    assert nodes["node"].is_unique().all()
