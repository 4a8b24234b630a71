"""kview's NVTX tree on a thread whose push/pop ranges cross: a range never popped (end NULL,
which nsys ends at the last timestamp) inside ranges that close. Each range then hangs under its
tightest enclosing range on its thread, as nsys names a parent (and the NVTX reports take it):
the whole tree checked against SQLite's own answer on the LM sample, as it is and with such a
range added on the main thread or on the autograd engine's."""

from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import PATH_HEAD, PATH_TAIL
from kview.analysis.nvtx_tree import path_table
from kview.trace import open_trace

from conftest import SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
MAIN, AUTOGRAD = 281495797236953, 281495797236997  # the sample's two threads with ranges
VARIANTS = {
    "sample": None,
    # a CCCL-domain push inside layer_3, never popped: it crosses forward_pass, and its tightest
    # holder is profiled_step; it is the tightest holder of backward_pass and optimizer_step
    "open_on_main": "insert into NVTX_EVENTS(start,end,eventType,text,globalTid,domainId) select start+1000,"
    "NULL,59,'cub::DeviceSegmentedSort',globalTid,1 from NVTX_EVENTS where text='layer_3'",
    # an op marker pushed inside the 41st MmBackward0 on the autograd thread, never popped
    "open_on_autograd": "insert into NVTX_EVENTS(start,end,eventType,text,globalTid,domainId) select start+100,"
    f"NULL,59,'aten::leak, op_id = 1',globalTid,0 from NVTX_EVENTS where globalTid={AUTOGRAD} and eventType=59 "
    "and text like 'MmBackward0%' order by start limit 1 offset 40",
    # on the autograd thread, a range open across backward_pass's end, a push inside it after that
    # end never popped, and a range inside both: its top range is the first (under backward_pass),
    # not the last top range to begin before it (the open push, under profiled_step)
    "open_after_a_phase": ";".join(
        "insert into NVTX_EVENTS(start,end,eventType,text,globalTid,domainId) select "
        f"end+{a},{b},59,'aten::{name}, op_id = {k}',{AUTOGRAD},0 from NVTX_EVENTS where text='backward_pass'"
        for a, b, name, k in (
            (-1000, "end+2000", "straddle", 1),
            (1000, "NULL", "leak", 2),
            (1500, "end+1800", "inner", 3),
        )
    ),
}

# every push/pop range (an open one ends at the last timestamp) with its tightest enclosing range
# on its thread, nsys's parent: the holder with the smallest (c.start - p.start) + (p.end -
# c.end), that is the shortest; of equally short ones the later start
PARENTS = """
create temp table r as
  select rowid as id, globalTid as t, start as s, coalesce(end, (select max(max(start), max(end))
    from NVTX_EVENTS where eventType = 59)) as e
  from NVTX_EVENTS where eventType = 59;
create index temp.r_ts on r(t, s);
create temp table up as
  select c.id, c.t, c.s, c.e, (
    select p.id from r p where p.t = c.t and p.s <= c.s and p.e >= c.e and p.id != c.id
      and not (p.s = c.s and p.e = c.e and p.id > c.id)
    order by p.e - p.s, p.s desc, p.id desc limit 1) as parent
  from r c;
"""
# every GPU op's launch: the start of the call that launched it, and its duration
OPS = """
select coalesce(c.start, k.start), k.end - k.start
from (select start, end, correlationId from CUPTI_ACTIVITY_KIND_KERNEL
      union all select start, end, correlationId from CUPTI_ACTIVITY_KIND_MEMCPY
      union all select start, end, correlationId from CUPTI_ACTIVITY_KIND_MEMSET) k
left join CUPTI_ACTIVITY_KIND_RUNTIME c on c.correlationId = k.correlationId
"""


