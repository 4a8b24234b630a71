"""The normalized trace model: one object per opened trace, frames loaded on demand.

A Trace holds a source (kview.io.source.TraceSource: an Nsight Systems export or a torch.profiler
JSON, both read into the schema of kview.io.schema) and asks it for each frame once, only the
columns a caller needs. Reports, analyses and views ask the Trace, never the file. A parquet
cache of the frames (kview.io.cache) makes a second open of a large trace cheap.

`open_trace` checks a path once, opens it and returns the Trace every caller shares (the CLI's
commands, and the explorer, whose loader receives it).
"""

from __future__ import annotations

import functools
import itertools
import os
import stat
import sys
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from kview.derived import KeyedLocks, Store, Table, import_all
from kview.errors import TraceError
from kview.io import cache, converted
from kview.io.kineto_reader import KinetoSource, looks_like_json
from kview.io.nsys_reader import NsysSource
from kview.io.paths import named
from kview.io.snapshot_pickle import is_snapshot_file
from kview.io.source import TraceSource
from kview.warning import warn_once

# string tables up to this size are read whole, once; larger ones only for the ids asked for
WHOLE_STRINGS = 200_000


class Trace:
    """One opened trace: its source's frames, each loaded once (and cached on disk)."""

    def __init__(self, source: TraceSource, use_cache: bool = True):
        self.source = source
        self.path = source.path
        self.use_cache = use_cache
        self._frames: dict[str, pl.DataFrame] = {}
        # the explorer's views read one trace from several threads: a frame is read once
        self._frame_locks = KeyedLocks()
        # its derived tables (kview.derived): memory, and the frame cache for persisted ones
        self.store = Store(self, FrameCacheTier(self.path) if use_cache else None)
        # opened for one command, which lets tables made only on the way go once used (the
        # Overview: the NVTX ranges); the explorer keeps them for its other views
        self.one_command = False
        # the command asks nothing of the NVTX ranges but the attributed table (`kview kernels`):
        # attribute() lets the ranges and their names go as soon as it has what it needs of them
        self.ranges_only_for_attribution = False
        # the ranges' names are asked of nothing after the attribution, their ranges and nesting
        # are (the explorer's worker, which makes its tables of the names first): attribute()
        # lets the names go and keeps the ranges
        self.names_only_for_attribution = False
        # the command asks nothing of the trace but the attributed table (`kview kernels`):
        # gpu_ops and launched_ops let the columns they read go once they have joined them
        self.only_attribution = False
        # the command never shows the kernels' launch dimensions (`kview overview`): gpu_ops
        # leaves them null rather than holding six columns of a million rows through attribution
        self.launch_dims = True

    # -- facts -------------------------------------------------------------
    @cached_property
    def metadata(self) -> dict[str, str]:
        return self.source.metadata()

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def stem(self) -> str:
        return self.path.stem

    @cached_property
    def origin(self) -> int:
        """Time zero of the trace in its own clock's ns: the session start of an nsys export (0,
        its times count from there), the first event of a torch.profiler trace (whose times are
        clock readings). Every frame a Trace gives counts from it (one clock for every view);
        `start + origin` is the time as the file records it."""
        return self.source.origin()

    @cached_property
    def clock(self) -> tuple[str, int] | None:
        """(the clock the file's times read, its reading at time zero), for lining up the files
        of one run (kview.analysis.run_clock); None where the trace does not say."""
        return self.source.clock()

    def _from_zero(self, frame: pl.DataFrame) -> pl.DataFrame:
        """`frame` with its start/end columns counted from the trace's time zero."""
        o = self.origin
        times = [c for c in ("start", "end") if c in frame.columns]
        return frame.with_columns(pl.col(c) - o for c in times) if o and times else frame

    def has(self, table: str) -> bool:
        return self.source.has(table)

    # -- frames --------------------------------------------------------------
    def cached(self, key: str, build: Callable[[], pl.DataFrame]) -> pl.DataFrame:
        """Frame `key` of this trace: kept in memory once built, and in the disk cache (the one
        path every cached frame takes) unless --no-cache."""
        if key not in self._frames:
            with self._frame_locks(key):
                if key not in self._frames:
                    self._frames[key] = cache.cached(
                        self.path, key, build, self.use_cache and self.source.persist_frames
                    )
        return self._frames[key]

    @property
    def strings(self) -> pl.DataFrame:
        return self.cached("strings", self.source.strings)

    def columns(self, key: str, names: list[str]) -> pl.DataFrame:
        """Columns `names` of a logical table (kernels, runtime, memcpy, memset, osrt).

        Only columns not loaded yet are read (from the cache, else from the trace), so a
        request pays for what it uses.
        """
        have = self._frames.get(key)
        if have is None or not all(n in have.columns for n in names):
            with self._frame_locks(key):  # columns added by one thread at a time
                have = self._read_missing(key, names)
        assert have is not None  # every name was loaded above
        return have.select(names)

    def rows_where(self, key: str, names: list[str], column: str, values: list[int], keep: bool = True) -> pl.DataFrame:
        """Columns `names` of logical table `key`, of the rows whose `column` holds one of
        `values`, in the table's order (not kept): from the frame where it holds them, from the
        trace where nothing is kept for later (no cache, or not `keep`: a lookup of one op's
        rows, which would hold whole columns for it) and the rows are few of many."""
        have = self._frames.get(key)
        wanted = list(dict.fromkeys([*names, column]))
        if have is not None and all(n in have.columns for n in wanted):
            return have.filter(pl.col(column).is_in(values)).select(names)
        if keep and self.use_cache and self.source.persist_frames:  # the columns read are kept for later
            return self.columns(key, wanted).filter(pl.col(column).is_in(values)).select(names)
        return self._from_zero(self.source.read_columns(key, names, (column, values)))

    def row_count(self, key: str) -> int:
        """The rows of logical table `key`: its frame's where a column of it is held, else counted
        by the source (reading a column to count it is a pass over every row of the file, and the
        columns asked for next would need another)."""
        have = self._frames.get(key)
        return have.height if have is not None and have.width else self.source.row_count(key)

    def _read_missing(self, key: str, names: list[str]) -> pl.DataFrame | None:
        """Frame `key` with the columns `names` it lacks read (from the cache, else the trace)."""
        have = self._frames.get(key)
        missing = [n for n in names if have is None or n not in have.columns]
        if missing:
            got: dict[str, pl.Series] = {}
            use = self.use_cache and self.source.persist_frames
            if use:
                for n in missing:
                    col = cache.load(self.path, f"{key}.{n}")
                    if col is not None:
                        got[n] = col.to_series()
            height = have.height if have is not None and have.width else None
            if len({len(c) for c in got.values()} | ({height} if height is not None else set())) > 1:
                warn_once("cached columns of different lengths were ignored; the frames are rebuilt from the trace")
                got = {}
            todo = [n for n in missing if n not in got]
            if todo:
                fresh = self.source.read_columns(key, todo)
                for n in todo:
                    got[n] = fresh[n]
                    if use:
                        cache.store(self.path, f"{key}.{n}", fresh.select(n))
            new = self._from_zero(pl.DataFrame([got[n] for n in missing]))
            have = new if have is None or have.width == 0 else have.hstack(new)
            self._frames[key] = have
        return have

    def let_go(self, *keys: str) -> None:
        """Forget the frames `keys` (a later ask reads them again)."""
        for key in keys:
            self._frames.pop(key, None)

    @property
    def nvtx_events(self) -> pl.DataFrame:
        """Raw NVTX range and domain rows, read when kview.nvtx_ranges builds its integer form.
        Neither kept nor cached: that compact form is what is cached, and the raw strings are
        the largest thing a trace holds."""
        return self._from_zero(self.source.nvtx_events())

    @cached_property
    def nvtx_max_timestamp(self) -> int | None:
        t = self.source.nvtx_max_timestamp()
        return None if t is None else t - self.origin

    @cached_property
    def session_ns(self) -> int | None:
        """How long the recorded session lasted from time zero (None where the trace does not say)."""
        return self.source.session_ns()

    @cached_property
    def memcpy_kind_labels(self) -> dict[int, str]:
        return self.source.memcpy_kind_labels()

    @property
    def threads(self) -> pl.DataFrame:
        return self.cached("threads", self.source.threads)

    @property
    def processes(self) -> pl.DataFrame:
        return self.cached("processes", self.source.processes)

    @property
    def devices(self) -> pl.DataFrame:
        return self.cached("devices", self.source.devices)

    # -- helpers -------------------------------------------------------------
    def string_values(self, ids: pl.Series) -> pl.DataFrame:
        """(id, value) for the given StringIds ids. Small string tables are read whole once;
        large ones (1M+ strings in long captures) only for the ids asked for."""
        if "strings" in self._frames or self.source.string_count() <= WHOLE_STRINGS:
            return self.strings
        return self.source.strings_for(ids.drop_nulls().unique().cast(pl.Int64))

    def with_strings(self, df: pl.DataFrame, id_col: str, out_col: str) -> pl.DataFrame:
        """Add the text of a StringIds id column (left join, so unknown ids give null)."""
        s = self.string_values(df[id_col]).rename({"id": id_col, "value": out_col})
        # the texts joined to the id column alone and added: a join of the whole frame copies
        # every column (a million kernels' columns in gpu_ops)
        return df.hstack([df.select(id_col).join(s, on=id_col, how="left", maintain_order="left")[out_col]])


