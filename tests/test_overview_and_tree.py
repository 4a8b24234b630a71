"""Overview facts and the NVTX path tree, against values computed independently."""

from __future__ import annotations

import sqlite3

import polars as pl
import pytest

from kview.analysis.nvtx_tree import path_table
from kview.analysis.overview import build
from kview.trace import open_trace

from conftest import KINETO, PUBLIC, SAMPLES
from in_process import kview_here

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


def _busy(path):
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    iv = sorted(
        con.execute(
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end FROM "
            "CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET"
        )
    )
    busy, cur_s, cur_e = 0, None, None
    for s, e in iv:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    return busy, iv[-1][1] if False else max(e for _, e in iv) - iv[0][0]


def test_overview_busy_share_and_findings():
    o = build(open_trace(LM, use_cache=False))
    busy, span = _busy(LM)
    row = o.busy.row(0, named=True)
    assert (row["Busy (ns)"], row["Span (ns)"]) == (busy, span)
    assert dict(o.facts)["GPU"] == "NVIDIA H200" and dict(o.facts)["GPU ops"] == "3,117"
    assert o.phases["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"]
    assert any(f.startswith("Launch-bound") for f in o.findings)
    assert o.gaps["Idle (ns)"].to_list() == sorted(o.gaps["Idle (ns)"].to_list(), reverse=True)


def test_overview_that_lets_the_ranges_go_is_the_same_and_never_makes_them_again(monkeypatch):
    """`kview overview` (a trace opened for one command) lets the NVTX ranges go once the
    Overview's tables of them are made: the Overview is the same, and nothing after the release
    asks for the ranges again (they would be made again, the seconds and the gigabyte the
    release is for)."""
    from kview.analysis import nvtx_ranges

    kept = build(open_trace(LM, use_cache=False))
    trace = open_trace(LM, use_cache=False)
    trace.one_command = True
    calls = []
    release = nvtx_ranges.release
    monkeypatch.setattr(nvtx_ranges, "release", lambda t: (calls.append(sorted(t.store.held())), release(t)))
    let_go = build(trace)
    assert len(calls) == 1 and {"nvtx", "nvtx_ranges.labels", "nvtx_ranges.projection_nesting"} <= set(calls[0])
    assert not trace.store.held() & {"nvtx", "nvtx_ranges.labels", "nvtx_ranges.projection_ranges"}
    assert (let_go.facts, let_go.findings) == (kept.facts, kept.findings)
    for name in ("busy", "gaps", "categories", "phases", "top_kernels", "cpu_ops", "ranks", "critical_path"):
        assert getattr(let_go, name).equals(getattr(kept, name)), name


@pytest.mark.parametrize("pack_bytes", [0, None], ids=["packed", "kept"])
def test_overview_whose_attribution_lets_the_names_go_is_the_same_and_reads_the_ranges_once(monkeypatch, pack_bytes):
    """`kview overview` lets attribution drop the ranges' names as `kview kernels` does
    (`Trace.ranges_only_for_attribution`): the counts, phases and steps it asks of the ranges
    are made first, so the Overview is the same, the NVTX rows are read once, and neither the
    ranges, their names nor the nesting are held after."""
    from kview.analysis import attribution

    if pack_bytes is not None:  # the sample's text is small: packed as a large trace's is
        monkeypatch.setattr(attribution._OpTexts, "PACK_BYTES", pack_bytes)
    kept = build(open_trace(LM, use_cache=False))
    trace = open_trace(LM, use_cache=False)
    trace.one_command = trace.ranges_only_for_attribution = True
    read = trace.source.nvtx_events
    reads = []
    monkeypatch.setattr(trace.source, "nvtx_events", lambda: reads.append(1) or read())
    made = []
    whole = attribution._attributed
    monkeypatch.setattr(attribution, "_attributed", lambda t, shapes: made.append(shapes) or whole(t, shapes))
    columns = trace.source.read_columns
    asked = []
    monkeypatch.setattr(
        trace.source,
        "read_columns",
        lambda k, n, where=None: asked.extend((k, c, where is not None) for c in n) or columns(k, n, where),
    )
    let_go = build(trace)
    assert len(reads) == 1
    # no column read whole again (the raw columns go once attribution joined them, and the rest
    # reads the GPU ops); the runtime calls' synchronizations are read again by their rows only
    whole = [(k, c) for k, c, rows in asked if not rows]
    assert len(whole) == len(set(whole))
    assert {(k, c) for k, c, rows in asked if rows} == {
        ("runtime", c) for c in ("global_tid", "start", "end", "name_id")
    }
    assert "kernels" not in trace._frames
    assert made == [False]  # the attributed table's columns the Overview reads, never the whole table
    ranges = {"nvtx", "nvtx_ranges.labels", "nvtx_ranges.projection_ranges", "nvtx_ranges.projection_nesting"}
    assert not trace.store.held() & ranges
    # nor the tables of a row per GPU op made on the way, once their last question was asked
    per_op = {
        "attribution",
        "attribution.categorized",
        "launches.launches",
        "launches.idle_gaps",
        "critical_path.path_nodes",
        "critical_path.path_walk",
    }
    assert not trace.store.held() & per_op
    assert (let_go.facts, let_go.findings) == (kept.facts, kept.findings)
    assert let_go.phases.height == 3 and let_go.critical_path.height > 0
    for name in ("busy", "gaps", "categories", "phases", "top_kernels", "cpu_ops", "ranks", "critical_path"):
        assert getattr(let_go, name).equals(getattr(kept, name)), name