def _sql_tree(path) -> dict[str, tuple[int, int, int, int]]:
    """Path -> (instances, CPU ns, GPU ns, GPU ops), the parents by SQLite alone: a top range of the
    autograd thread (no user ranges of its own) under the innermost user range of the main thread
    open when it began, as the tree places it; a GPU op counts once for a path when one of its
    instances was open at the op's launch. The labels are kview's (short_labels)."""
    trace = open_trace(path, use_cache=False)
    ranges = nv.projection_ranges(trace)
    _, short_of = nv.short_labels(trace)
    names = nv.short_labels(trace)[0]["short"].to_list()
    label = {i: names[short_of[c]] for i, c in ranges.select("id", "name_code").iter_rows()}
    user = set(ranges.filter(pl.col("name_code").is_in(nv.user_codes(trace)["name_code"].implode()))["id"].to_list())
    con = sqlite3.connect(path)
    con.executescript(PARENTS)
    rows = {i: [t, s, e, p] for i, t, s, e, p in con.execute("select id, t, s, e, parent from up")}
    ops = np.array(con.execute(OPS).fetchall(), dtype=np.int64)
    con.close()
    assert {t for t, *_ in rows.values() if t not in (MAIN, AUTOGRAD)} == set()
    assert not any(rows[i][0] == AUTOGRAD for i in user)
    users = [(s, -(e - s), i) for i, (t, s, e, _) in rows.items() if i in user]
    for row in rows.values():
        if row[0] == AUTOGRAD and row[3] is None:
            row[3] = max(((s, d, u) for s, d, u in users if s <= row[1] <= s - d), default=(0, 0, None))[2]
    paths: dict[str, list[tuple[int, int]]] = {}
    for i, (_, s, e, _) in rows.items():
        chain, at = [], i
        while at is not None:
            chain.append(label[at])
            at = rows[at][3]
        assert len(chain) < PATH_HEAD + PATH_TAIL  # no path elided
        paths.setdefault(" > ".join(reversed(chain)), []).append((s, e))
    out = {}
    for p, windows in paths.items():
        w = np.array(windows)
        inside = ((w[:, :1] <= ops[:, 0]) & (ops[:, 0] <= w[:, 1:])).any(axis=0)
        out[p] = (len(windows), int((w[:, 1] - w[:, 0]).sum()), int(ops[inside, 1].sum()), int(inside.sum()))
    return out


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    sql = VARIANTS[request.param]
    if sql is None:
        return request.param, LM
    path = tmp_path_factory.mktemp(request.param) / f"{request.param}.sqlite"
    shutil.copy(LM, path)
    con = sqlite3.connect(path)
    con.executescript(sql)
    con.commit()
    con.close()
    return request.param, path


def test_the_tree_is_sqls_tightest_enclosing_ranges(variant):
    which, path = variant
    want = _sql_tree(path)
    t = path_table(open_trace(path, use_cache=False))
    got = {r[0]: tuple(r[1:]) for r in t.select("Path", "Instances", "CPU (ns)", "GPU (ns)", "GPU ops").iter_rows()}
    assert got == want
    assert t.select((pl.col("Path").str.count_matches(" > ") == pl.col("Depth")).all()).item()
    crossing = nv.projection_nesting(open_trace(path, use_cache=False)).crossing_threads.tolist()
    assert crossing == {"sample": [], "open_on_main": [MAIN]}.get(which, [AUTOGRAD])
    if which == "open_on_main":
        # not profiled_step > forward_pass > backward_pass, as the push/pop nesting had it
        step = "profiled_step > cub::DeviceSegmentedSort"
        assert want[step] == (1, 147_344_715, 29_188_829, 2_924)
        assert want[f"{step} > backward_pass"] == (1, 74_372_692, 19_112_224, 1_445)
        assert want[f"{step} > optimizer_step"] == (1, 30_825_606, 3_057_975, 888)
        assert want["profiled_step > forward_pass > layer_4"] == (1, 4_408_668, 725_884, 64)
    elif which == "open_after_a_phase":
        assert want["profiled_step > backward_pass > aten::straddle > aten::inner"] == (1, 300, 0, 0)
        assert want["profiled_step > aten::leak"][0] == 1
    elif which == "sample":
        assert want["profiled_step > backward_pass"] == (1, 74_372_692, 19_112_224, 1_445)
