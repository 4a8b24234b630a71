"""Every report equals real `nsys stats --format csv` output, byte for byte.

The reference CSVs were written by nsys 2025.3.1 on the GPU machine (sample_traces/README.md)
next to the project's own traces, and for the public fixtures into tests/golden/public/
(xz-compressed).
"""

from __future__ import annotations

import pytest

from kview.output.render import to_csv
from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import LM_TRACES, PUBLIC_TRACES, golden_public

_cache: dict = {}


def _trace(path):
    if path not in _cache:
        _cache[path] = open_trace(path, use_cache=False)
    return _cache[path]


def _equals_nsys(rep, golden: str) -> None:
    """kview's CSV of the report is nsys stats' own, line for line. An empty report is the one
    difference: nsys writes an empty file, kview the header alone (every CSV kview writes has its
    header, so `polars.read_csv` and spreadsheets read it); a report skipped for want of its data
    has no columns and stays empty."""
    lines = to_csv(rep.frame, rep.decimals).splitlines()
    if golden.strip() == "":
        assert rep.frame.height == 0 and lines == ([",".join(rep.frame.columns)] if rep.frame.columns else [])
    else:
        assert lines == golden.splitlines()


def test_sample_traces_present():
    assert len(LM_TRACES) >= 6


@pytest.mark.parametrize("report", list(REPORTS))
@pytest.mark.parametrize("trace", LM_TRACES, ids=lambda p: p.stem)
def test_lm_trace_report_equals_nsys(trace, report):
    golden = trace.with_name(f"{trace.stem}_{report}.csv")
    assert golden.exists(), f"missing reference {golden.name}"
    _equals_nsys(REPORTS[report](_trace(trace)), golden.read_text())


# nsys 2025.3 skips memcpy summaries on 2022.1 exports (no ENUM_CUDA_MEMCPY_OPER table); kview
# labels them from the CUPTI enum instead, checked separately below.
DELIBERATE = {
    ("dlprof_lenet_nsys2022.1", "cuda_gpu_mem_time_sum"),
    ("dlprof_lenet_nsys2022.1", "cuda_gpu_mem_size_sum"),
}


@pytest.mark.parametrize("report", list(REPORTS))
@pytest.mark.parametrize("trace", PUBLIC_TRACES, ids=lambda p: p.stem)
def test_public_fixture_report_equals_nsys(trace, report):
    if (trace.stem, report) in DELIBERATE:
        pytest.skip("kview reports what nsys skips here; see test_old_export_memops")
    golden = golden_public(trace.stem, report)
    _equals_nsys(REPORTS[report](_trace(trace)), golden)


def test_old_export_memops_labelled_without_enum_table():
    path = next(p for p in PUBLIC_TRACES if "2022.1" in p.name)
    rep = REPORTS["cuda_gpu_mem_time_sum"](_trace(path))
    rows = dict(zip(rep.frame["Operation"], rep.frame["Count"]))
    # 12 memcpy and 4 memset rows in this export (counted with sqlite3 below).
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    by_kind = dict(con.execute("SELECT copyKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1"))
    n_memset = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET").fetchone()[0]
    assert rows.get("[CUDA memset]") == n_memset == 4
    assert rows.get("[CUDA memcpy Host-to-Device]") == by_kind.get(1)
    assert sum(v for k, v in rows.items() if "memcpy" in k) == sum(by_kind.values()) == 12


@pytest.mark.parametrize("report", ["nvtx_kern_sum", "nvtx_gpu_proj_sum"])
def test_report_of_one_command_lets_the_ranges_go_and_still_equals_nsys(report):
    """A trace opened for one report (the last of `kview stats -r ...`) forgets the NVTX ranges,
    their nesting and the runtime calls once the report has read them; the report is the same."""
    from kview.analysis import nvtx_ranges as nv

    trace = open_trace(LM_TRACES[0], use_cache=False)
    trace.one_command = True
    rep = REPORTS[report](trace)
    _equals_nsys(rep, LM_TRACES[0].with_name(f"{LM_TRACES[0].stem}_{report}.csv").read_text())
    assert rep.frame.height > 100
    for table in (nv.labelled_ranges, nv.projection_ranges, nv.projection_nesting):
        assert trace.store.peek(table) is None, table.__name__
    assert "runtime" not in trace._frames
    # a second report after it makes them again, equal
    again = REPORTS[report](trace)
    assert again.frame.equals(rep.frame)


