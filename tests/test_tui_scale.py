"""The explorer on a large trace: the tables that read every NVTX range are made in a worker
process and read back; every view gets exactly what it gets when they are made in-process."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.documents.kernels import kernels
from kview.trace import open_trace
from kview.tui import prepare
from kview.tui.loading import child_paths
from kview.tui.messages import AttributedKernels, NvtxTree, Stage
from kview.tui.views import VIEWS

from conftest import SAMPLES

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


def _tree(m: NvtxTree) -> tuple:
    """An NVTX tree as its view reads it: every path with its Path text (made of its parent's
    where the tree was read without them), and every path's windows."""
    paths = m.paths
    if "Path" not in paths.columns:
        texts: dict[int, str] = {}
        for r in paths.iter_rows(named=True):  # parents before their children
            parent = None if r["parent_id"] is None else texts[r["parent_id"]]
            texts[r["path_id"]] = pl.DataFrame({"Name": [r["Name"]]}).select(child_paths(parent)).item()
        at = paths.columns.index("Name") + 1
        paths = paths.clone().insert_column(
            at, pl.Series("Path", [texts[i] for i in paths["path_id"]], dtype=pl.String)
        )
    windows = m.windows
    if not isinstance(windows, pl.DataFrame):
        windows = pl.concat([windows.of(i) for i in range(len(windows.bounds) - 1)])
        assert windows.equals(pl.concat([m.windows_of(i) for i in paths["path_id"]]))  # each path's alone
    doc = m.document  # what `kview nvtx` prints
    return m.trace_name, paths, windows, m.timeline, m.children, doc.frame("ranges"), doc.command, doc.notes