def test_overview_findings_on_public_vecadd():
    o = build(open_trace(PUBLIC / "vecadd_nsys2025.5.sqlite", use_cache=False))
    text = " ".join(o.findings)
    assert "Pageable memcpy: 3 copies" in text and "Synchronous memcpy" in text
    r = kview_here("overview", str(PUBLIC / "vecadd_nsys2025.5.sqlite"))
    assert r.returncode == 0 and "** Findings:" in r.stdout and "NVIDIA GeForce RTX 3060" in r.stdout


def test_nvtx_path_tree_counts_match_ranges_and_kernels():
    t = open_trace(LM, use_cache=False)
    pt = path_table(t)
    con = sqlite3.connect(f"file:{LM}?mode=ro&immutable=1", uri=True)
    n_layer3 = con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text = 'layer_3'").fetchone()[0]
    row = pt.filter(pl.col("Path") == "profiled_step > forward_pass > layer_3").row(0, named=True)
    assert row["Instances"] == n_layer3 == 1
    s, e = con.execute("SELECT start, end FROM NVTX_EVENTS WHERE text = 'layer_3'").fetchone()
    assert row["CPU (ns)"] == e - s
    gpu, n = con.execute(
        "SELECT sum(k.end - k.start), count(*) FROM (SELECT start, end, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_KERNEL UNION ALL SELECT start, end, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMSET UNION ALL SELECT start, end, correlationId FROM "
        "CUPTI_ACTIVITY_KIND_MEMCPY) k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
        "r.correlationId = k.correlationId WHERE r.start BETWEEN ? AND ?",
        (s, e),
    ).fetchone()
    assert (row["GPU (ns)"], row["GPU ops"]) == (gpu, n)
    # op markers are collapsed to their op name
    assert pt.filter(pl.col("Name") == "aten::linear").height > 0
    assert not pt["Name"].str.contains("op_id").any()


@pytest.mark.parametrize(
    "path",
    [LM, SAMPLES / "bert-2l_seq128_train_nsys.sqlite", PUBLIC / "nsysai_h100_2gpu_fsdp_nsys2026.2.sqlite"],
    ids=lambda p: p.name,
)
def test_each_paths_text_is_its_parents_names_from_the_root(path):
    """Path, made a level at a time, against the names walked up by parent_id (no path of
    these traces is deep enough to leave a level out), and each path's depth its chain's."""
    pt = path_table(open_trace(path, use_cache=False))
    assert pt.height > 10
    parent = dict(zip(pt["path_id"].to_list(), pt["parent_id"].to_list()))
    name = dict(zip(pt["path_id"].to_list(), pt["Name"].to_list()))
    for pid, text, depth in pt.select("path_id", "Path", "Depth").iter_rows():
        chain = []
        while pid is not None:
            chain.append(name[pid])
            pid = parent[pid]
        assert (text, depth) == (" > ".join(reversed(chain)), len(chain) - 1)


