"""Launch analysis (`kview launches`, the Launches view) against independent computations: plain
Python over the torch.profiler JSON events, plain SQL over the nsys export; and against HTA's own
numbers on HTA's test traces where HTA is installed (`pip install '.[hta]'`; CI installs it)."""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections import defaultdict
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import polars as pl
import pytest

from kview.analysis import launches as la
from kview.trace import open_trace

from conftest import KINETO, PUBLIC, SAMPLES, kineto_events

SYNCS = set(la.SYNC_APIS) | set(la.SYNC_MEMCPY_APIS)
HTA_TRACES = [
    KINETO / "trace_filter__sampled_rank-0.json.gz",
    KINETO / "trace_filter__sampled_rank-1.json.gz",
    KINETO / "negative_queue_length_values_check__rank0.json.gz",
    KINETO / "call_stack__backward_thread.json",
]
NSYS = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


def _ns(us) -> int:
    return int((Decimal(us) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _kineto_truth(path: Path):
    """(ops, calls): every GPU op (correlation, device, stream, start, end, name) and every runtime
    call (tid, start, end, name, correlation), straight from the JSON."""
    ops, calls = [], []
    for e in kineto_events(path, ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver")):
        a = e.get("args", {})
        s = _ns(e["ts"])
        d = _ns(e.get("dur", 0))
        if e["cat"].lower() in ("cuda_runtime", "cuda_driver"):
            calls.append(dict(tid=(e["pid"], e["tid"]), start=s, end=s + d, name=e["name"], corr=a.get("correlation")))
        else:
            ops.append(
                dict(corr=a.get("correlation"), device=a.get("device"), stream=a.get("stream"), start=s, end=s + d)
            )
    return ops, calls


def _nsys_truth(path: Path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    ops = [
        dict(corr=c, device=d, stream=st, start=s, end=e)
        for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
        for c, d, st, s, e in con.execute(f"SELECT correlationId, deviceId, streamId, start, end FROM {t}")
    ]
    calls = [
        dict(tid=g, start=s, end=e, name=n, corr=c)
        for g, s, e, n, c in con.execute(
            "SELECT r.globalTid, r.start, r.end, s.value, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "JOIN StringIds s ON s.id = r.nameId"
        )
    ]
    con.close()
    for c in calls:
        c["name"] = c["name"].split("_v")[0] if "_v" in c["name"] else c["name"]
    return ops, calls


def _launch_of(ops, calls):
    by_corr = {}
    for c in calls:
        by_corr.setdefault(c["corr"], c)
    return {o["corr"]: by_corr[o["corr"]] for o in ops if o["corr"] in by_corr}


def _queue_truth(ops, launch):
    """Per stream: {t: queue length after every change at t}."""
    delta: dict = defaultdict(lambda: defaultdict(int))
    for o in ops:
        if o["corr"] in launch:
            key = (o["device"], o["stream"])
            delta[key][launch[o["corr"]]["start"]] += 1
            delta[key][o["start"]] -= 1
    out = {}
    for key, d in delta.items():
        level, series = 0, {}
        for t in sorted(d):
            level += d[t]
            series[t] = level
        out[key] = series
    return out


def _gaps_truth(ops, calls, launch, kernel_wait):
    """Every idle gap (device, stream, gap start, idle, cause), by the rules written out."""
    syncs = defaultdict(list)
    for c in calls:
        if c["name"] in SYNCS:
            syncs[c["tid"]].append(c["end"])
    by_stream = defaultdict(list)
    for o in ops:
        by_stream[(o["device"], o["stream"])].append(o)
    ends = defaultdict(list)
    for o in ops:
        ends[o["device"]].append(o["end"])
    for e in ends.values():
        e.sort()
    gaps = []
    for (dev, st), lst in by_stream.items():
        lst.sort(key=lambda o: o["start"])
        for prev, o in zip(lst, lst[1:]):
            g0, g1 = prev["end"], o["start"]
            call = launch.get(o["corr"])
            if call is not None and call["start"] > g0:
                waited = any(g0 < e <= call["start"] for e in syncs[call["tid"]])
                cause = "sync" if waited else "host"
            elif g1 - g0 < kernel_wait:
                cause = "kernel wait"
            elif bisect_right(ends[dev], g1) > bisect_right(ends[dev], g0):  # an op ended in (g0, g1]
                cause = "other stream"
            else:
                cause = "other"
            gaps.append((dev, st, g0, g1 - g0, cause))
    return sorted(gaps)


CASES = [
    (KINETO / "trace_filter__sampled_rank-0.json.gz", _kineto_truth),
    (KINETO / "negative_queue_length_values_check__rank0.json.gz", _kineto_truth),
    (NSYS, _nsys_truth),
    (PUBLIC / "dlprof_lenet_nsys2022.1.sqlite", _nsys_truth),  # synchronizes between steps
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c[0].name)
def case(request):
    path, truth = request.param
    trace = open_trace(path, use_cache=False)
    return trace, *from_zero(*truth(path), trace.origin)


def from_zero(ops, calls, origin: int):
    """The raw events with their times counted from the trace's zero, as kview's frames count."""
    for e in (*ops, *calls):
        e["start"] -= origin
        e["end"] -= origin
    return ops, calls


def test_launch_cost_and_delay_per_op(case):
    trace, ops, calls = case
    launch = _launch_of(ops, calls)
    # a launch may run several ops (a graph, a collective): a row per op, matched as a multiset
    want = sorted(
        (
            o["corr"],
            launch[o["corr"]]["end"] - launch[o["corr"]]["start"],
            max(0, o["start"] - launch[o["corr"]]["end"]),
        )
        for o in ops
        if o["corr"] in launch
    )
    got = la.launches(trace).filter(pl.col("r_start").is_not_null())
    assert got.height == len(want) > 0
    assert sorted(got.select("correlation", la.COST, la.DELAY).iter_rows()) == want


def test_launch_stats_per_kernel(case):
    trace, *_ = case
    lt = la.launches(trace).filter(pl.col("r_start").is_not_null())
    stats = la.launch_stats(trace, "Kernel")
    assert int(stats["Launches"].sum()) == lt.height
    for row in stats.head(5).iter_rows(named=True):
        mine = lt.filter(pl.col("Kernel") == row["Kernel"])
        delays = sorted(mine[la.DELAY].to_list())
        costs = mine[la.COST].to_list()
        assert row["Launches"] == len(delays)
        assert row["Launch delay total (ns)"] == sum(delays)
        assert row["Launch delay max (ns)"] == max(delays)
        assert row["Launch cost max (ns)"] == max(costs)
        assert row["Launch cost mean (ns)"] == round(sum(costs) / len(costs))
        # the median as numpy's linear interpolation defines it
        k = (len(delays) - 1) / 2
        med = delays[int(k)] + (delays[-(-int(k * 2) // 2)] - delays[int(k)]) * (k - int(k))
        assert row["Launch delay median (ns)"] == round(med)
    totals = stats["Launch delay total (ns)"].to_list()
    assert totals == sorted(totals, reverse=True)
    by_op = la.launch_stats(trace, "Op")
    assert int(by_op["Launches"].sum()) == lt.height
    assert int(by_op["Launch delay total (ns)"].sum()) == int(lt[la.DELAY].sum())


def test_queue_length_over_time(case):
    trace, ops, calls = case
    want = _queue_truth(ops, _launch_of(ops, calls))
    q = la.queue_series(trace)
    got: dict = defaultdict(dict)
    for d, s, t, v in q.iter_rows():
        got[(d, s)][t] = v
    assert dict(got) == want
    summary = la.queue_summary(trace)
    for row in summary.iter_rows(named=True):
        series = want[(row["Device"], row["Stream"])]
        assert row["Max queue"] == max(series.values())
        assert row["Min queue"] == min(series.values())
        ts = sorted(series)
        held = sum(series[a] * (b - a) for a, b in zip(ts, ts[1:]))
        assert row["Mean queue"] == pytest.approx(held / (ts[-1] - ts[0]), abs=0.006)


@pytest.mark.parametrize(
    "path", [NSYS, PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite", PUBLIC / "dlprof_lenet_nsys2022.1.sqlite"]
)
def test_queue_series_packed_as_sorted(path):
    # the packed sort (one integer per change) gives the rows of the sort by three keys, with
    # several devices and streams; and with the times cut to microseconds, where many launches
    # and starts of a stream fall at one time
    lt = la.launches(open_trace(path, use_cache=False)).select("device", "stream", "r_start", "start")
    lt = lt.filter(pl.col("r_start").is_not_null())
    for part in (lt, lt.with_columns(pl.col("r_start", "start") // 1000 * 1000)):
        packed = la._packed_queue(part)
        assert packed is not None and packed.height > 0
        assert packed.equals(la._sorted_queue(part))
    # a null stream does not pack: the rows' sort answers
    assert la._packed_queue(lt.with_columns(pl.lit(None, dtype=pl.Int64).alias("stream"))) is None


def test_idle_gaps_by_cause(case):
    trace, ops, calls = case
    want = _gaps_truth(ops, calls, _launch_of(ops, calls), la.KERNEL_WAIT_NS)
    g = la.idle_gaps(trace)
    got = sorted(g.select("device", "stream", "gap_start", "idle", "cause").iter_rows())
    assert got == want
    per = la.idle_by_stream(trace)
    for row in per.iter_rows(named=True):
        mine = [x for x in want if (x[0], x[1]) == (row["Device"], row["Stream"])]
        assert row["Idle (ns)"] == sum(x[3] for x in mine)
        for cause, col in la.CAUSE_COLUMNS.items():
            assert row[col] == sum(x[3] for x in mine if x[4] == cause)


def test_idle_gaps_name_the_op_after_each_gap_and_the_op_waited_on(case):
    """Each gap's Kernel and Op are those of the op that ends it, and waited_on is the name of
    an op of the device that ended last inside the gap (null where none did): the names gap_rows
    leaves out, taken back from the launches' rows it points at."""
    trace, _, _ = case
    lt = la.launches(trace).select("Idx", "device", "stream", "start", "end", "Kernel", "Op")
    by_idx = {r[0]: r for r in lt.iter_rows()}
    ends = defaultdict(list)
    for _, dev, _, _, end, kernel, _ in lt.iter_rows():
        ends[dev].append((end, kernel))
    for e in ends.values():
        e.sort(key=lambda x: x[0])
    g = la.idle_gaps(trace)
    assert g.height > 10
    if lt.select(pl.struct("device", "stream").n_unique()).item() > 1:  # some gap waited on another stream
        assert g["waited_on"].null_count() < g.height
    for dev, st, g0, g1, idx, kernel, op, waited in g.select(
        "device", "stream", "gap_start", "gap_end", "Idx", "Kernel", "Op", "waited_on"
    ).iter_rows():
        after = by_idx[idx]
        assert (after[1], after[2], after[3], after[5], after[6]) == (dev, st, g1, kernel, op)
        before = [x for x in ends[dev] if x[0] <= g1]
        last = before[-1][0] if before else None
        if last is None or last <= g0:
            assert waited is None
        else:
            assert waited in {k for e, k in before if e == last}


def test_the_longest_gaps_are_the_first_of_every_gap_sorted(case):
    """gap_table's top N (sorted alone, of the gaps at least as long as the N-th) are the first N
    rows of every gap's table (the whole sort), at cuts inside a run of equal lengths too."""
    trace, _, _ = case
    every = la.gap_table(trace, top=0)
    idle = every["Idle (ns)"].to_list()
    # cuts where the gap after the cut is as long as the one before it (the threshold's ties)
    tied = [k for k in range(1, len(idle)) if idle[k] == idle[k - 1]][:3]
    assert len(idle) > 20 and tied
    for k in [1, 5, 20, *tied]:
        assert la.gap_table(trace, top=k).equals(every.head(k)), k


def test_gap_table_names_the_cpu_call_around_each_gap(case):
    trace, ops, calls = case
    table = la.gap_table(trace, top=10)
    launch = _launch_of(ops, calls)
    op_at = {(o["device"], o["stream"], o["start"]): o for o in ops}
    assert table.height == min(10, int((la.idle_gaps(trace)["idle"] > 0).sum()))
    idle = table["Idle (ns)"].to_list()
    assert idle == sorted(idle, reverse=True)
    for row in table.iter_rows(named=True):
        g0 = row["From (ns)"]
        nxt = op_at[(row["Device"], row["Stream"], g0 + row["Idle (ns)"])]
        call = launch.get(nxt["corr"])
        if call is None:
            assert row["CPU call"] is None
            continue
        mine = sorted((c for c in calls if c["tid"] == call["tid"]), key=lambda c: c["start"])
        before = [c for c in mine if c["start"] <= g0]
        around = before[-1] if before and before[-1]["end"] > g0 else None
        if around is None:
            inside = [c for c in mine if g0 <= c["start"] < g0 + row["Idle (ns)"]]
            around = inside[0] if inside else None
        if around is None:
            assert row["CPU call"] is None
        else:
            assert (row["CPU call"], row["CPU call from (ns)"]) == (around["name"], around["start"])


def test_sync_waits_are_found():
    """LeNet under DLProf synchronizes between steps: the gaps after those are sync waits."""
    g = la.idle_gaps(open_trace(PUBLIC / "dlprof_lenet_nsys2022.1.sqlite", use_cache=False))
    assert (g["cause"] == "sync").sum() >= 1


# -- HTA ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hta():
    return pytest.importorskip("hta.trace_analysis")


def _hta_run(hta, path: Path, tmp: Path):
    import logging

    logging.disable(logging.WARNING)
    d = tmp / path.name.split(".")[0]
    d.mkdir()
    (d / path.name).write_bytes(path.read_bytes())
    # HTA drops the last ProfilerStep's work unless told; kview reads every event
    ta = hta.TraceAnalysis(trace_dir=str(d), include_last_profiler_step=True)
    rank = next(iter(ta.t.traces))
    return ta, rank


@pytest.mark.parametrize("path", HTA_TRACES, ids=lambda p: p.name)
def test_agrees_with_hta(hta, path, tmp_path):
    """HTA counts in µs from the trace's first event; kview in ns on the trace's clock."""
    ta, rank = _hta_run(hta, path, tmp_path)
    trace = open_trace(path, use_cache=False)
    lt = la.launches(trace)
    # launch statistics: HTA's cpu_duration and launch_delay per correlation, for the launch
    # calls it counts (cudaLaunchKernel[ExC], cudaMemcpyAsync, cudaMemsetAsync)
    h = ta.get_cuda_kernel_launch_stats(ranks=[rank], visualize=False)[rank]
    mine = lt.filter(pl.col("correlation").is_in(h["correlation"].to_list()))
    assert mine.height == len(h)
    got = sorted(mine.select("correlation", la.COST, la.DELAY).iter_rows())
    want = sorted(
        (int(c), round(a * 1000), round(b * 1000))
        for c, a, b in h[["correlation", "cpu_duration", "launch_delay"]].values
    )
    assert got == want
    # queue length: HTA's series has a row per event in an unstable sort, so at a time with
    # several events its rows differ in order; the level after the last event at each time and
    # the largest level between times agree
    series = ta.get_queue_length_time_series(ranks=[rank])
    if series:
        hs = series[rank]
        q = la.queue_series(trace)
        t0 = trace.origin - ta.t.min_ts * 1000 if hasattr(ta.t, "min_ts") else None
        launched = dict(lt.filter(pl.col("r_start").is_not_null()).group_by("stream").len().iter_rows())
        compared = 0
        for stream, part in hs.groupby("stream"):
            # HTA's series leaves out ops launched by calls it does not list (cudaGraphLaunch):
            # streams holding such ops differ by definition
            if len(part) != 2 * launched.get(stream, 0):
                continue
            compared += 1
            mine_q = q.filter(pl.col("stream") == stream)
            assert mine_q["queue"].max() <= part["queue_length"].max()
            assert mine_q["queue"].min() >= part["queue_length"].min()
            if t0 is not None:
                last = part.groupby("ts")["queue_length"].agg(list)
                ts_once = [t for t, v in last.items() if len(v) == 1]
                want_q = {round(t * 1000) - round(t0): last[t][0] for t in ts_once}
                have = dict(zip(mine_q["t"].to_list(), mine_q["queue"].to_list()))
                assert {t: have.get(t) for t in want_q} == want_q
        assert compared >= 1
    # idle time by stream: HTA's host wait = kview's host + sync, its kernel wait = kview's, its
    # other = kview's other stream + other (with HTA's threshold of 30 in its µs)
    # (HTA leaves out GPU ops whose launch call is not in the trace: streams holding such ops
    # differ by definition, the others are compared)
    if lt.height:
        ib, _ = ta.get_idle_time_breakdown(ranks=[rank], visualize=False, consecutive_kernel_delay=30)
        idle = la.idle_by_stream(trace, kernel_wait_ns=30_000)
        c = la.CAUSE_COLUMNS
        unlaunched = set(lt.filter(pl.col("r_start").is_null())["stream"].to_list())
        compared = idle.filter(~pl.col("Stream").is_in(list(unlaunched)))
        assert compared.height >= 1
        for row in compared.iter_rows(named=True):
            hrow = ib[ib["stream"] == row["Stream"]].set_index("idle_category")["idle_time"]
            assert round(hrow.get("host_wait", 0) * 1000) == row[c["host"]] + row[c["sync"]]
            assert round(hrow.get("kernel_wait", 0) * 1000) == row[c["kernel wait"]]
            assert round(hrow.get("other", 0) * 1000) == row[c["other stream"]] + row[c["other"]]


@pytest.mark.parametrize(
    "command, tables",
    [
        ("launches", ["kernels", "ops", "queue", "idle", "gaps", "queue-series"]),
        ("critical-path", ["steps", "ops"]),
    ],
)
def test_cli_writes_every_table_in_every_format(command, tables, capsys, tmp_path):
    """Each table as CSV, TSV and JSON holds the analysis' frame value for value; md and table
    render; several tables in CSV on stdout are refused in one line (exit 2); -o writes a file."""
    import io
    import json

    from kview.analysis import critical_path as cp
    from kview.cli import main

    path = KINETO / "trace_filter__sampled_rank-0.json.gz"
    trace = open_trace(path, use_cache=False)
    frames = {
        "kernels": lambda: la.launch_stats(trace, "Kernel"),
        "ops": (lambda: la.launch_stats(trace, "Op")) if command == "launches" else (lambda: cp.top_ops(trace)),
        "queue": lambda: la.queue_summary(trace),
        "idle": lambda: la.idle_by_stream(trace),
        "gaps": lambda: la.gap_table(trace),
        "queue-series": lambda: la.queue_series(trace),
        "steps": lambda: cp.step_table(trace),
    }
    for name in tables:
        want = frames[name]()
        assert want.height > 0, name
        # data formats write kview's "-" (no value) as missing
        want = want.with_columns(pl.col(pl.String).replace("-", None))
        for fmt, sep in (("csv", ","), ("tsv", "\t")):
            assert main([command, str(path), "--table", name, "-f", fmt]) == 0
            got = pl.read_csv(io.StringIO(capsys.readouterr().out), separator=sep, schema=want.schema)
            assert got.equals(want), (name, fmt)
        assert main([command, str(path), "--table", name, "-f", "json"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert len(rows) == want.height and list(rows[0]) == want.columns
    for fmt in ("md", "table", "json"):
        assert main([command, str(path), "-f", fmt]) == 0
        out = capsys.readouterr().out
        assert out.strip()
        if fmt == "json":
            assert len(json.loads(out)) == len(tables) - (command == "launches")  # queue-series: --table only
    assert main([command, str(path), "-f", "csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--table" in err
    assert main([command, str(path), "--top", "-1"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    target = tmp_path / "out.csv"
    assert main([command, str(path), "--table", tables[0], "-o", str(target)]) == 0
    first = frames[tables[0]]().with_columns(pl.col(pl.String).replace("-", None))
    assert pl.read_csv(target, schema=first.schema).equals(first)


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "cache"])
def test_sync_calls_read_by_their_rows_equal_the_filtered_calls(cached, tmp_path, monkeypatch):
    """The synchronizations are read by their rows where the runtime columns are not held (a
    trace opened for one command let them go): the same calls, in the same order, as every
    call's row filtered, with and without the cache and with the columns held."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = PUBLIC / "vecadd_nsys2025.5.sqlite"
    syncs = [*la.SYNC_APIS, *la.SYNC_MEMCPY_APIS]
    want = la.api_calls(open_trace(path, use_cache=False)).filter(pl.col("api").is_in(syncs))
    assert want["api"].to_list() == ["cudaMemcpy", "cudaMemcpy", "cudaDeviceSynchronize", "cudaMemcpy"]
    t = open_trace(path, use_cache=cached)
    assert la.sync_calls(t).equals(want)
    held = open_trace(path, use_cache=cached)
    held.columns("runtime", ["global_tid", "start", "end", "name_id"])
    assert la.sync_calls(held).equals(want)
