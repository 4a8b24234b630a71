"""The store of derived tables: one declaration per table, a graph without cycles read from the
code, every persisted table's codec round-tripping through the disk tier of a real trace, one
store type for a trace and a run, and versions that invalidate what is made from a table."""

from __future__ import annotations

import inspect
import sys
import threading

import polars as pl
import pytest

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute, gpu_ops
from kview.analysis.ranks import make_run
from kview.derived import DEPENDS, TABLES, Store, Table, import_all, table_of
from kview.io import cache
from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import SAMPLES

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

NSYS = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
JSON = SAMPLES / "lm-small_ctx256_train_torch.json.gz"

import_all()


def _forget_digests() -> None:
    for t in TABLES.values():
        t.__dict__.pop("digest", None)


def _frames_equal(a: tuple[pl.DataFrame, ...], b: tuple[pl.DataFrame, ...], where: str) -> None:
    assert len(a) == len(b), where
    for x, y in zip(a, b):
        assert x.schema == y.schema and x.equals(y), where


def test_the_graph_has_no_cycle_and_every_persisted_table_a_codec():
    assert len(TABLES) > 40
    state: dict[Table, int] = {}  # 1 on the path, 2 done

    def visit(t: Table, path: list[str]) -> None:
        if state.get(t) == 2:
            return
        assert state.get(t) != 1, f"cycle: {' -> '.join([*path, t.key])}"
        state[t] = 1
        for d in t.deps:
            visit(d, [*path, t.key])
        state[t] = 2

    for t in TABLES.values():
        visit(t, [])
        if t.persist:
            assert t.codec is not None and len(t.cache_keys()) == len(t.codec.parts), t.key
    keys = [k for t in TABLES.values() if t.persist for k in t.cache_keys()]
    assert len(keys) == len(set(keys))  # no two tables share a cache file
    # the graph read from the code holds the edges seen at run time
    trace = open_trace(NSYS, use_cache=False)
    attribute(trace), REPORTS["nvtx_kern_sum"](trace), make_run([trace])
    from kview.analysis.iterations import iteration_table

    iteration_table(make_run([trace]))
    seen = {(a, b) for a, bs in DEPENDS.items() for b in bs}
    assert len(seen) > 10
    for a, b in seen:
        assert TABLES[b] in TABLES[a].deps, f"{a} asks for {b}, which its code does not name"


