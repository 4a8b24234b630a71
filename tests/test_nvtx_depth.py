"""NVTX nesting at any depth: a push never popped inside a loop (20,000 deep) costs what a flat
trace costs, the ranges around a call equal a brute-force check on random nestings, and the
nsys reports that pair every kernel with every range around it refuse within the memory budget
instead of exhausting memory."""

from __future__ import annotations

import sqlite3

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import ELIDED, PATH_HEAD, PATH_TAIL
from kview.analysis.nvtx_tree import path_table
from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import SAMPLES, run_kview_measured
from deep_nvtx import make
from in_process import kview_here

DEPTH = 20_000


@pytest.fixture(scope="module")
def deep(tmp_path_factory):
    return make(tmp_path_factory.mktemp("deep") / "deep.sqlite", DEPTH)


def peak_rss_mib(args) -> tuple[int, str, str, float]:
    rc, out, err, _, rss = run_kview_measured(args)
    return rc, out, err, rss


def expected_path(labels: list[str]) -> str:
    """The documented shape of a long path: outer PATH_HEAD levels, a marker, inner PATH_TAIL."""
    if len(labels) <= PATH_HEAD + PATH_TAIL:
        return " > ".join(labels)
    gap = len(labels) - PATH_HEAD - PATH_TAIL
    return " > ".join(labels[:PATH_HEAD] + [f"{ELIDED} {gap} levels"] + labels[-PATH_TAIL:])


def test_kernels_of_a_push_never_popped_20000_deep(deep):
    rc, out, err, rss = peak_rss_mib(["kernels", deep, "-f", "csv", "--no-cache"])
    assert rc == 0 and err == "", err
    assert rss < 1500, f"peak RSS {rss:.0f} MiB"  # quadratic pairs took over 6 GB before
    t = pl.read_csv(out.encode(), infer_schema_length=0).sort(pl.col("Idx").cast(pl.Int64))
    assert t.height == DEPTH
    for i in (0, 5, 28, 29, 30, 1000, DEPTH - 1):  # iteration i runs inside i + 1 leaks and its work range
        labels = ["leak"] * (i + 1) + ["work"]
        row = t.row(i, named=True)
        assert row["NVTX Path"] == expected_path(labels), i
        assert row["Layer"] == expected_path(labels).replace(" > ", ":"), i


@pytest.mark.parametrize(
    "cmd", [["overview"], ["phases"], ["layers", "--pattern", "^work$"], ["stats", "-r", "all"]], ids=lambda c: c[0]
)
def test_every_command_on_the_deep_trace_stays_small(deep, cmd):
    fmt = "table" if cmd[0] == "stats" else "json"  # several tables; the table format says why one is skipped
    rc, out, err, rss = peak_rss_mib([cmd[0], deep, *cmd[1:], "-f", fmt, "--no-cache"])
    assert rc in (0, 1) and "Traceback" not in err and "internal error" not in err, err
    assert rss < 1500, f"{cmd[0]}: peak RSS {rss:.0f} MiB"
    if cmd[0] == "stats":
        for name in ("nvtx_kern_sum", "nvtx_gpu_proj_sum"):
            section = out.split(f"({name}):", 1)[1].split("**", 1)[0]
            assert f"nests NVTX ranges {DEPTH + 1:,} deep" in section
            assert f"takes {sum(i + 2 for i in range(DEPTH)):,} rows" in section