class FrameCacheTier:
    """The disk tier of a trace's store: persisted tables in the frame cache (kview.io.cache),
    each file carrying the table's version."""

    def __init__(self, path: Path):
        self.path = path

    # deferred, as in Trace.cached: the cache module loads when a table is first kept
    def has(self, table: Table) -> bool:
        return cache.has(self.path, table.cache_keys(), table.digest)

    def load(self, table: Table) -> tuple[pl.DataFrame, ...] | None:
        keys = table.cache_keys()
        found = cache.load_all(self.path, keys, table.digest)
        return None if found is None else tuple(found[k] for k in keys)

    def verified(self, table: Table, part: str) -> bytes | None:
        found = cache.verified(self.path, table.cache_key(part), table.digest)
        return None if found is None else found[0]

    def save(self, table: Table, frames: tuple[pl.DataFrame, ...]) -> None:
        whole = table.codec is not None and table.codec.whole
        cache.store_all(self.path, dict(zip(table.cache_keys(), frames)), table.digest, whole)


class JsonTrace(Trace):
    """A Trace over a torch.profiler (Kineto) Chrome trace, `.json` or `.json.gz`: the same
    model, named so callers can tell the kind apart (the source does the reading)."""

    def __init__(self, path: str | os.PathLike, use_cache: bool = True):
        super().__init__(KinetoSource(named(path).absolute(), use_cache), use_cache)


