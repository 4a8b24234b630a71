"""Compare and diff, checked against values computed independently with sqlite3."""

from __future__ import annotations

import json
import sqlite3

import polars as pl

from kview.analysis.compare import diff, phase_windows, root_window, side_by_side
from kview.trace import open_trace

from conftest import PUBLIC, SAMPLES
from in_process import kview_here

LM = [SAMPLES / f"lm-small_ctx256_{m}_nsys.sqlite" for m in ("forward", "backward", "train")]


def _cpu_truth(path, root="profiled_step"):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    s, e = con.execute(
        "SELECT start, end FROM NVTX_EVENTS WHERE text = ? ORDER BY start DESC LIMIT 1", (root,)
    ).fetchone()
    rows = con.execute(
        "SELECT text, sum(end - start) FROM NVTX_EVENTS WHERE eventType = 59 AND start >= ? "
        "AND end <= ? AND text NOT LIKE '%op_id = %' AND text NOT LIKE '%::%' "
        "AND text NOT LIKE '%#%' GROUP BY text",
        (s, e),
    ).fetchall()
    return dict(rows)


def test_compare_cpu_metric_reproduces_recorded_range_durations():
    traces = [open_trace(p, use_cache=False) for p in LM]
    df = side_by_side([root_window(t, "profiled_step") for t in traces], "range", "cpu")
    for p, t in zip(LM, traces):
        truth = _cpu_truth(p)
        got = {r["Range"]: r[t.stem] for r in df.iter_rows(named=True) if r[t.stem] is not None}
        assert got == truth
    # a range missing from a trace is an empty cell
    fwd = traces[0].stem
    assert df.filter(pl.col("Range") == "backward_pass")[fwd][0] is None


def test_compare_gpu_forward_time_agrees_across_modes_and_with_kernel_sums():
    traces = [open_trace(p, use_cache=False) for p in LM]
    df = side_by_side([root_window(t, "profiled_step") for t in traces], "range", "gpu")
    fwd = df.filter(pl.col("Range") == "forward_pass").row(0, named=True)
    vals = [fwd[t.stem] for t in traces]
    assert max(vals) / min(vals) < 1.03, vals
    # forward GPU time = kernels launched inside forward_pass (independently, from sqlite3)
    con = sqlite3.connect(f"file:{LM[2]}?mode=ro&immutable=1", uri=True)
    s, e = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'forward_pass'").fetchone()
    want = con.execute(
        "SELECT sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = k.correlationId WHERE r.start BETWEEN ? AND ?",
        (s, e),
    ).fetchone()[0]
    ms = con.execute(
        "SELECT coalesce(sum(m.end - m.start), 0) FROM (SELECT start, end, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMSET UNION ALL SELECT start, end, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY) m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = "
        "m.correlationId WHERE r.start BETWEEN ? AND ?",
        (s, e),
    ).fetchone()[0]
    assert fwd[traces[2].stem] == want + ms
    # backward on the autograd thread lands in backward_pass of the train trace
    bwd = df.filter(pl.col("Range") == "backward_pass")[traces[2].stem][0]
    assert bwd > 1.5 * fwd[traces[2].stem]


def test_phases_within_one_trace_by_category():
    t = open_trace(LM[2], use_cache=False)
    df = side_by_side(phase_windows(t, ["forward_pass", "backward_pass", "optimizer_step"]), "category")
    assert df.columns[:4] == ["Category", "forward_pass", "backward_pass", "optimizer_step"]
    opt = df.filter(pl.col("Category") == "optimizer")
    assert opt["optimizer_step"][0] > 0 and opt["forward_pass"][0] is None


