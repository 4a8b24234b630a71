"""The parents and levels of NVTX ranges on threads with start/end ranges (nvtx_gpu_proj_sum's
Avg Range Lvl and Avg Num Child) equal a join of every range with every other range of its thread,
made by SQLite on the file, and no two ranges are each other's parent."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.reports import REPORTS
from kview.reports.nvtx import range_parents
from kview.trace import open_trace

from conftest import PUBLIC, SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
FSDP = PUBLIC / "nsysai_2gpu_fsdp_before_nsys2026.2.sqlite"

# start/end ranges added to a trace of pushed ranges: one around most of each thread's run; a
# copy of every 40th pushed range moved on by half its length (it overlaps its neighbours and its
# parent without nesting); a copy of every 97th with the same bounds (a later id)
WHOLE_RUN = (
    "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT min(start) + 1, max(end) - 1, 60, "
    "'most of the run', globalTid FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY globalTid"
)
OVERLAPPING = (
    "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT start + (end - start) / 2, "
    "end + (end - start) / 2, 60, 'overlapping', globalTid FROM NVTX_EVENTS WHERE eventType = 59 AND rowid % 40 = 0"
)
SAME_BOUNDS = (
    "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT start, end, 60, 'same bounds', "
    "globalTid FROM NVTX_EVENTS WHERE eventType = 59 AND rowid % 97 = 0"
)
# every range of the first thread that has ranges made a start/end range
FIRST_THREAD = (
    "UPDATE NVTX_EVENTS SET eventType = 60 WHERE eventType = 59 AND globalTid = "
    "(SELECT min(globalTid) FROM NVTX_EVENTS WHERE eventType = 59)"
)

# the domain of the sample's one CCCL range created again on another thread of its process:
# that range is two rows of one id, one per creation (as nsys joins them)
DOMAIN_TWICE = (
    "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) SELECT start + 5, eventType, "
    "text || '2', globalTid - (globalTid & 16777215) + 7, domainId FROM NVTX_EVENTS WHERE eventType = 75"
)

CASES = {
    "lm_whole_run": (LM, [WHOLE_RUN]),
    "lm_overlapping": (LM, [WHOLE_RUN, OVERLAPPING, SAME_BOUNDS]),
    "lm_domain_twice": (LM, [WHOLE_RUN, DOMAIN_TWICE]),
    "fsdp_one_thread_start_end": (FSDP, [SAME_BOUNDS, FIRST_THREAD, OVERLAPPING]),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def mixed(request, tmp_path_factory) -> Path:
    source, statements = CASES[request.param]
    path = tmp_path_factory.mktemp("mixed") / f"{request.param}.sqlite"
    shutil.copy(source, path)
    with sqlite3.connect(path) as con:
        for sql in statements:
            con.execute(sql)
    return path


def sqlite_parents(path: Path) -> dict[int, tuple[int | None, int]]:
    """id -> (parent, level) by SQLite: the parent is the shortest range of the thread that holds
    the range, of equally short ones the one that starts last, then the largest id, where a range
    with the same bounds holds only ranges of a larger id; the level is counted down from the roots, as nsys counts it. An
    R-tree of 32-bit bounds (rounded outwards) finds the candidates; the exact bounds decide."""
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TEMP TABLE r AS SELECT rowid AS id, start,
            ifnull(end, (SELECT max(max(start), max(end)) FROM NVTX_EVENTS WHERE eventType IN (59, 60))) AS end,
            globalTid AS tid
        FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND endGlobalTid IS NULL;
        CREATE VIRTUAL TABLE temp.box USING rtree(id, s0, s1, e0, e1);
        INSERT INTO temp.box SELECT id, start, start, end, end FROM temp.r;
        CREATE TEMP TABLE parent AS SELECT c.id AS id, (
            SELECT p.id FROM temp.box AS b JOIN temp.r AS p ON p.id = b.id
            WHERE b.s0 <= c.start AND b.e1 >= c.end AND p.tid = c.tid AND p.id != c.id
                AND p.start <= c.start AND p.end >= c.end
                AND NOT (p.start = c.start AND p.end = c.end AND p.id > c.id)
            ORDER BY p.end - p.start, p.start DESC, p.id DESC LIMIT 1
        ) AS parent FROM temp.r AS c;
        """
    )
    rows = con.execute(
        """
        WITH RECURSIVE tree(id, level) AS (
            SELECT id, 0 FROM temp.parent WHERE parent IS NULL
            UNION ALL
            SELECT p.id, tree.level + 1 FROM temp.parent AS p JOIN tree ON p.parent = tree.id
        )
        SELECT p.id, p.parent, tree.level FROM temp.parent AS p LEFT JOIN tree ON tree.id = p.id
        """
    ).fetchall()
    con.close()
    return {i: (p, lvl) for i, p, lvl in rows}


def test_parents_equal_sqlites_join_of_every_range_with_every_other(mixed):
    trace = open_trace(mixed, use_cache=False)
    ranges = nv.projection_ranges(trace)
    got = range_parents(trace, ranges)
    # a row per range row; an id named twice has one answer
    assert got.height == ranges.height and got.unique().height == got["id"].n_unique()
    want = sqlite_parents(mixed)
    assert len(want) == got["id"].n_unique()
    assert {i: (p, lvl) for i, p, lvl in got.iter_rows()} == want
    # every range reached from a root: no cycle left a range without a level
    assert None not in {lvl for _, lvl in want.values()}
    styles = ranges["style"].value_counts()
    assert styles.filter(pl.col("style") == "StartEnd")["count"].item() >= 2