@pytest.mark.parametrize("per_id", [1, 3])
def test_projection_folded_up_the_nesting_equals_the_pairs(per_id):
    """nvtx_gpu_proj_sum's per-range projection made by folding each op up the nesting equals the
    one grouped from every (call, range) pair, ops sharing a correlation id (`per_id` ops per id:
    several GPU ops of one call) counted once per range either way."""
    import polars as pl

    from kview.analysis import nvtx_ranges as nv
    from kview.reports import nvtx as rn

    trace = open_trace(LM_TRACES[0], use_cache=False)
    j = rn._api_of(trace, trace.columns("kernels", ["start", "end", "correlation", "global_pid"]), "inner")
    j = j.with_row_index("call_id").with_columns(pl.col("correlation") // per_id)
    ranges = nv.projection_ranges(trace)
    by_row = rn._projection_by_row(trace, j, ranges)
    assert by_row is not None
    by_pairs = rn._projection_by_pairs(trace, j, ranges).drop("id").select(by_row.columns)
    keys = ["proj_start", "proj_dur", "name_code", "range_dur", "level"]
    assert by_row.height == by_pairs.height > 500
    assert by_row.sort(keys).equals(by_pairs.sort(keys))
    assert j["correlation"].is_duplicated().any() == (per_id > 1)  # the ids' own count taken
    assert (rn._repeated(j["correlation"].to_numpy()) == j["correlation"].is_duplicated().to_numpy()).all()


@pytest.mark.parametrize("how", ["left", "inner"])
@pytest.mark.parametrize("processes", [2, 1])
def test_calls_joined_on_one_key_equal_the_join_on_two(how, processes):
    """The GPU ops' runtime calls found on one integer per (process, correlation id), or on the
    id alone in a trace of one process, are those of the join on both columns, in the ops'
    order, whether found by a sorted search (the calls' keys increasing) or a join, ops without
    a call included; a null key takes the join on both."""
    import polars as pl

    from kview.analysis.attribution import LAUNCH_COLUMNS, call_keys, calls_by_search, launch_calls
    from kview.reports import nvtx as rn

    path = next(p for p in PUBLIC_TRACES if "2gpu_fsdp_before" in p.name) if processes == 2 else LM_TRACES[0]
    trace = open_trace(path, use_cache=False)
    r = launch_calls(trace.columns("runtime", LAUNCH_COLUMNS))
    k = trace.columns("kernels", ["start", "end", "correlation", "global_pid", "name_id"])
    nulls = k.with_columns(
        pl.when(pl.int_range(pl.len()) % 5 == 0).then(None).otherwise("correlation").alias("correlation")
    )
    # every 7th op's id past every call's: it has none
    lost = k.with_columns(
        pl.when(pl.int_range(pl.len()) % 7 == 3)
        .then(pl.col("correlation") + r["correlation"].max() + 1)
        .otherwise("correlation")
        .alias("correlation")
    )
    keys = call_keys(k, r)
    assert keys is not None
    # the export lists one process's calls in id order: searched; two processes' are joined
    assert (calls_by_search(keys[0].to_numpy(), keys[1].to_numpy()) is not None) == (processes == 1)
    for ops, one_key in ((k, True), (lost, True), (nulls, False)):
        want = ops.join(r, on=["correlation", "global_pid"], how=how, maintain_order="left")
        got = rn._api_of(trace, ops, how)
        assert (call_keys(ops, r) is not None) == one_key
        assert (got if one_key else got.sort(got.columns)).equals(want if one_key else want.sort(want.columns))
    assert pl.concat([k["global_pid"], r["global_pid"]]).n_unique() == processes
    assert want["r_start"].drop_nulls().len() > 300


def test_kernels_in_ranges_by_row_equal_the_joined_pairs():
    """nvtx_kern_sum's rows of (kernel, range around its call) made by row from the nesting equal
    the left join of the kernels to the pairs, row for row in the join's order (a group's
    deviation sums its rows in that order): kernels whose call lies in no range or that have
    no call keep one row of nulls."""
    import polars as pl

    from kview.analysis import nvtx_ranges as nv
    from kview.reports import nvtx as rn

    trace = open_trace(LM_TRACES[0], use_cache=False)
    k = trace.columns("kernels", ["start", "end", "correlation", "global_pid", "name_id"]).with_row_index("kern_id")
    j = rn._api_of(trace, k, "left").with_row_index("call_id")
    # every 7th call moved before any range, every 11th without its call
    row = pl.int_range(pl.len())
    j = j.with_columns(
        pl.when(row % 7 == 3).then(pl.col("r_start") - 10**15).otherwise(pl.col("r_start")).alias("r_start"),
    ).with_columns(pl.when(row % 11 == 5).then(None).otherwise(pl.col(c)).alias(c) for c in ("r_start", "r_end"))
    ranges = nv.projection_ranges(trace)
    by_row = rn._kernels_in_ranges_by_row(trace, j, ranges)
    assert by_row is not None
    by_pairs = rn._kernels_in_ranges_by_pairs(trace, j, ranges)
    assert by_row.equals(by_pairs)
    alone = by_row.filter(pl.col("id").is_null())
    assert alone["kern_id"].n_unique() == alone.height >= j.height // 7
    assert by_row.height > j.height + 1000  # most kernels lie in several ranges


def test_kern_sum_ranks_names_as_their_texts_sort():
    """nvtx_kern_sum sorts on each name's place in text order: equal texts under two codes share
    a place, a missing name or kernel name has none (NULL sorts first), as the texts would."""
    import polars as pl

    from kview.reports import nvtx as rn

    trace = open_trace(LM_TRACES[0], use_cache=False)
    ids = trace.columns("kernels", ["name_id"])["name_id"].unique().sort().head(2).to_list()
    texts = trace.with_strings(pl.DataFrame({"name_id": ids}), "name_id", "t")["t"].to_list()
    names = pl.DataFrame({"name_code": [0, 1, 2, 3], "name": [":b", ":a", ":b", ":c"]})
    g = pl.DataFrame({"name_code": [2, 0, None, 1, 3], "name_id": [ids[0], ids[1], ids[1], None, ids[0]]})
    present = rn._names_present(g["name_code"], names)
    assert present is not None
    named, ranges = rn._sorted_names(g["name_code"], *present)
    kernels = rn._kernel_places(trace, g)
    assert named.to_list() == [":b", ":b", None, ":a", ":c"]
    assert ranges.to_list() == [2, 2, None, 1, 3]
    first, second = (1, 2) if texts[0] < texts[1] else (2, 1)
    assert kernels.to_list() == [first, second, second, None, first]


def test_kern_sum_text_order_is_the_texts_bytes_order():
    """nvtx_kern_sum's order of the distinct names present (each sorted with its row after a NUL):
    the texts' own byte order on the LM trace's names with a shorter text before each one it
    begins, equal texts, text past ASCII and more rows than one digit counts; a text holding
    NUL or a NULL takes polars' arg_sort."""
    import polars as pl

    from kview.analysis import nvtx_ranges as nv
    from kview.reports import nvtx as rn

    real = nv.names(open_trace(LM_TRACES[0], use_cache=False))["name"]
    assert real.len() > 100
    edges = [":ab", ":a", ":ab ", ":a", ":\u00b5s", ":z", "", ":ab!", ":a\x01"]
    for texts in (pl.concat([real.reverse(), pl.Series(edges)]), pl.Series(edges), pl.Series([":b", ":a\x00", ":a"])):
        order = rn._text_order(texts)
        assert order.dtype == texts.arg_sort().dtype
        assert sorted(order.to_list()) == list(range(texts.len()))
        assert texts.gather(order).to_list() == sorted(texts.to_list(), key=lambda t: t.encode())
    with_null = pl.Series([":b", None, ":a"])
    assert with_null.gather(rn._text_order(with_null)).to_list() == [None, ":a", ":b"]


def test_texts_at_rows_gathered_chunk_by_chunk():
    """nvtx_kern_sum's names at the codes present, gathered a chunk at a time from the names
    table's column: the texts a gather from the whole column gives, nulls and empty chunks
    included."""
    import polars as pl

    from kview.reports import nvtx as rn

    parts = [[":a", ":bb", None], [":c"], [], [":d", ":e"]]
    col = pl.concat([pl.Series("name", p, dtype=pl.String) for p in parts], rechunk=False)
    assert col.n_chunks() >= 3
    for rows in ([0, 2, 3, 5], [4], [], [0, 1, 2, 3, 4, 5]):
        at = pl.Series(rows, dtype=pl.Int64)
        assert rn._texts_at(col, at).to_list() == col.rechunk().gather(at).to_list()


def test_nvtx_read_once_for_several_reports(monkeypatch):
    """The NVTX projection reports, last of a command's reports, let go only what they name:
    the ranges an earlier report made are not read again."""
    from kview.reports import REPORTS

    trace = open_trace(LM_TRACES[0], use_cache=False)
    source = type(trace.source)
    read = source.nvtx_events
    reads = []
    monkeypatch.setattr(source, "nvtx_events", lambda self: reads.append(1) or read(self))
    names = ["nvtx_sum", "nvtx_gpu_proj_sum", "nvtx_kern_sum"]
    for i, name in enumerate(names):
        trace.one_command = i == len(names) - 1
        assert REPORTS[name](trace).frame.height > 10
    assert len(reads) == 1


def test_kern_sum_of_a_thread_with_push_pop_and_start_end_ranges(tmp_path):
    """A start/end range on a thread that also pushes and pops (a whole-run range around a
    training step's op ranges): nvtx_kern_sum counts the kernels launched inside it, as many as
    SQLite finds by the launches' correlation and times, and the push/pop ranges' rows are those
    of the trace without it."""
    import shutil
    import sqlite3

    import polars as pl

    from conftest import SAMPLES

    path = tmp_path / "mixed.sqlite"
    shutil.copy(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", path)
    plain = REPORTS["nvtx_kern_sum"](open_trace(path, use_cache=False)).frame
    with sqlite3.connect(path) as con:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid) SELECT min(start) + 1, "
            "max(end) - 1, 60, 'most of the run', globalTid FROM NVTX_EVENTS WHERE eventType = 59 GROUP BY globalTid"
        )
        launched = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24) "
            "JOIN NVTX_EVENTS n ON n.eventType = 60 AND n.globalTid = r.globalTid "
            "AND n.start <= r.start AND n.end >= r.end"
        ).fetchone()[0]
    mixed = REPORTS["nvtx_kern_sum"](open_trace(path, use_cache=False)).frame
    inside = mixed.filter(pl.col("Style") == "StartEnd")
    assert launched > 1000 and inside["Kern Inst"].sum() == launched
    assert inside["NVTX Range"].unique().to_list() == [":most of the run"]
    assert mixed.filter(pl.col("Style") == "PushPop").equals(plain)