def test_autograd_ranges_hang_under_backward_pass_each_op_counted_once():
    """The autograd thread's ranges sit under the range the main thread had open (backward_pass),
    and a path's GPU time counts each op launched inside any of its instances once: checked
    against SQL over the trace (a launch inside any instance's window, any thread)."""
    t = open_trace(LM, use_cache=False)
    pt = path_table(t)
    assert pt.filter(pl.col("Depth") == 0)["Path"].to_list() == ["profiled_step"]
    row = pt.filter(
        pl.col("Path") == "profiled_step > backward_pass > autograd::engine::evaluate_function: MmBackward0"
    ).row(0, named=True)
    con = sqlite3.connect(f"file:{LM}?mode=ro&immutable=1", uri=True)
    n_inst = con.execute(
        "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE 'autograd::engine::evaluate_function: MmBackward0,%'"
    ).fetchone()[0]
    gpu, n = con.execute(
        # the instances first (85 rows), so each launch is checked against them only
        "WITH v AS MATERIALIZED (SELECT start, end FROM NVTX_EVENTS WHERE text LIKE "
        "'autograd::engine::evaluate_function: MmBackward0,%') "
        "SELECT sum(k.end - k.start), count(*) FROM (SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL "
        "UNION ALL SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_MEMSET UNION ALL SELECT start, end, "
        "correlationId FROM CUPTI_ACTIVITY_KIND_MEMCPY) k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON "
        "r.correlationId = k.correlationId WHERE EXISTS (SELECT 1 FROM v WHERE r.start BETWEEN v.start AND v.end)"
    ).fetchone()
    assert row["Instances"] == n_inst == 85
    assert (row["GPU (ns)"], row["GPU ops"]) == (gpu, n) == (13285557, 303)
    bwd = pt.filter(pl.col("Path") == "profiled_step > backward_pass").row(0, named=True)
    kids = pt.filter(pl.col("parent_id") == bwd["path_id"])
    assert kids.height > 20 and kids["GPU (ns)"].sum() <= bwd["GPU (ns)"]
    # path_ops lists exactly the ops behind the number
    from kview.analysis.attribution import attribute
    from kview.analysis.nvtx_tree import path_ops

    ops = attribute(t).filter(pl.col("Idx").is_in(path_ops(t, row["path_id"]).implode()))
    assert (ops.height, ops["Duration (ns)"].sum()) == (n, gpu)
    assert set(ops["NVTX Path"]) == {"profiled_step > backward_pass"} and set(ops["Direction"]) == {"bprop"}


def test_the_tree_and_the_timelines_range_rows_read_back_from_the_cache_equal_fresh(tmp_path, monkeypatch):
    """The NVTX tree (paths and their windows) and the Timeline's NVTX rows are kept in the
    frame cache: a reopen reads them back, equal to a fresh build, without the ranges' labels."""
    from kview.analysis import timeline
    from kview.analysis.nvtx_tree import paths_and_windows

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    fresh = open_trace(LM, use_cache=False)
    first = open_trace(LM)
    paths_and_windows(first), timeline.nvtx_row_table(first)
    again = open_trace(LM)
    for got, want in zip(
        (*paths_and_windows(again), *timeline.nvtx_row_table(again)),
        (*paths_and_windows(fresh), *timeline.nvtx_row_table(fresh)),
    ):
        assert got.height and got.equals(want) and got.schema == want.schema
    names = again.store.held()
    assert names == {"nvtx_tree", "timeline.nvtx"}, names
    tl, tf = timeline.build(again), timeline.build(fresh)
    assert tl.names == tf.names and len(tl.rows) == len(tf.rows)
    for a, b in zip(tl.rows, tf.rows):
        assert (a.label, a.group, a.depth) == (b.label, b.group, b.depth)
        assert all(
            (x == y).all() and x.dtype == y.dtype
            for x, y in ((a.start, b.start), (a.end, b.end), (a.code, b.code), (a.cls, b.cls))
        )


def test_a_paths_windows_merge_as_merge_intervals_merges_them():
    """The tree's windows merged by numpy sorts of keys equal merge_intervals by path (touching
    windows merge, equal starts, nested and zero-length windows, far apart values)."""
    import numpy as np

    from kview.analysis import nvtx_tree as nt
    from kview.analysis.gpu_time import merge_intervals

    rng = np.random.default_rng(7)
    cases = []
    for i in range(500):
        n, g = int(rng.integers(1, 60)), int(rng.integers(1, 6))
        s = rng.integers(-20, 50, n)
        d = rng.integers(0, 15, n) if i % 3 else rng.integers(0, 2, n)
        cases.append(pl.DataFrame({"path_id": rng.integers(0, g, n), "start": s, "end": s + d}, schema=nt.WINDOWS))
    cases.append(
        pl.DataFrame({"path_id": [0, 0, 1], "start": [0, 10**17, 5], "end": [10**17, 3 * 10**17, 6]}, schema=nt.WINDOWS)
    )
    for w in cases:
        want = merge_intervals(w, ["path_id"]).sort(["path_id", "start"]).select(list(nt.WINDOWS)).cast(nt.WINDOWS)
        assert nt._merge(w).equals(want)


def test_path_ids_by_small_depths_as_by_any_depths():
    """The paths numbered from the levels' counts (depths under 2**16, sorted as small
    integers) are those numbered from a sort of any depths: on the LM sample's ranges, and
    with a level left empty (its ranges one level deeper, their parents no longer above)."""
    from kview.analysis import nvtx_ranges as nv
    from kview.analysis import nvtx_tree as nt

    t = open_trace(LM, use_cache=False)
    tree = nv.projection_nesting(t).frame(["id", "start", "end", "global_tid", "name_code"])
    r = tree.select("id", "parent", pl.col("depth").cast(pl.Int64), pl.col("name_code").alias("lc"))
    gap = r.with_columns(pl.when(pl.col("depth") >= 2).then(pl.col("depth") + 1).otherwise("depth").alias("depth"))
    for part in (r, gap):
        got = nt._path_ids(part)
        want = nt._path_ids(part.with_columns(pl.col("depth") + (1 << 16)))  # too deep for the counts
        assert got[0].equals(want[0]) and got[1].equals(want[1])
        assert got[0].n_unique() > 100