def test_nvtx_tree_of_the_deep_trace(deep):
    p = path_table(open_trace(deep, use_cache=False))
    assert p.height == 2 * DEPTH  # every level of leak is a new path, and each has its work path
    con = sqlite3.connect(deep)
    total = con.execute("SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    con.close()
    root = p.filter(pl.col("Depth") == 0)
    assert root["Path"].to_list() == ["leak"] and root["GPU (ns)"].item() == total
    assert root["GPU ops"].item() == DEPTH
    deepest = p.filter(pl.col("Depth") == DEPTH)
    assert deepest["Path"].item() == expected_path(["leak"] * DEPTH + ["work"])
    assert deepest["GPU ops"].item() == 1


def test_pairs_reports_are_exact_when_they_fit_and_refused_when_not(tmp_path):
    t = make(tmp_path / "d300.sqlite", 300)
    con = sqlite3.connect(t)
    durs = [d for (d,) in con.execute("SELECT end - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
    con.close()
    rep = REPORTS["nvtx_kern_sum"](open_trace(t, use_cache=False)).frame
    leak = rep.filter(pl.col("NVTX Range") == ":leak").row(0, named=True)
    # kernel i lies in i + 1 leak ranges: nsys's statistics are over (range, kernel) pairs
    assert leak["Total Time (ns)"] == sum((i + 1) * d for i, d in enumerate(durs))
    assert (leak["NVTX Inst"], leak["Kern Inst"]) == (300, 300)
    pairs = sum(i + 2 for i in range(300))
    r = kview_here("stats", t, "-r", "nvtx_kern_sum,nvtx_gpu_proj_sum", "--no-cache", env={"KVIEW_MAX_MEMORY": "4M"})
    limit = (4 << 20) // nv.PAIR_BYTES
    assert (
        r.returncode == 0
        and " ".join(r.stdout.split()).count(
            f"takes {pairs:,} rows, more than the {limit:,} the memory budget allows (--max-memory)"
        )
        == 2
    )


def test_start_end_ranges_left_open_are_paired_exactly_or_refused_too(tmp_path):
    """The same trace with each `leak` started and never ended: the kernels in them are as many
    pairs, counted with the pushed `work` around each call, and refused past the budget before
    they are made."""
    t = make(tmp_path / "d300.sqlite", 300)
    con = sqlite3.connect(t)
    with con:
        con.execute("UPDATE NVTX_EVENTS SET eventType = 60 WHERE textId = 1")
    durs = [d for (d,) in con.execute("SELECT end - start FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start")]
    con.close()
    rep = REPORTS["nvtx_kern_sum"](open_trace(t, use_cache=False)).frame
    leak = rep.filter(pl.col("NVTX Range") == ":leak").row(0, named=True)
    assert leak["Style"] == "StartEnd"
    assert leak["Total Time (ns)"] == sum((i + 1) * d for i, d in enumerate(durs))
    assert (leak["NVTX Inst"], leak["Kern Inst"]) == (300, 300)
    pairs = sum(i + 2 for i in range(300))
    r = kview_here("stats", t, "-r", "nvtx_kern_sum,nvtx_gpu_proj_sum", "--no-cache", env={"KVIEW_MAX_MEMORY": "4M"})
    limit = (4 << 20) // nv.PAIR_BYTES
    said = " ".join(r.stdout.split())
    assert r.returncode == 0 and said.count("nests NVTX ranges 301 deep, so pairing each kernel") == 2
    assert said.count(f"takes {pairs:,} rows, more than the {limit:,} the memory budget allows") == 2


def test_kernels_under_start_end_ranges_left_open_answer_within_the_budget_or_say_why(tmp_path):
    """`kview kernels` on a range started in a loop and never ended: every later kernel lies in
    every earlier one. Within the memory budget each path is SQLite's ranges around the launch;
    past it one line that names the pairs, not a run out of memory."""
    depth = 1000
    t = make(tmp_path / "open.sqlite", depth)
    con = sqlite3.connect(t)
    with con:
        con.execute("UPDATE NVTX_EVENTS SET eventType = 60 WHERE textId = 1")
    # per launch (by correlation): the started ranges at or before it, and the pushed one around it
    around = con.execute(
        "SELECT r.correlationId, (SELECT count(*) FROM NVTX_EVENTS n WHERE n.eventType = 60 AND n.start <= r.start),"
        " (SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59"
        " AND n.start <= r.start AND n.end >= r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r"
    ).fetchall()
    con.close()
    r = kview_here("kernels", t, "-f", "csv", "--no-cache")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    k = pl.read_csv(r.stdout.encode(), infer_schema_length=0)
    got = dict(zip(k["Correlation"].cast(pl.Int64), k["NVTX Path"]))
    assert len(got) == len(around) == depth
    for corr, started, pushed in around:
        assert got[corr] == " > ".join(["leak"] * started + [pushed]), corr
    # each user range with the started ranges around it (itself too): i + 1 for the i-th of
    # each name; the line says so before any pair is made
    pairs = sum(2 * (i + 1) for i in range(depth))
    small = kview_here("kernels", t, "-f", "csv", "--no-cache", env={"KVIEW_MAX_MEMORY": "256M"})
    limit = (256 << 20) // nv.PAIR_BYTES
    assert (small.returncode, small.stdout) == (2, "")
    assert small.stderr == (
        f"kview: {t}: nests NVTX ranges {depth:,} deep, so pairing each kernel with every range around it "
        f"takes {pairs:,} rows, more than the {limit:,} the memory budget allows (--max-memory)\n"
    )


def test_a_report_refused_for_the_memory_budget_is_not_kept_in_the_cache(tmp_path):
    t = make(tmp_path / "d300.sqlite", 300)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    args = ["stats", t, "-r", "nvtx_kern_sum", "-f", "csv"]
    small = kview_here(*args, env={**env, "KVIEW_MAX_MEMORY": "4M"})
    assert small.returncode == 0 and "the memory budget allows" in small.stderr
    full = kview_here(*args, env=env)  # same cache, no limit
    assert full.returncode == 0 and ":leak" in full.stdout and "memory budget" not in full.stderr


# -- the ranges around a call, against brute force on random nestings --------------------


@st.composite
def nestings(draw):
    """Push/pop ranges and calls on two threads, each thread's events in time order (a call
    takes [t, t + 1]); some pushes are never popped, some ranges have zero length."""
    ranges, calls = [], []
    for tid in (1, 2):
        t, stack = 0, []
        for step in draw(st.lists(st.sampled_from(["push", "pop", "call", "zero"]), max_size=60)):
            t += draw(st.integers(1, 3))
            if step == "push":
                stack.append(len(ranges))
                ranges.append([len(ranges) + 1, tid, t, None])
            elif step == "pop" and stack:
                ranges[stack.pop()][3] = t
            elif step == "zero":
                ranges.append([len(ranges) + 1, tid, t, t])
            elif step == "call":
                calls.append([len(calls), tid, t, t + 1])
                t += 1
        for i in stack:  # never popped: open to the end, as the projection fills them
            ranges[i][3] = 10_000
    r = pl.DataFrame(
        ranges, schema={"id": pl.Int64, "global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64}, orient="row"
    ).with_columns(pl.lit("PushPop").alias("style"))
    c = pl.DataFrame(
        calls, schema={"call_id": pl.Int64, "global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64}, orient="row"
    )
    return r, c


def brute(r: pl.DataFrame, c: pl.DataFrame) -> dict[int, list[tuple]]:
    out: dict[int, list[tuple]] = {}
    for cid, tid, cs, ce in c.iter_rows():
        found = [(s, -e, i) for i, t, s, e, _ in r.iter_rows() if t == tid and s <= cs and e >= ce]
        if found:
            out[cid] = sorted(found)
    return out


@settings(max_examples=150, deadline=None, derandomize=True)
@given(nestings())
def test_ranges_around_calls_equal_brute_force(case):
    r, c = case
    want = brute(r, c)
    inner = dict(nv.around(r, c).iter_rows())
    outer = dict(nv.around(r, c, outermost=True).iter_rows())
    assert inner == {cid: f[-1][2] for cid, f in want.items()}
    assert outer == {cid: f[0][2] for cid, f in want.items()}
    pairs = nv.enclosing(r, c)
    got: dict[int, set] = {}
    for cid, rid in pairs.iter_rows():
        got.setdefault(cid, set()).add(rid)
    assert got == {cid: {i for _, _, i in f} for cid, f in want.items()}


@settings(max_examples=150, deadline=None, derandomize=True)
@given(nestings(), st.lists(st.tuples(st.integers(1, 2), st.integers(0, 200), st.integers(0, 40)), max_size=20))
def test_start_end_ranges_around_calls_equal_brute_force(case, loose):
    """The same with the ranges started and ended (containment's passes, not the nesting), and
    more of them that overlap the others anywhere: every range around each call, once."""
    r, c = case
    extra = pl.DataFrame(
        [[r.height + 1 + i, tid, s, s + n] for i, (tid, s, n) in enumerate(loose)],
        schema={"id": pl.Int64, "global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64},
        orient="row",
    ).with_columns(pl.lit("PushPop").alias("style"))
    r = pl.concat([r, extra]).with_columns(pl.lit("StartEnd").alias("style"))
    want = brute(r, c)
    got: dict[int, list[int]] = {}
    for cid, rid in nv.enclosing(r, c).iter_rows():
        got.setdefault(cid, []).append(rid)
    assert got == {cid: sorted(i for _, _, i in f) for cid, f in want.items()}


def test_nesting_orders_a_traces_ranges_by_thread_from_their_runs():
    """An export lists each thread's ranges in runs: the stable order by thread made from the
    runs is the one a sort by thread gives, as is the one made where threads alternate row by
    row, and the nesting is the one a sort on every key gives."""
    ranges = nv.projection_ranges(open_trace(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", use_cache=False))
    tids = ranges["global_tid"].to_numpy()
    assert ranges.height > 10_000 and 1 < len(np.unique(tids)) and np.count_nonzero(np.diff(tids)) * 8 < len(tids)
    for t in (tids, np.where(np.arange(len(tids)) % 2 == 0, tids.min(), tids.max())):  # runs, then alternating
        order, by = nv._by_thread(t)
        assert np.array_equal(order, np.argsort(t, kind="stable")) and np.array_equal(by, t[order])
    keys = ["global_tid", "start", "end", "id"]
    want = nv._sorted_rows(ranges, keys, [False, False, True, False])
    assert np.array_equal(nv._nest_rows(ranges), want)