@pytest.mark.parametrize("path", [NSYS, JSON], ids=["nsys", "torch-json"])
def test_every_persisted_table_round_trips_through_the_disk_tier(path, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fresh = open_trace(path, use_cache=False)
    first = open_trace(path)
    persisted = [t for t in TABLES.values() if t.persist]
    assert len(persisted) >= 19
    for t in persisted:
        first.store._get(t, (), {})
    again = open_trace(path)
    assert again.store.disk is not None
    for t in persisted:
        value = fresh.store._get(t, (), {})
        want = t.codec.encode(value)
        found = again.store.disk.load(t)
        if t.keep is not None and not t.keep(value):  # a report the trace lacks the tables for
            assert found is None, t.key
            continue
        assert found is not None, t.key
        _frames_equal(found, want, t.key)
        # the value kept is the codec's, whichever way it came
        _frames_equal(t.codec.encode(again.store._get(t, (), {})), want, t.key)
        _frames_equal(t.codec.encode(t.codec.decode(want)), want, t.key)
    assert not again._frames  # all read back, nothing of the trace itself loaded


def test_a_trace_and_a_run_share_one_store_type():
    trace = open_trace(NSYS, use_cache=False)
    assert trace.store.peek(gpu_ops) is None
    run = make_run([trace])
    assert type(trace.store) is Store and type(run.store) is Store
    ops = gpu_ops(trace)
    assert trace.store.peek(gpu_ops) is ops and "attribution.gpu_ops" in trace.store.held()
    trace.store.drop(gpu_ops)
    assert trace.store.peek(gpu_ops) is None and gpu_ops(trace).equals(ops)
    from kview.analysis.iterations import iteration_table

    table = iteration_table(run)
    assert run.store.peek(iteration_table) is table and run.store.disk is None


def test_a_dependencys_version_invalidates_its_dependents_and_nothing_else(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    labels = table_of(nv.labels)
    attribution, kern_sum = table_of(attribute), table_of(REPORTS["cuda_gpu_kern_sum"])
    assert labels in attribution.deps and labels not in kern_sum.deps
    before = {t.key: t.digest for t in TABLES.values()}
    first = open_trace(NSYS)
    want = attribute(first)
    REPORTS["cuda_gpu_kern_sum"](first)
    mp = pytest.MonkeyPatch()
    mp.setattr(labels, "version", labels.version + "-changed")
    _forget_digests()
    try:
        after = {t.key: t.digest for t in TABLES.values()}
        changed = {k for k in before if before[k] != after[k]}
        # the table, what is made from it (to any depth), and nothing else
        made_from = {labels.key}
        grew = True
        while grew:
            more = {t.key for t in TABLES.values() if any(d.key in made_from for d in t.deps)}
            grew, made_from = not more <= made_from, made_from | more
        assert changed == made_from and {"attribution", "timeline.nvtx", "nvtx_tree"} <= changed
        assert "report.cuda_gpu_kern_sum" not in changed and "nvtx" not in changed
        again = open_trace(NSYS)
        assert again.store.disk.load(attribution) is None  # stale: not served, dropped
        assert again.store.disk.load(kern_sum) is not None
        assert attribute(again).equals(want)  # made again, and kept under the new version
        assert cache.load(again.path, "attribution", attribution.digest) is not None
    finally:
        mp.undo()
        _forget_digests()


def test_the_disk_tier_knows_a_stale_table_without_reading_it(tmp_path, monkeypatch):
    """What decides on a worker process for a large trace: a table of other rules on disk is
    not "there" (the worker makes it again), one of these rules is."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    steps = TABLES["steps"]
    trace = open_trace(NSYS)
    assert not trace.store.on_disk(["steps"])
    trace.store.by_key("steps")
    assert trace.store.on_disk(["steps"]) and cache.has(trace.path, steps.cache_keys(), steps.digest)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(steps, "version", steps.version + "-changed")
        _forget_digests()
        try:
            assert not open_trace(NSYS).store.on_disk(["steps"])
        finally:
            mp.undo()
            _forget_digests()
    assert open_trace(NSYS).store.on_disk(["steps"])


def test_threads_asking_for_one_table_at_once_compute_it_once():
    """The explorer's views ask one trace's store for the same table from their own threads:
    the second caller waits for the first's value (computed once: the same object), while a
    table of another key is made meanwhile (no lock is held across keys)."""
    trace = open_trace(NSYS, use_cache=False)
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()

    def slow(t):
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            entered.set()
            release.wait(timeout=60)  # held until the second caller waits (a guard against a hang)
        return gpu_ops(t).select("Idx", "start", "end")

    table = Table(slow, "test.slow", "1", False, None, None)  # not declared: TABLES stays as it is
    got: dict[str, object] = {}

    def ask(name: str) -> None:
        got[name] = trace.store._get(table, (), {})

    first = threading.Thread(target=ask, args=("first",), name="first")
    first.start()
    assert entered.wait(timeout=60)
    # another key, asked while the first is being computed, is made at once
    labels = nv.labels(trace)
    assert first.is_alive() and not release.is_set() and trace.store.peek(nv.labels) is labels
    second = threading.Thread(target=ask, args=("second",), name="second")
    second.start()
    # wait until the second caller waits for the table's lock (or, were it let through, computes)
    code, start = Store._get.__code__, Store._get.__code__.co_firstlineno
    lines = inspect.getsource(Store._get).splitlines()
    at = start + next((i for i, line in enumerate(lines) if "self._key_locks(key)" in line), -start)
    waiting = threading.Event()
    while len(calls) == 1 and not waiting.is_set():
        frame = sys._current_frames().get(second.ident or -1)
        if frame is not None and frame.f_code is code and frame.f_lineno == at:
            waiting.set()
        else:
            waiting.wait(0.001)
    release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    assert calls == ["first"]
    assert got["first"] is got["second"] and isinstance(got["first"], pl.DataFrame)


def test_a_table_written_on_the_writer_thread_and_let_go_is_read_back_once_written(tmp_path, monkeypatch):
    """The explorer's worker writes each table's files on a thread while it makes the next
    (`later`): a table let go and asked again waits for its files and reads them back; `flush`
    leaves every file written."""
    trace = open_trace(NSYS, use_cache=False)
    trace.store.make(["attribution"], str(tmp_path), later=True)
    want = attribute(trace)
    trace.store.drop(attribute)
    made = []
    monkeypatch.setattr(table_of(attribute), "fn", lambda tr: made.append(tr) or pl.DataFrame())
    got = attribute(trace)
    assert not made and got.height == want.height > 1000 and got.equals(want)
    trace.store.flush()
    assert trace.store.made_file(attribute) == tmp_path / "attribution.parquet"
    assert pl.read_parquet(tmp_path / "attribution.parquet").equals(want)


def test_a_batch_is_said_once_its_files_are_written_and_never_where_one_failed(tmp_path):
    """`when_written` calls back once every file handed to the writer thread before it is
    written (the worker says a batch so); after a write that failed it never calls back, and
    `flush` raises the failure, as a write in line would have failed the batch."""
    trace = open_trace(NSYS, use_cache=False)
    said = []
    trace.store.make(["attribution"], str(tmp_path), later=True)
    trace.store.when_written(lambda: said.append((tmp_path / "attribution.parquet").is_file()))
    trace.store.flush()
    assert said == [True]
    other = open_trace(NSYS, use_cache=False)
    other.store.make(["attribution"], str(tmp_path / "gone"), later=True)
    other.store.when_written(lambda: said.append("said"))
    with pytest.raises(OSError):
        other.store.flush()
    assert said == [True]


def test_a_table_written_into_a_folder_and_let_go_is_read_back_not_made_again(tmp_path, monkeypatch):
    """The explorer's worker lets the attributed table go once it is written (the range tables
    do not read it): a document asking for it after reads back what was written."""
    trace = open_trace(NSYS, use_cache=False)
    trace.store.make(["attribution"], str(tmp_path))
    want = attribute(trace)
    trace.store.drop(attribute)
    assert "attribution" not in trace.store.held()
    made = []
    t = table_of(attribute)
    monkeypatch.setattr(t, "fn", lambda tr: made.append(tr) or pl.DataFrame())
    got = attribute(trace)
    assert not made and got.height == want.height > 1000
    assert got.schema == want.schema and got.equals(want)
