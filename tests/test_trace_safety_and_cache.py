"""The trace is opened read-only and never modified; the cache lives under the user cache dir."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

import pytest

from kview.analysis.attribution import attribute
from kview.io import cache
from kview.output.render import to_csv
from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import LM_TRACES
from in_process import kview_here

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

TRACE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")


def _digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_read_only_folder_trace_unchanged_and_nothing_beside_it(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    t = ro / TRACE.name
    shutil.copy2(TRACE, t)
    t.chmod(stat.S_IRUSR | stat.S_IRGRP)
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    before = (_digest(t), t.stat().st_mtime_ns, sorted(os.listdir(ro)))
    try:
        r = kview_here("stats", t, "-r", "all", "-f", "json")
        assert r.returncode == 0, r.stderr
        assert "Total Time (ns)" in r.stdout
        assert (_digest(t), t.stat().st_mtime_ns, sorted(os.listdir(ro))) == before
    finally:
        ro.chmod(stat.S_IRWXU)


def test_cache_written_under_xdg_cache_home_and_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    want = to_csv(REPORTS["cuda_gpu_kern_sum"](open_trace(TRACE, use_cache=False)).frame)
    got1 = to_csv(REPORTS["cuda_gpu_kern_sum"](open_trace(TRACE)).frame)
    entries = list((tmp_path / "xdg" / "kview" / "frames").glob("*/kernels.name_id.parquet"))
    assert len(entries) == 1
    assert not any(p.suffix == ".parquet" for p in TRACE.parent.iterdir())
    got2 = to_csv(REPORTS["cuda_gpu_kern_sum"](open_trace(TRACE)).frame)
    assert want == got1 == got2


def test_corrupt_cache_entry_is_rebuilt_not_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    want = to_csv(REPORTS["cuda_gpu_kern_sum"](open_trace(TRACE)).frame)
    folder = next((tmp_path / "xdg" / "kview" / "frames").iterdir())
    entries = [folder / "kernels.name_id.parquet", folder / "report.cuda_gpu_kern_sum.parquet"]
    for entry in entries:
        entry.write_bytes(b"PAR1 garbage")
    assert to_csv(REPORTS["cuda_gpu_kern_sum"](open_trace(TRACE)).frame) == want
    for entry in entries:
        assert entry.read_bytes()[:4] == b"PAR1" and entry.stat().st_size > 100  # rewritten


def test_reports_and_the_attributed_table_read_back_from_the_cache_equal_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    from kview.documents.kernels import kernel_groups

    fresh, first = open_trace(TRACE, use_cache=False), open_trace(TRACE)
    for build in REPORTS.values():
        build(first)
    assert attribute(first).equals(attribute(fresh))
    kernel_groups(first)
    again = open_trace(TRACE)
    for name, build in REPORTS.items():
        got, want = build(again), build(fresh)
        assert (got.name, got.title, got.skipped, got.decimals) == (want.name, want.title, want.skipped, want.decimals)
        assert got.frame.equals(want.frame) and got.frame.schema == want.frame.schema, name
    table = attribute(again)
    assert table.equals(attribute(fresh)) and table.schema == attribute(fresh).schema
    # the explorer's grouping keys of the kernels: a row per kernel, a row per kernel name
    for got, want in zip(kernel_groups(again), kernel_groups(fresh)):
        assert got.equals(want) and got.schema == want.schema
    assert kernel_groups(fresh)[1].height == table["Kernel"].n_unique() > 1
    # read back, not recomputed: nothing of the trace itself was loaded for them
    names = again.store.held()
    kept = ("attribution", "documents.kernel_groups")
    assert not again._frames and all(n in kept or n.startswith("report.") for n in names), names


def _sections(doc):
    return [(x.name, x.title, x.frame.schema, x.frame.rows()) for x in doc.sections], doc.notes, doc.command


def test_overview_efficiency_launches_and_layers_read_back_from_the_cache_equal_fresh(tmp_path, monkeypatch):
    """The Overview, Efficiency, Launches, critical path, Layers, phases compared, Ranks and
    Iterations are kept: a second look reads them (nothing of the trace loaded, nothing attributed) and they equal a fresh making;
    under another name of the same file (a link), the Overview names the link, as made for it."""
    from kview.analysis.layers import phase_times
    from kview.documents.compare import phases
    from kview.documents.efficiency import efficiency
    from kview.documents.launches import critical_path, launches
    from kview.documents.layers import layers
    from kview.documents.overview import overview
    from kview.documents.ranks import of_traces

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def compared(t):  # the phases side by side, as the explorer's Compare view shows one trace first
        return phases(t, phase_times(t)["Phase"].to_list(), "category")

    def ranks(t):
        return of_traces([t], "ranks")

    def iterations(t):
        return of_traces([t], "iterations")

    docs = (overview, efficiency, launches, critical_path, layers, compared, ranks, iterations)
    fresh, first = open_trace(TRACE, use_cache=False), open_trace(TRACE)
    want = [_sections(d(fresh)) for d in docs]
    assert [_sections(d(first)) for d in docs] == want
    again = open_trace(TRACE)
    assert [_sections(d(again)) for d in docs] == want
    assert not again._frames and "attribution" not in again.store.held(), again.store.held()
    assert dict(overview(again).frame("trace").rows())["Trace"] == TRACE.name

    link = tmp_path / "another-name.sqlite"
    link.symlink_to(TRACE)
    named = overview(open_trace(link))
    assert dict(named.frame("trace").rows())["Trace"] == "another-name.sqlite"
    assert named.frame("findings").equals(overview(open_trace(link, use_cache=False)).frame("findings"))
    assert any("another-name.sqlite" in f for f in named.frame("findings")["Finding"])
    assert of_traces([open_trace(link)], "ranks").frame("ranks")["Trace"].to_list() == ["another-name.sqlite"]


def test_ranks_numbered_from_the_file_name_are_not_kept_for_another_name(tmp_path, monkeypatch):
    """A trace whose rank comes from its file's name ("..._rank3"): a link of another name
    ("..._rank5") numbers it 5, the file 3, in whichever order they are opened with the cache."""
    from kview.documents.ranks import of_traces

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    file = tmp_path / "job_rank3.sqlite"
    shutil.copy(TRACE, file)
    link = tmp_path / "job_rank5.sqlite"
    link.symlink_to(file)

    def ranks(p):
        return of_traces([open_trace(p)], "ranks").frame("ranks")["Rank"].to_list()

    assert ranks(file) == [3] and ranks(link) == [5] and ranks(file) == [3]
    assert ranks(link) == [5]


def test_timeline_rows_read_back_from_the_cache_equal_fresh(tmp_path, monkeypatch):
    """The Timeline's GPU, CUDA API and NVTX rows are kept: a second look reads them (no kernel,
    runtime call or range of the trace loaded) and every row equals a fresh making, array by
    array (dtype and values), with the same names, classes and thread titles."""
    from kview.analysis import timeline

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))

    def rows(t):
        tl = timeline.build(t)
        arrays = [
            (r.kind, r.label, r.group, r.depth, r.pid)
            + tuple(None if a is None else (a.dtype.str, a.tolist()) for a in (r.start, r.end, r.code, r.cls, r.ident))
            for r in tl.rows
        ]
        return arrays, tl.names, tl.classes, tl.threads, tl.span

    want = rows(open_trace(TRACE, use_cache=False))
    assert {r[0] for r in want[0]} == {"gpu", "api", "nvtx"}
    assert rows(open_trace(TRACE)) == want
    again = open_trace(TRACE)
    assert rows(again) == want
    assert not {"kernels", "runtime", "nvtx"} & set(again._frames), set(again._frames)


def test_changed_trace_gets_a_new_cache_key(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    t = tmp_path / "t.sqlite"
    shutil.copy2(TRACE, t)
    open_trace(t).columns("kernels", ["start"])
    os.utime(t, ns=(t.stat().st_atime_ns, t.stat().st_mtime_ns + 10**9))
    first = set((tmp_path / "xdg" / "kview" / "frames").iterdir())
    open_trace(t).columns("kernels", ["start"])
    now = set((tmp_path / "xdg" / "kview" / "frames").iterdir())
    assert len(first) == len(now) == 1 and first != now  # new key, and the stale entry is gone


def test_no_cache_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    r = kview_here("stats", TRACE, "--no-cache")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "xdg").exists()
    assert cache.cache_root() == tmp_path / "xdg" / "kview"


def test_cache_has_every_key_once_stored(tmp_path):
    import polars as pl

    trace = tmp_path / "t.sqlite"
    shutil.copy(TRACE, trace)
    assert not cache.has(trace, ["kernels.start"])
    frame = pl.DataFrame({"start": [1, 2, 3]})
    cache.store(trace, "kernels.start", frame)
    assert cache.has(trace, ["kernels.start"])
    assert not cache.has(trace, ["kernels.start", "kernels.end"])
    assert cache.load(trace, "kernels.start").equals(frame)


def test_a_frame_kept_whole_reads_back_in_one_chunk_and_equal(tmp_path, monkeypatch):
    """A table whose codec keeps its frames whole (the Timeline's rows, turned into NumPy
    arrays on a reopen) is written as one row group and reads back in one chunk, equal; the
    same frame kept in pieces reads back in several (a NumPy copy of each column)."""
    import polars as pl

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    trace = tmp_path / "t.sqlite"
    shutil.copy(TRACE, trace)
    n = 1_200_000  # above the writer's pieces (polars: 512 x 512 rows a row group)
    frame = pl.DataFrame({"start": pl.int_range(n, eager=True), "code": pl.int_range(n, eager=True) % 7})
    cache.store(trace, "timeline.whole", frame, whole=True)
    cache.store(trace, "timeline.pieces", frame)
    whole, pieces = cache.load(trace, "timeline.whole"), cache.load(trace, "timeline.pieces")
    assert whole.equals(frame) and pieces.equals(frame)
    assert whole["start"].n_chunks() == 1 < pieces["start"].n_chunks()
    from kview.analysis import timeline

    assert all(
        f.__table__.codec.whole for f in (timeline.gpu_row_table, timeline.api_row_table, timeline.nvtx_row_table)
    )