def _equal(a, b, where: str) -> None:
    if isinstance(a, NvtxTree):
        a, b = _tree(a), _tree(b)
    # a large trace's attributed kernels: read from its worker's files when asked, whole here
    a, b = (x.collect() if isinstance(x, pl.LazyFrame) else x for x in (a, b))
    if isinstance(a, pl.DataFrame):
        if where.endswith("names_shown"):  # a set of (name, name shown) pairs, in no order
            a, b = a.sort(a.columns), b.sort(b.columns)
        assert a.equals(b) and a.schema == b.schema, where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b) and a.dtype == b.dtype, where
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _equal(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _equal(a[k], b[k], f"{where}.{k}")
    elif dataclasses.is_dataclass(a) and not isinstance(a, type):
        for f in dataclasses.fields(a):
            if f.name not in ("trace", "_sums") and not (f.name == "document" and getattr(a, f.name) is None):
                _equal(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, where


def _messages(use_cache: bool) -> tuple[object, list]:
    """The trace, and every view's document of it (in tab order), as the views fetch them."""
    trace = open_trace(LM, use_cache=use_cache)
    docs = [cls.document for cls in VIEWS if cls.document is not None]
    return trace, [m for doc in docs for m in doc(trace, use_cache) if not isinstance(m, Stage)]


def test_a_large_traces_views_made_in_a_worker_process_equal_those_made_here(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _, here = _messages(use_cache=False)
    monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)  # every trace is large
    made = []
    monkeypatch.setattr(prepare, "Worker", lambda *a, w=prepare.Worker: made.append(1) or w(*a))
    for use_cache in (False, True):
        trace, there = _messages(use_cache)
        assert [type(m) for m in there] == [type(m) for m in here] and len(here) > 8
        for a, b in zip(there, here):
            if isinstance(a, AttributedKernels) and a.document is None:
                # the rows of `kview kernels` of a large trace's kernels, made of them when asked
                assert isinstance(a.table, pl.LazyFrame)
                _equal(kernels(trace, table=a.table.collect()), b.document, "AttributedKernels.document")
            _equal(a, b, type(a).__name__)
        # one worker per trace, whichever view's document asked first
        assert made == [1]
        made.clear()
        # the explorer itself never read the ranges' labels, nor made the documents' tables (the worker did)
        assert trace.store.peek(nv.labels) is None
        # nor held the attributed kernels whole: each view read the columns and rows it needs
        assert not {"attribution", "documents.kernel_groups"} & trace.store.held()
        assert {"overview", "documents.launches", "documents.efficiency", "documents.layers"} <= trace.store.held()
        assert "launches.launches" not in trace.store.held()  # every runtime call joined to its ops
        # the NVTX tree read in part: its paths without their texts, its windows a path's at a time
        [tree] = [m for m in there if isinstance(m, NvtxTree)]
        assert "Path" not in tree.paths.columns and not isinstance(tree.windows, pl.DataFrame)
        assert "nvtx_tree" not in trace.store.held()
    # the worker kept the tables in the frame cache: a reopen reads them, no worker runs
    monkeypatch.setattr(prepare, "Worker", lambda *a: (_ for _ in ()).throw(AssertionError("no worker")))
    trace, again = _messages(use_cache=True)
    for a, b in zip(again, here):
        if isinstance(a, AttributedKernels) and a.document is None:
            _equal(kernels(trace, table=a.table.collect()), b.document, "AttributedKernels.document")
        _equal(a, b, type(a).__name__)
    # read in part from the frame cache too: the NVTX tree's windows a path's at a time, the
    # attributed kernels by column
    [tree] = [m for m in again if isinstance(m, NvtxTree)]
    assert not isinstance(tree.windows, pl.DataFrame) and "nvtx_tree" not in trace.store.held()
    [att] = [m for m in again if isinstance(m, AttributedKernels)]
    assert isinstance(att.table, pl.LazyFrame)
    assert not {"attribution", "documents.kernel_groups"} & trace.store.held()
    # the kernel summary (equal to the one made here, above) read back, not made of every kernel again
    assert "explorer.kernel_summary" in trace.store.held() and trace.store.on_disk(["explorer.kernel_summary"])


def test_a_small_traces_views_read_its_tables_in_the_frame_cache_whole(tmp_path, monkeypatch):
    """A small trace reopened with the cache: its views hold its tables, read whole, as always
    (a large trace's are read in part: above)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert not prepare.large(open_trace(LM, use_cache=False))
    _messages(use_cache=True)  # fills the cache
    trace, again = _messages(use_cache=True)
    [att] = [m for m in again if isinstance(m, AttributedKernels)]
    [tree] = [m for m in again if isinstance(m, NvtxTree)]
    assert isinstance(att.table, pl.DataFrame) and isinstance(tree.windows, pl.DataFrame)
    assert {"attribution", "nvtx_tree"} <= trace.store.held()


def test_the_views_of_every_trace_wait_for_the_workers_tables(tmp_path, monkeypatch):
    """The Kernels view shows once the worker's first batch (the attribution) is read back; the
    Compare and Ranks views, which start then, wait for the batches they read (phases, steps,
    the phases compared) rather than making them in the explorer, and equal those made here."""
    from kview.tui import loading
    from kview.tui.views.kernels import KernelsView

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    here = open_trace(LM, use_cache=False)
    want = (loading.compare([here]), loading.ranks([here]))
    monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)
    trace = open_trace(LM, use_cache=False)
    list(KernelsView.document(trace, False))
    got = (loading.compare([trace]), loading.ranks([trace]))
    assert trace.store.peek(nv.labels) is None  # every range table came from the worker
    assert "documents.compare_phases" in trace.store.held()
    _equal(got, want, "compare, ranks")


def test_a_worker_that_fails_after_the_range_tables_leaves_the_documents_to_the_explorer(tmp_path, monkeypatch):
    """The worker says when the range tables are written and makes the documents' tables next:
    one that fails there (a table it cannot make) still gave the range tables, and the views of
    the documents get theirs made in the explorer, equal."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    _, here = _messages(use_cache=False)
    monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)
    monkeypatch.setitem(prepare.BATCHES, "documents", ("documents.layers", "no such table"))
    trace, there = _messages(use_cache=False)
    for a, b in zip(there, here, strict=True):
        _equal(a, b, type(a).__name__)
    assert trace.store.peek(nv.labels) is None  # the range tables came from the worker
    assert "launches.launches" in trace.store.held()  # the Launches document was made here


@pytest.mark.parametrize("use_cache", [False, True])
def test_the_view_in_front_gets_a_large_traces_tables_in_a_fresh_explorer(tmp_path, use_cache):
    """The explorer asks its worker for the tables by key and reads them back before it has
    imported every module that declares them (the kernels view is in front: nothing has asked
    for the Layers view's `layers.phase_spans` yet): a fresh process, as a user's, gets them all."""
    code = (
        "import sys; from kview.tui import prepare; prepare.PREPARE_BYTES = 0;"
        "from kview.trace import open_trace; from kview.tui.views.kernels import KernelsView;"
        "assert 'kview.analysis.compare' not in sys.modules;"
        "cache = sys.argv[2] == '1'; trace = open_trace(sys.argv[1], use_cache=cache);"
        "print(*[type(m).__name__ for m in KernelsView.document(trace, cache)])"
    )
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-c", code, str(LM), "1" if use_cache else "0"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "AttributedKernels" and "KernelSummary" in r.stdout.split()


def test_the_worker_makes_the_nvtx_tree_with_the_labels_let_go(tmp_path, monkeypatch):
    """The worker lets every range's name and label go before the Timeline's range rows and the
    NVTX tree (0.7 GB on the dense trace): they ask for none of them again, and equal those
    made with them held."""
    from kview.analysis.nvtx_tree import paths_and_windows
    from kview.analysis.timeline import nvtx_row_table
    from kview.derived import table_of

    here = open_trace(LM, use_cache=False)
    want = [paths_and_windows(here), nvtx_row_table(here)]
    trace = open_trace(LM, use_cache=False)
    keys = prepare.BATCHES["kernels"] + prepare.BATCHES["ranges"]
    assert keys[-2:] == ("timeline.nvtx", "nvtx_tree")
    for key in keys[:-2]:
        trace.store.make([key], str(tmp_path))
        prepare._let_go(trace, key)
    assert trace.store.peek(nv.labels) is None and trace.store.peek(nv.labelled_ranges) is None
    for fn in (nv.labels, nv.labelled_ranges):
        monkeypatch.setattr(table_of(fn), "fn", lambda t: (_ for _ in ()).throw(AssertionError("made again")))
    got = [paths_and_windows(trace), nvtx_row_table(trace)]
    assert want[0][0].height > 100 and want[1][0].height > 1000
    _equal(got, want, "nvtx_tree, timeline.nvtx")


def test_the_worker_lets_the_gaps_and_the_calls_go_before_the_critical_path(tmp_path, monkeypatch):
    """After the Efficiency and Launches documents the worker lets the kernels' efficiency
    figures, the idle gaps and the kernels' and runtime calls' columns go (0.4 GB on the dense
    trace, held through the critical path's walk before): the documents after them make or read
    none of them again, and the Overview's idle time by cause is the one of the gaps."""
    from kview.analysis.efficiency import kernel_efficiency
    from kview.analysis.launches import CAUSES, gap_rows, idle_gaps, idle_totals
    from kview.derived import table_of

    want = open_trace(LM, use_cache=False)
    by_cause = dict(idle_gaps(want).group_by("cause").agg(pl.col("idle").sum()).iter_rows())
    trace = open_trace(LM, use_cache=False)
    keys = [k for b in prepare.BATCHES.values() for k in b]
    at = keys.index("documents.launches") + 1
    assert keys.index("documents.efficiency") < at == keys.index("documents.critical_path") < keys.index("overview")
    for key in keys[:at]:
        trace.store.make([key], str(tmp_path))
        prepare._let_go(trace, key)
    assert trace.store.peek(gap_rows) is None and trace.store.peek(kernel_efficiency) is None
    assert trace.store.peek(idle_gaps) is None  # the gaps' names: never made for the documents
    assert not {"kernels", "runtime"} & set(trace._frames)

    def again(*a, **k):
        raise AssertionError("made again")

    for fn in (gap_rows, idle_gaps, kernel_efficiency):
        monkeypatch.setattr(table_of(fn), "fn", again)
    read = trace.source.read_columns
    monkeypatch.setattr(
        trace.source, "read_columns", lambda key, *a: again() if key in ("kernels", "runtime") else read(key, *a)
    )
    for key in keys[at:]:
        trace.store.make([key], str(tmp_path))
        prepare._let_go(trace, key)
    totals = idle_totals(trace)
    assert totals == {c: int(by_cause.get(c, 0)) for c in CAUSES} and totals["host"] > 0


def test_the_worker_reads_the_runtime_calls_once(tmp_path, monkeypatch):
    """The worker reads the runtime calls' columns in one pass (the launched ops' and the
    Launches document's), not a second pass for the calls' names; and the kernels' columns
    once, though it lets them go before the attribution (the GPU ops are made)."""
    trace = open_trace(LM, use_cache=False)
    read = trace.source.read_columns
    passes = []
    monkeypatch.setattr(trace.source, "read_columns", lambda key, *a: passes.append(key) or read(key, *a))
    prepare._before_attribution(trace)
    # the kernels' columns read for the GPU ops, and let go before the attribution (its peak)
    assert passes.count("kernels") == 1 and "kernels" not in trace._frames
    for key in (k for b in prepare.BATCHES.values() for k in b):
        trace.store.make([key], str(tmp_path))
        prepare._let_go(trace, key)
        if key == prepare.BATCHES["kernels"][-1]:
            assert "kernels" not in trace._frames
    assert passes.count("runtime") == 1 and passes.count("kernels") == 1


def test_the_worker_makes_every_table_of_a_trace_without_phases(tmp_path):
    """A trace without phases (vecadd: no NVTX) gets every table from the worker too: the
    Compare view's kept phases are an empty table there, not an error that ended the worker's
    documents (the explorer then made them itself)."""
    from kview.documents.compare import _kept_phases
    from kview.trace import make_tables

    from conftest import PUBLIC

    path = str(PUBLIC / "vecadd_nsys2025.5.sqlite")
    keys = tuple(k for b in prepare.BATCHES.values() for k in b)
    assert "documents.compare_phases" in keys
    make_tables(path, keys, False, str(tmp_path))
    assert _kept_phases(open_trace(path, use_cache=False)).height == 0


def test_tables_written_in_many_row_groups_read_back_into_equal_views(tmp_path, monkeypatch):
    """The worker writes its tables a few thousand rows per row group (the writer holds a row
    group's encoding while it writes it): read back in as many chunks, every view's document
    equals the one made here."""
    from kview import derived
    from kview.trace import make_tables

    _, here = _messages(use_cache=False)
    monkeypatch.setattr(derived, "MADE_ROW_GROUP", 1000)
    keys = tuple(k for b in prepare.BATCHES.values() for k in b)
    make_tables(str(LM), keys, False, str(tmp_path))
    assert pl.read_parquet(tmp_path / "attribution.parquet").n_chunks() > 1
    back = open_trace(LM, use_cache=False)
    back.store.read_made(keys, str(tmp_path))
    docs = [cls.document for cls in VIEWS if cls.document is not None]
    there = [m for doc in docs for m in doc(back, False) if not isinstance(m, Stage)]
    assert [type(m) for m in there] == [type(m) for m in here] and len(here) > 8
    for a, b in zip(there, here):
        _equal(a, b, type(a).__name__)


async def test_a_large_traces_kernels_read_by_column_show_what_the_table_in_memory_shows(monkeypatch):
    """The Kernels and Timeline views read a large trace's attributed kernels from its worker's
    files, by the columns and rows each question needs (the table is never read whole): every
    grouping, filter, frequency table, drill-in, range's rows, highlight and op described
    equal those of the table held in memory."""
    from test_tui import loaded

    from kview.tui.app import KviewApp
    from kview.tui.messages import Scope
    from kview.tui.views.kernels import GROUPINGS, KernelsState

    async def shown(large: bool) -> list:
        if large:
            monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)
        app = KviewApp([str(LM)], use_cache=False, traces=[open_trace(LM, use_cache=False)])
        async with app.run_test(size=(160, 45)) as pilot:
            await loaded(pilot)
            kv, tv = app.view("kernels"), app.view("timeline")
            assert isinstance(kv.attributed.table, pl.LazyFrame) is large
            assert tv.data.attributed is kv.attributed.table
            scope = Scope("a range", pl.Series("Idx", [3, 5, 8, 13, 21, 34, 55, 89, 144, 233]))
            states = [KernelsState(grouping=g) for g in range(len(GROUPINGS))]
            states += [KernelsState(grouping=g, filter_text="dir:bprop gemm") for g in range(len(GROUPINGS))]
            states += [
                KernelsState(mode="freq", freq=c, filter_text=f)
                for c in ("Op", "Name", "Layer", "Short name")
                for f in ("", "dur>20us")
            ]
            states += [
                KernelsState(mode="rows", filter_text="cat:elementwise"),
                KernelsState(mode="rows", pick=("Op", "aten::mm")),
                KernelsState(mode="rows", pick=("Range", None)),
                KernelsState(mode="rows", scope=scope),
                KernelsState(grouping=2, scope=scope),
            ]
            out: list = [(t.frame, t.status) for t in map(kv.table_of, states)]
            assert all(f.height for f, _ in out[:-5])
            assert tv.set_highlight("cat:gemm layer:layer_1")
            gpu = [r for r in tv.timeline.rows if r.ident is not None]
            out.append([tv.hl_masks[id(r)] for r in gpu])
            assert sum(int(counts[-1]) for counts, _ in out[-1]) > 0
            out.append([tv.describe(r, i) for r in gpu for i in range(0, len(r.ident), 97)])
            assert sum("layer layer_1" in d for d in out[-1]) > 0
            await pilot.press("q")
        return out

    here, there = await shown(False), await shown(True)
    _equal(there, here, "shown")