def _head(p: Path) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(64)
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror})") from None


def _sniff(p: Path) -> str:
    head = _head(p)
    if head.startswith(b"\x1f\x8b"):
        return "json"

    if looks_like_json(head):
        return "json"
    return "sqlite"


SAMPLE = "lm-small_ctx256_train_nsys.sqlite"


def bundled_sample() -> Path | None:
    """The sample trace `kview` opens with no argument: from a checkout, or installed data."""
    here = Path(__file__).resolve().parent
    for cand in (
        here.parent / "sample_traces" / SAMPLE,
        Path(sys.prefix) / "share" / "kview" / "sample_traces" / SAMPLE,
    ):
        if cand.exists():
            return cand
    return None


def open_trace(path: str | os.PathLike, use_cache: bool = True) -> Trace:
    """Open any supported trace (nsys SQLite export, kview capture, torch.profiler JSON), checked
    once on the way in; raises TraceError with a one-line reason otherwise.

    The check is cheap and complete for what is no trace (missing, a folder, empty, not SQLite,
    truncated, not an nsys export, JSON that is no torch.profiler trace). A torch.profiler trace
    is read (and inflated) here once and decoded when a frame is first asked for, so the
    explorer draws its first frame before that work."""
    p = named(path)
    try:  # one stat: a folder on the way the user cannot enter is a reason, not a traceback
        st = p.stat()
    except (FileNotFoundError, NotADirectoryError):
        raise TraceError(p, "no such file") from None
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(p, "is a folder, not a trace file")
    if st.st_size == 0:
        raise TraceError(p, "is empty")

    if is_snapshot_file(p):  # `kview memory` reads it; as an export it would be "not SQLite", a copy named .sqlite
        raise TraceError(p, "is a CUDA memory snapshot, not a trace: `kview memory` shows it")
    kind = converted.kind_of(p, _head(p))
    if kind is not None:  # a report or a compressed export: opened as its copy in the cache
        return open_trace(converted.copy_of(p, kind), use_cache=use_cache)
    if _sniff(p) == "json":
        return JsonTrace(p, use_cache=use_cache)

    return Trace(NsysSource(p.absolute()), use_cache=use_cache)


def make_tables(
    path: str,
    keys: tuple[str, ...],
    use_cache: bool,
    out: str | None = None,
    quiet: bool = False,
    batches: tuple[int, ...] = (),
    said: Any = None,
    between: Callable[[Trace, str], None] | None = None,
    first: Callable[[Trace], None] | None = None,
) -> None:
    """In a worker process: the tables `keys` of the trace at `path`, made by their keys (in
    that order) into the frame cache (with `use_cache`) and, with `out`, written into that
    folder for the process that asked (Store.read_made). A trace that cannot be opened: nothing
    (the asking process meets it again, and says it). `quiet`: nothing on the terminal (the
    explorer owns it). `batches`: the sizes of the first batches `keys` are made in (the rest
    one more); after batch i is written, i is sent on `said` (a pipe's sending end: the asking
    process reads a batch while the next are made); after each table is written,
    `between(trace, key)` lets go what the next do not need (a batch's last before the batch is
    said written); `first(trace)` runs before the first."""
    if quiet:
        silent()
    import_all()  # the modules that declare the tables, by key
    try:
        trace = open_trace(path, use_cache=use_cache)  # held: its store knows it weakly
        if first is not None:
            first(trace)
        cuts = [0, *itertools.accumulate(batches), len(keys)]
        for i, (lo, hi) in enumerate(itertools.pairwise(cuts)):
            for at in range(lo, hi):
                # each table's files are written on a thread while the next is made (the
                # attributed table's beside the Kernels view's groups and words, the NVTX tree's
                # beside the first document)
                trace.store.make(keys[at : at + 1], out, later=True)
                if between is not None:
                    between(trace, keys[at])
            # said once its inputs went and its files are written: the asking process reads the
            # batch as the worker's memory falls, not while it still holds them (the two
            # processes' sum); a batch whose file could not be written is never said
            if said is not None:
                trace.store.when_written(functools.partial(said.send, i))
        trace.store.flush()
    except TraceError:
        if out is not None:
            raise


def silent() -> None:
    """A worker's output goes nowhere (its descriptors 1 and 2 are the explorer's terminal)."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def validate(path: str | os.PathLike) -> None:
    """Raise TraceError exactly as open_trace would, keeping nothing open."""
    open_trace(path, use_cache=False).source.close()
