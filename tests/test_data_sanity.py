"""Impossible rows (GPU work that ends before it starts, or lies outside the recorded session)
are counted and named: the Overview leaves them out of its figures and says how many, `stats`
keeps nsys's numbers and says on stderr what is in them. A clean trace says nothing."""

from __future__ import annotations

import json
import shutil
import sqlite3

import polars as pl
import pytest

from kview.analysis.sanity import warning
from kview.trace import open_trace

from conftest import LM_TRACES, PUBLIC_TRACES, SAMPLES
from in_process import kview_here

FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
BACKWARDS, OUTSIDE = 7, 5  # every 7th kernel ends before it starts; 5 memsets after the session


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    t = tmp_path_factory.mktemp("sanity") / "damaged.sqlite"
    shutil.copy(FWD, t)
    con = sqlite3.connect(t)
    (session,) = con.execute("SELECT duration FROM ANALYSIS_DETAILS").fetchone()
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 5000000 WHERE rowid % ? = 0", (BACKWARDS,))
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET start = start + ?, end = end + ? WHERE rowid <= ?",
        (session, session, OUTSIDE),
    )
    con.commit()
    con.close()
    return t


def kview(*args):
    r = kview_here(*args, "--no-cache")  # the document: no child needed
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r


def rows(trace, sql):
    con = sqlite3.connect(trace)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_overview_leaves_impossible_rows_out_and_says_so(damaged):
    (session,) = rows(damaged, "SELECT duration FROM ANALYSIS_DETAILS")[0]
    (n_back,) = rows(damaged, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE end < start")[0]
    assert n_back == 736 // BACKWARDS
    good = rows(
        damaged,
        "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE end >= start UNION ALL "
        f"SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE end <= {session} ORDER BY 1",
    )
    busy, cur_s, cur_e = 0, None, None  # the union of the possible intervals, by hand
    for s, e in good:
        if cur_e is None or s > cur_e:
            busy += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    o = json.loads(kview("overview", damaged, "-f", "json").stdout)
    (dev,) = o["GPU busy"]
    assert dev["Busy (ns)"] == busy and dev["Span (ns)"] == max(e for _, e in good) - good[0][0]
    assert 0 < dev["Busy (%)"] <= 100
    facts = {f[""]: f["value"] for f in o["Trace"]}
    assert facts["GPU ops"] == f"{len(good):,}"
    first = o["Findings"][0]["Finding"]
    assert first.startswith(
        f"Impossible data: {n_back:,} kernels end before they start; "
        f"{OUTSIDE} memory sets lie outside the recorded session."
    ), first
    assert sum(c["Ops"] for c in o["Time by category"]) == len(good)
    assert all(c["Time (ns)"] >= 0 for c in o["Time by category"])
    # the phases leave them out too (they counted them while the finding said otherwise)
    phases = o["Time by phase"]
    assert phases and sum(p["GPU ops"] for p in phases) <= len(good)
    assert all(p["GPU Time (ns)"] >= 0 for p in phases) and sum(p["Share (%)"] for p in phases) <= 100.05


def test_impossible_rows_are_counted_the_same_from_the_gpu_ops(damaged):
    """Where the GPU ops are made, their rows are counted from them (`kview overview` lets the
    raw columns go once attribution joined them): the same counts, no column read again."""
    from kview.analysis.attribution import gpu_ops
    from kview.analysis.sanity import counts

    raw = counts(open_trace(damaged, use_cache=False))
    t = open_trace(damaged, use_cache=False)
    gpu_ops(t)
    t.let_go("kernels", "memcpy", "memset")
    assert counts(t) == raw == {"kernels": (736 // BACKWARDS, 0), "memory sets": (0, OUTSIDE)}
    assert not {"kernels", "memcpy", "memset"} & set(t._frames)


def test_stats_keeps_nsys_numbers_and_warns_on_stderr(damaged):
    r = kview("stats", damaged, "-r", "cuda_gpu_kern_sum", "-f", "csv")
    t = pl.read_csv(r.stdout.encode())
    (total,) = rows(damaged, "SELECT sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    assert t["Total Time (ns)"].sum() == total  # as nsys stats computes it, negative rows included
    assert r.stderr == (
        f"kview: damaged.sqlite: impossible rows: {736 // BACKWARDS:,} kernels end before they "
        f"start; {OUTSIDE} memory sets lie outside the recorded session (counted as they are, "
        f"as nsys stats does)\n"
    )


@pytest.mark.parametrize("trace", [*PUBLIC_TRACES, *LM_TRACES], ids=lambda p: p.name)
def test_real_traces_hold_no_impossible_rows(trace):
    """Real exports (nsys 2022.1-2026.2, every GPU row inside its session): no warning."""
    assert warning(open_trace(trace, use_cache=False)) is None