def _nsys_projection(path) -> dict[str, tuple[int, int]]:
    """nsys's nvtx_gpu_proj_sum totals by SQL, per range name: (Total Proj Time, Total GPU Ops).
    A range holds the GPU ops (kernels, copies, sets) whose launch call lies inside it on its thread; a range never
    ended ends at the last timestamp of any range; domain names per process."""
    import sqlite3

    with sqlite3.connect(path) as con:
        (hi,) = con.execute("SELECT max(max(start), max(end)) FROM NVTX_EVENTS WHERE eventType IN (59, 60)").fetchone()
        rows = con.execute(
            "WITH d AS (SELECT domainId, globalTid & 0xFFFFFF000000 AS pid, text FROM NVTX_EVENTS WHERE eventType = 75), "
            "r AS (SELECT n.rowid AS id, n.globalTid AS tid, n.start, coalesce(n.end, ?) AS end, "
            "coalesce(d.text, '') || ':' || coalesce(s.value, n.text) AS name FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId LEFT JOIN d "
            "ON d.domainId = n.domainId AND d.pid = (n.globalTid & 0xFFFFFF000000) "
            "WHERE n.eventType IN (59, 60) AND n.endGlobalTid IS NULL), "
            "g AS (SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
            "SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL "
            "SELECT start, end, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET), "
            "o AS (SELECT k.start, k.end, k.correlationId AS corr, a.globalTid AS tid, a.start AS a_start, "
            "a.end AS a_end FROM g k JOIN CUPTI_ACTIVITY_KIND_RUNTIME a "
            "ON a.correlationId = k.correlationId AND k.globalPid = (a.globalTid & 0xFFFFFFFFFF000000)), "
            "p AS (SELECT r.name, max(o.end) - min(o.start) AS proj, count(DISTINCT o.corr) AS ops FROM r JOIN o "
            "ON o.tid = r.tid AND r.start <= o.a_start AND r.end >= o.a_end GROUP BY r.id) "
            "SELECT name, sum(proj), sum(ops) FROM p GROUP BY name",
            (hi,),
        ).fetchall()
    return {name: (proj, ops) for name, proj, ops in rows}