def _kernel_totals(path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = con.execute(
        "SELECT s.value, sum(k.end - k.start), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value"
    ).fetchall()
    return {n: (t, c) for n, t, c in rows}


def test_diff_on_public_before_after_pair_names_the_biggest_changes():
    before = PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"
    after = PUBLIC / "nsysai_2gpu_fsdp_after_nsys2026.2.sqlite"
    a, b = _kernel_totals(before), _kernel_totals(after)
    common = set(a) & set(b)
    want = sorted(common, key=lambda n: -abs(b[n][0] - a[n][0]))[:5]
    d = diff(open_trace(before, use_cache=False), open_trace(after, use_cache=False), top=5)
    got = d["Largest changes in total time"]
    assert got["Kernel"].to_list() == want
    assert got["Δ (ns)"].to_list() == [b[n][0] - a[n][0] for n in want]
    assert set(d["Kernels that appeared"]["Kernel"]) == set(b) - set(a)
    assert set(d["Kernels that vanished"]["Kernel"]) == set(a) - set(b)
    totals = dict(zip(d["Totals"][""], d["Totals"]["Δ"]))
    assert totals["kernels"] == sum(c for _, c in b.values()) - sum(c for _, c in a.values())
    r = kview_here("diff", str(before), str(after), "-f", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["Largest changes in total time"][0]["Kernel"] == want[0]


def test_compare_csv_first_column_and_plain_numbers(tmp_path):
    r = kview_here("compare", *map(str, LM), "--root", "profiled_step", "--by", "category", "-f", "csv")
    assert r.returncode == 0, r.stderr
    head, first = r.stdout.splitlines()[:2]
    assert head.startswith("Category,lm-small_ctx256_forward_nsys,") and first.split(",")[1].isdigit()
    bad = kview_here("compare", str(LM[0]), "--root", "nope")
    assert bad.returncode == 2 and "no range named 'nope'" in bad.stderr


def test_equal_values_come_out_in_name_order():
    """Ties (equal changes, equal totals) are ordered by name, so a table is the same run after run
    (a hash join's row order used to decide them)."""
    before = PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"
    after = PUBLIC / "nsysai_2gpu_fsdp_after_nsys2026.2.sqlite"
    d = diff(open_trace(before, use_cache=False), open_trace(after, use_cache=False), top=50)
    rows = d["Largest changes in count"].select(pl.col("Δ count").abs(), "Kernel").rows()
    assert rows == sorted(rows, key=lambda r: (-r[0], r[1]))
    assert len({r[0] for r in rows}) < len(rows)  # this pair has equal changes to order
    traces = [open_trace(p, use_cache=False) for p in LM]
    for by in ("range", "category", "kernel", "layer"):
        df = side_by_side([root_window(t, "profiled_step") for t in traces], by, "gpu")
        first = df.columns[0]
        top = df.select(pl.max_horizontal([pl.col(t.stem) for t in traces]).fill_null(-1), first).rows()
        assert top == sorted(top, key=lambda r: (-r[0], r[1]))


def test_a_windows_column_holds_the_ops_launched_in_it_ends_included():
    """A window's column sums the ops whose launch time lies in [start, end], both ends
    included: those of a slice of the ops in launch order, the same as filtering every op."""
    from kview.analysis.compare import Window, column, ops_by_launch

    trace = open_trace(LM[2], use_cache=False)
    a = ops_by_launch(trace, "category")
    t = a["t"].drop_nulls().unique().sort()
    assert t.len() > 1000
    windows = [*phase_windows(trace, ["forward_pass", "backward_pass", "optimizer_step"])]
    # ends on ops' own launch times, one op, and none (after the last launch)
    windows += [
        Window(trace, "w", t[100], t[900]),
        Window(trace, "one", t[5], t[5]),
        Window(trace, "none", t[-1] + 1, t[-1] + 9),
    ]
    for w in windows:
        want = (
            a.filter((pl.col("t") >= w.start) & (pl.col("t") <= w.end))
            .group_by("Category")
            .agg(pl.col("Duration (ns)").sum().alias("v"))
            .rename({"Category": "item"})
        )
        got = column(w, "category", "gpu")
        assert got.sort("item").equals(want.sort("item")) and got.schema == want.schema, w.label
    assert column(windows[-2], "category", "gpu")["v"].sum() > 0 and column(windows[-1], "category", "gpu").height == 0