def test_ranges_with_the_same_bounds_are_a_chain_in_id_order(tmp_path):
    """A start/end range added with the bounds of a pushed one (a later id) is its child, and
    takes over the pushed one's children; the pushed one keeps its parent. Of two equal ranges
    only the smaller id holds the other, as nest() chains them: the join of every pair named
    each the other's parent (a cycle, and no level for either)."""
    path = tmp_path / "same.sqlite"
    shutil.copy(LM, path)
    with sqlite3.connect(path) as con:
        con.execute(WHOLE_RUN)
    trace = open_trace(path, use_cache=False)
    before = dict(range_parents(trace, nv.projection_ranges(trace)).select("id", "parent").iter_rows())
    with sqlite3.connect(path) as con:
        con.execute(SAME_BOUNDS)
        copies = con.execute(
            "SELECT c.rowid, p.rowid FROM NVTX_EVENTS c JOIN NVTX_EVENTS p ON p.eventType = 59 "
            "AND c.text = 'same bounds' AND p.globalTid = c.globalTid AND p.start = c.start AND p.end = c.end"
        ).fetchall()
    trace = open_trace(path, use_cache=False)
    tree = range_parents(trace, nv.projection_ranges(trace))
    parent = dict(tree.select("id", "parent").iter_rows())
    level = dict(tree.select("id", "level").iter_rows())
    assert len(copies) == 117
    copy_of = {pushed: copy for copy, pushed in copies}
    for copy, pushed in copies:
        assert copy > pushed and parent[copy] == pushed and parent[pushed] == before[pushed]
        assert level[copy] == level[pushed] + 1
    moved = {i for i, p in before.items() if p in copy_of}
    assert len(moved) == 94
    assert all(parent[i] == copy_of[before[i]] for i in moved)
    assert max(level.values()) < 20


def test_pushed_ranges_keep_their_nesting_beside_a_start_end_range(tmp_path):
    """On a thread that also starts and ends a range around most of the run, each pushed range's
    parent is the one nest() gives it in the trace without that range, or the start/end range
    where it holds the pushed one and is the shorter; levels count the parents up to a root."""
    plain = open_trace(LM, use_cache=False)
    nested = nv.nest(nv.projection_ranges(plain).select("id", "global_tid", "start", "end"))
    was = dict(nested.select("id", "parent").iter_rows())
    path = tmp_path / "whole.sqlite"
    shutil.copy(LM, path)
    with sqlite3.connect(path) as con:
        con.execute(WHOLE_RUN)
        whole = {t: i for i, t in con.execute("SELECT rowid, globalTid FROM NVTX_EVENTS WHERE eventType = 60")}
    trace = open_trace(path, use_cache=False)
    ranges = nv.projection_ranges(trace)
    span = {i: (t, s, e) for i, t, s, e in ranges.select("id", "global_tid", "start", "end").iter_rows()}
    now = {i: (p, lvl) for i, p, lvl in range_parents(trace, ranges).iter_rows()}
    assert len(now) == len(was) + 2

    def length(i: int) -> int:
        return span[i][2] - span[i][1]

    moved = 0
    for i, p in was.items():
        tid, s, e = span[i]
        w = whole[tid]
        holds = span[w][1] <= s and span[w][2] >= e
        want = w if holds and (p is None or length(w) < length(p)) else p
        assert now[i][0] == want, i
        moved += want != p
    assert moved > 1000
    for p, lvl in now.values():
        assert lvl == (0 if p is None else now[p][1] + 1)


def test_kernels_in_overlapping_start_end_ranges_equal_sqlites(tmp_path):
    """nvtx_kern_sum's start/end rows count, per range name, the kernels SQLite pairs
    by the launch's thread and times, where the ranges overlap without nesting."""
    path = tmp_path / "over.sqlite"
    shutil.copy(LM, path)
    with sqlite3.connect(path) as con:
        for sql in (WHOLE_RUN, OVERLAPPING, SAME_BOUNDS):
            con.execute(sql)
        want = con.execute(
            "SELECT ':' || n.text, count(DISTINCT k.rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId "
            "AND (r.globalTid >> 24) = (k.globalPid >> 24) JOIN NVTX_EVENTS n ON n.eventType = 60 "
            "AND n.globalTid = r.globalTid AND n.start <= r.start AND n.end >= r.end GROUP BY n.text"
        ).fetchall()
    rep = REPORTS["nvtx_kern_sum"](open_trace(path, use_cache=False)).frame.filter(pl.col("Style") == "StartEnd")
    # a range name's kernels are counted once per kernel name: their sum is its distinct kernels
    got = rep.group_by("NVTX Range").agg(pl.col("Kern Inst").sum()).sort("NVTX Range")
    assert sorted(want) == list(got.iter_rows())
    assert {n for n, _ in want} == {":most of the run", ":overlapping", ":same bounds"}