@pytest.mark.parametrize("path", [LM, SAMPLES / "bert-2l_seq128_train_nsys.sqlite"])
def test_ranges_placed_by_their_threads_preorder_as_by_a_search_of_roots(path, monkeypatch):
    """The autograd thread's ranges placed under the user range open when their top-level
    range began: found from the rows' preorder (a forward fill) as from a sort by start and
    a search of the roots, the tree the same."""
    from kview.analysis import nvtx_tree as nt

    fast = nt.paths_and_windows(open_trace(path, use_cache=False))
    monkeypatch.setattr(nt, "_preorder", lambda other: False)
    searched = nt.paths_and_windows(open_trace(path, use_cache=False))
    assert fast[0].height > 100 and fast[0]["Depth"].max() > 3
    assert fast[0].equals(searched[0]) and fast[1].equals(searched[1])


def test_the_tree_made_in_slices_on_threads_equals_the_tree_made_in_one_piece(monkeypatch):
    """The ranges' parents (Nesting.frame), the keys and ids of each level's paths (_path_ids)
    and the windows' GPU time (gpu_time_in) found a few rows at a time on threads, as a large
    trace's are: the tree and its windows the same."""
    from kview.analysis import gpu_time, summary_stats
    from kview.analysis import nvtx_ranges as nv
    from kview.analysis import nvtx_tree as nt

    whole = nt.paths_and_windows(open_trace(LM, use_cache=False))
    monkeypatch.setattr(nv, "GATHER_ROWS", 7)
    monkeypatch.setattr(gpu_time, "WINDOWS_PER_SLICE", 5)
    monkeypatch.setattr(nt, "LEVEL_ROWS", 3)
    monkeypatch.setattr(summary_stats, "SMALL_ROWS", 2)
    sliced = nt.paths_and_windows(open_trace(LM, use_cache=False))
    assert whole[1].height > 1000 and whole[0]["GPU (ns)"].sum() > 0 and whole[0]["parent_id"].null_count() > 0
    assert whole[0].equals(sliced[0]) and whole[1].equals(sliced[1])


@pytest.mark.parametrize("path", [LM, KINETO / "triton_example__triton_example.json.gz"])
def test_paths_counted_by_path_id_as_by_a_group_by(path, monkeypatch):
    """Each path's instances, CPU time, parent, label and first instance, counted by path id
    (`_per_path`), equal a group-by's, on a trace whose autograd-thread ranges all move under a
    user range and on one where some roots move under none; every range is one instance."""
    from kview.analysis import nvtx_ranges as nv
    from kview.analysis import nvtx_tree as nt

    fast = nt.paths_and_windows(open_trace(path, use_cache=False))
    monkeypatch.setattr(nt, "_per_path", lambda r, n: None)
    grouped = nt.paths_and_windows(open_trace(path, use_cache=False))
    assert fast[0].equals(grouped[0]) and fast[1].equals(grouped[1])
    assert fast[0]["Instances"].sum() == len(nv.projection_nesting(open_trace(path, use_cache=False)).depth)
    assert fast[0].height >= 4


def test_the_trees_order_lists_each_parents_children_most_gpu_time_first():
    """`children_order`, the order the explorer's NVTX tree lists paths in, equals a sort of
    each parent's children done apart (most GPU time first, ties in path order), and lists
    every path once."""
    from kview.analysis.nvtx_tree import children_order

    t = open_trace(LM, use_cache=False)
    pt = path_table(t)
    got = children_order(t)
    rows = pt.rows(named=True)
    by_parent: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        by_parent.setdefault(-1 if r["parent_id"] is None else r["parent_id"], []).append(i)
    want = [
        i
        for parent in sorted(by_parent)
        for i in sorted(by_parent[parent], key=lambda i: (-rows[i]["GPU (ns)"], rows[i]["path_id"]))
    ]
    assert got["row"].to_list() == want and len(want) == pt.height > 50
    assert got["parent_id"].to_list() == [-1 if rows[i]["parent_id"] is None else rows[i]["parent_id"] for i in want]
    # the ties are real: children of one parent with equal GPU time, kept in path order
    assert pt.group_by("parent_id", "GPU (ns)").len()["len"].max() > 1