def test_projection_reports_of_a_library_range_left_open_inside_a_layer(tmp_path):
    """A library's range (the CCCL domain the sample creates) pushed inside layer_3 and never
    popped: nsys ends it at the last timestamp, so it crosses layer_3 and forward_pass, and the
    thread's push/pop ranges no longer nest. nvtx_gpu_proj_sum's totals equal SQL's by nsys's
    rules for every range name (the nesting gave forward_pass 160,350,369 ns of projection
    instead of 55,540,335 and the open range 64 ops instead of 1,480), and nvtx_kern_sum counts
    the kernels launched inside the open range as SQL does."""
    import shutil
    import sqlite3

    import polars as pl

    from conftest import SAMPLES

    path = tmp_path / "open.sqlite"
    shutil.copy(SAMPLES / "lm-small_ctx256_train_nsys.sqlite", path)
    with sqlite3.connect(path) as con:
        con.execute(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) SELECT start + 1000, NULL, 59, "
            "'cub::DeviceSegmentedSort', globalTid, 1 FROM NVTX_EVENTS WHERE text = 'layer_3'"
        )
        (inside,) = con.execute(
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24) "
            "JOIN NVTX_EVENTS n ON n.eventType = 59 AND n.end IS NULL AND n.globalTid = r.globalTid AND n.start <= r.start"
        ).fetchone()
    expected = _nsys_projection(path)
    assert expected[":forward_pass"] == (55_540_335, 784) and expected["CCCL:cub::DeviceSegmentedSort"][1] == 1_480
    proj = REPORTS["nvtx_gpu_proj_sum"](open_trace(path, use_cache=False)).frame
    got = {r["Range"]: (r["Total Proj Time (ns)"], r["Total GPU Ops"]) for r in proj.iter_rows(named=True)}
    assert got == expected
    kern = REPORTS["nvtx_kern_sum"](open_trace(path, use_cache=False)).frame
    assert inside > 1_000
    assert kern.filter(pl.col("NVTX Range") == "CCCL:cub::DeviceSegmentedSort")["Kern Inst"].sum() == inside