@pytest.mark.parametrize("name", ["lm", "nsysai_h100_2gpu_fsdp_nsys2026.2.sqlite"])
def test_a_large_traces_kernel_context_read_in_part_equals_the_one_in_memory(tmp_path, monkeypatch, name):
    """`c` on a large trace reads the op's rows, its launch call and the ranges around it in
    part (its attributed kernels and labelled ranges in the frame cache, the calls of one
    correlation id): the same context as the in-memory path, on one process and on two (the
    second trace holds ops whose launch lies outside its window)."""
    from kview.analysis import kernel_context as kc
    from kview.analysis.attribution import attribute, launched_ops
    from kview.tui.loading import kernel_context

    from conftest import PUBLIC

    path = LM if name == "lm" else PUBLIC / name
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    here = open_trace(path, use_cache=True)
    ops = launched_ops(here)
    n = ops.height
    # ops spread over the trace, the first copy or set, and the first op launched outside the window
    picks = {1, 2, n // 3, n // 2, 2 * n // 3, n - 1, n}
    picks |= set(ops.filter(pl.col("kind") != "kernel")["Idx"].head(1).to_list())
    picks |= set(ops.filter(pl.col("r_start").is_null())["Idx"].head(1).to_list())
    want = {i: kc.kernel_context(here, i) for i in sorted(picks)}  # keeps the tables in the frame cache
    assert any(c.launch is None for c in want.values()) == (name != "lm")
    assert any(c.ranges for c in want.values())
    assert here.store.peek(nv.labelled_ranges) is not None and here.store.peek(attribute) is not None

    monkeypatch.setattr(prepare, "PREPARE_BYTES", 0)  # a large trace: its tables are read in part
    trace = open_trace(path, use_cache=True)
    for i, b in want.items():
        _equal(kernel_context(trace, i), b, f"op {i}")
    # none of the tables the in-memory path reads whole was made or read
    for fn in (attribute, launched_ops, nv.labelled_ranges, nv.projection_ranges):
        assert trace.store.peek(fn) is None, fn
    with pytest.raises(ValueError, match="no GPU op"):
        kernel_context(trace, n + 1)
