"""Derived tables: each declared once, kept in one store per trace and per run.

A derived table is a function of a Trace or a Run (and of hashable arguments) decorated with
`@derived`:

    @derived
    def gpu_ops(trace: Trace) -> pl.DataFrame:
        ...the work, here and nowhere else...

    @derived(key="attribution", version="1", persist=True)
    def attribute(trace: Trace) -> pl.DataFrame: ...

Calling `gpu_ops(trace)` asks the owner's Store, which computes the table on the first call and
keeps it in memory, keyed by the table and its arguments (never by a string), so every view and
command asks for it by the same name and gets the same frame. A persisted table is also kept in
the disk cache (the owner's disk tier), as the frames its codec makes of it, under `key`; its
value is always what the codec decodes, whether it was computed here, read from the disk or made
in a worker process, so the three agree.

A table's dependencies are the tables its code names, read from the code (through the plain
kview functions and classes it names, to any depth; a superset of what one call asks for, and
tests/test_store.py checks it holds every edge seen at run time): nobody keeps them by hand. Its version (`digest`) is a
hash of its declared version, its codec and its dependencies' versions, written in every cache
file it makes and checked when read, so a change of rules in one table invalidates it and what
is made from it, and nothing else. `TABLES` names every declared table by key, for a worker
process told which tables to make (kview.trace.make_tables).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import sys
import threading
import types
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, Protocol, TypeVar, overload

import polars as pl

P = ParamSpec("P")
R = TypeVar("R")

# rows per row group of a table a worker writes: the Parquet writer holds a row group's
# encoding while it writes it; at its default size that was 0.3 GB more while dense_x25's
# attributed table was written (the worker's peak), at this size 0.07 GB
MADE_ROW_GROUP = 16384


@dataclass(frozen=True)
class Codec:
    """How a persisted table's value becomes frames (one Parquet file each) and back.
    `parts`: the suffix of each frame's cache key ("" for the table's key alone)."""

    name: str
    parts: tuple[str, ...]
    encode: Callable[[Any], tuple[pl.DataFrame, ...]]
    decode: Callable[[tuple[pl.DataFrame, ...]], Any]
    # each frame kept as one piece, read back in one chunk: for tables turned into NumPy arrays,
    # which a frame read in pieces would copy whole (the file's pieces cost nothing more to write
    # at a time; one piece holds a frame's encoded columns until it is written)
    whole: bool = False


FRAME = Codec("frame", ("",), lambda v: (v,), lambda f: f[0])


def frames(*parts: str, whole: bool = False) -> Codec:
    """A tuple of frames, one part each (`whole`: see Codec)."""
    if len(set(parts)) != len(parts):  # each part is a file of its own: one name twice is one file
        raise ValueError(f"parts named twice: {parts}")
    return Codec("frames:" + ",".join(parts), parts, tuple, tuple, whole)


def _int_row(value: dict[str, int]) -> tuple[pl.DataFrame]:
    return (pl.DataFrame([value], schema={k: pl.Int64 for k in value}),)


INT_ROW = Codec("int-row", ("",), _int_row, lambda f: f[0].row(0, named=True))


class Table:
    """One declared table: its function, key, version, whether it is persisted, its codec."""

    def __init__(
        self,
        fn: Callable[..., Any],
        key: str,
        version: str,
        persist: bool,
        codec: Codec | None,
        keep: Callable[[Any], bool] | None,
    ):
        self.fn, self.key, self.version, self.persist = fn, key, version, persist
        self.codec = codec if codec is not None else (FRAME if persist else None)
        self.keep = keep  # a persisted value that depends on more than the trace is not kept

    def __repr__(self) -> str:
        return f"Table({self.key})"

    def cache_keys(self) -> tuple[str, ...]:
        assert self.codec is not None
        return tuple(self.cache_key(p) for p in self.codec.parts)

    def cache_key(self, part: str) -> str:
        """The cache key of frame `part` of this table ("": the table's key alone)."""
        return f"{self.key}.{part}" if part else self.key

    @functools.cached_property
    def deps(self) -> frozenset[Table]:
        """The tables this one's computation may ask for (read from its code)."""
        return frozenset(_tables_used(self.fn, include_self=False))

    @functools.cached_property
    def digest(self) -> str:
        """This table's version with those of every table it is made from."""
        h = hashlib.blake2b(digest_size=8)
        h.update(f"{self.key}\0{self.version}\0{self.codec.name if self.codec else ''}".encode())
        for d in sorted(self.deps, key=lambda t: t.key):
            h.update(d.digest.encode())
        return h.hexdigest()


# every declared table by key
TABLES: dict[str, Table] = {}


def table_by_key(key: str) -> Table:
    """The table declared under `key`. A table is known by its key once its module is imported,
    and a process asks by key for tables it may not have needed yet (the explorer reading back
    what its worker made: `layers.phase_spans` before anything imported kview.analysis.compare)."""
    if key not in TABLES:
        import_all()
    return TABLES[key]


# table key -> the keys of the tables its computation asked for, as traces are used (the graph's
# edges seen at run time; tests check they are among those read from the code)
DEPENDS: dict[str, set[str]] = {}
_computing = threading.local()  # per thread: the tables being computed, innermost last


def table_of(fn: Callable[..., Any]) -> Table:
    """The declaration of a derived table function."""
    t = getattr(fn, "__table__", None)
    if not isinstance(t, Table):
        raise TypeError(f"{fn!r} is no derived table")
    return t


@overload
def derived(fn: Callable[P, R]) -> Callable[P, R]: ...


@overload
def derived(
    *,
    key: str | None = None,
    version: str = "1",
    persist: bool = False,
    codec: Codec | None = None,
    keep: Callable[[Any], bool] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def derived(
    fn: Callable[P, R] | None = None,
    *,
    key: str | None = None,
    version: str = "1",
    persist: bool = False,
    codec: Codec | None = None,
    keep: Callable[[Any], bool] | None = None,
) -> Any:
    """Declare a derived table: `key` (default module.function) names it in the cache and to
    workers; `version` changes with its rules; `persist` keeps it in the disk cache through
    `codec` (one frame by default); `keep` can refuse to persist a value."""

    def declare(fn: Callable[P, R]) -> Callable[P, R]:
        name = key or f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"
        t = Table(fn, name, version, persist, codec, keep)
        old = TABLES.get(name)
        if old is not None and (old.fn.__module__, old.fn.__qualname__) != (fn.__module__, fn.__qualname__):
            raise ValueError(f"two derived tables named {name}")
        TABLES[name] = t

        @functools.wraps(fn)
        def table(*args: P.args, **kwargs: P.kwargs) -> R:
            owner: HasStore = args[0]  # type: ignore[assignment]
            return owner.store.get(table, *args[1:], **kwargs)

        table.__table__ = t  # type: ignore[attr-defined]
        return table

    return declare if fn is None else declare(fn)


class DiskTier(Protocol):
    def has(self, table: Table) -> bool: ...

    def load(self, table: Table) -> tuple[pl.DataFrame, ...] | None: ...

    def verified(self, table: Table, part: str) -> bytes | None: ...

    def save(self, table: Table, frames: tuple[pl.DataFrame, ...]) -> None: ...


class HasStore(Protocol):
    store: Store


class KeyedLocks:
    """A lock per key, made on first use: work on one key waits for the same key's, never for
    another's."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Any, threading.Lock] = {}

    def __call__(self, key: Any) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(key, threading.Lock())


class Store:
    """The derived tables of one owner (a Trace or a Run): memory, and for persisted tables a
    disk tier (a trace's frame cache; none for a run or without the cache)."""

    def __init__(self, owner: Any, disk: DiskTier | None = None):
        # weak: the owner holds its store, and is freed when its last user lets go (no cycle)
        self._owner = weakref.ref(owner)
        self.disk = disk
        self._memory: dict[tuple, Any] = {}
        # several threads (the explorer's views) ask for the same table at once: each key is
        # computed once, under its own lock (a second caller waits for the first's value),
        # while other keys go on; `_guard` is held only to read or change the two dicts
        self._guard = threading.Lock()
        self._key_locks = KeyedLocks()
        # persisted tables this store wrote into a folder (`make`), or a worker wrote for it
        # (`read_made`): one let go, or not read yet, is read from there, not made again
        self._written: dict[Table, str] = {}
        # the files `make` hands its writer thread (`later`) and not yet written: a read of one
        # waits for it, and `flush` for all
        self._writing: dict[Table, Future] = {}
        self._writer: ThreadPoolExecutor | None = None
        self._then: Future | None = None  # the last call `when_written` queued behind them

    def get(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        """Table `fn` of the owner (with `args`): from memory, else the disk, else computed
        (once, whichever threads ask for it at the same time)."""
        return self._get(table_of(fn), args, kwargs)

    def _get(self, t: Table, args: tuple, kwargs: dict) -> Any:
        key = (t, *args, *sorted(kwargs.items()))
        stack = _computing.__dict__.setdefault("stack", [])
        if stack:
            DEPENDS.setdefault(stack[-1], set()).add(t.key)
        # a table never waits for one that waits for it: the graph has no cycle
        with self._guard:
            if key in self._memory:
                return self._memory[key]
        with self._key_locks(key):
            with self._guard:
                if key in self._memory:  # made by the thread this one waited for
                    return self._memory[key]
            stack.append(t.key)
            try:
                value = self._make(t, args, kwargs)
            finally:
                stack.pop()
            with self._guard:
                self._memory[key] = value
        return value

    def _make(self, t: Table, args: tuple, kwargs: dict) -> Any:
        owner = self._owner()
        assert owner is not None, "a store asked after its trace or run was let go"
        if not t.persist:
            return t.fn(owner, *args, **kwargs)
        assert t.codec is not None and not args and not kwargs, t.key  # one value per owner
        found = self.disk.load(t) if self.disk is not None else None
        if found is None and t in self._written:
            self._wait_written(t)
            found = _read_frames(t, self._written[t])
        if found is not None:
            return t.codec.decode(found)
        encoded = t.codec.encode(t.fn(owner))
        value = t.codec.decode(encoded)
        if self.disk is not None and (t.keep is None or t.keep(value)):
            self.disk.save(t, encoded)
        return value

    def peek(self, fn: Callable[..., R], *args: Any) -> R | None:
        """Table `fn` if it is in memory, else None (nothing is computed or read)."""
        with self._guard:
            return self._memory.get((table_of(fn), *args))

    def drop(self, *fns: Callable[..., Any]) -> None:
        """Forget the tables `fns` (every argument of them; none named, none forgotten): what
        was made from them stays, and a later question makes them again (equal), or reads back
        what `make` wrote, rather than the owner holding them (the NVTX names and nesting behind
        an attributed table are gigabytes at a million kernels)."""
        gone = {table_of(f) for f in fns}
        with self._guard:
            for k in [k for k in self._memory if k[0] in gone]:
                del self._memory[k]

    def clear(self) -> None:
        """Forget every table (as `drop` each)."""
        with self._guard:
            self._memory.clear()

    def held(self) -> set[str]:
        """The keys of the tables in memory."""
        with self._guard:
            return {k[0].key for k in self._memory}

    def by_key(self, key: str) -> Any:
        """Table `key` (of no arguments), by its key: for a worker told which tables to make."""
        return self._get(table_by_key(key), (), {})

    def on_disk(self, keys: Iterable[str]) -> bool:
        """Whether the disk tier holds files for every one of the tables `keys` (reading one
        still checks it: "is it worth starting from the disk", not "is it valid")."""
        return self.disk is not None and all(self.disk.has(table_by_key(k)) for k in keys)

    def make(self, keys: Iterable[str], out: str | None = None, later: bool = False) -> None:
        """Make the tables `keys` (by key, in that order); with `out`, write each one's frames
        there as its codec makes them, one Parquet file per cache key (what `read_made` reads
        back in the process that asked a worker for them); a table written there and let go
        (`drop`) is read back from there when asked again. `later`: the files are written on
        this store's writer thread while the next tables are made (`flush` waits for them)."""
        for k in keys:
            t = table_by_key(k)
            value = self.by_key(k)
            if out is not None:
                assert t.codec is not None, f"{k} has no codec: it cannot leave a worker"
                frames = t.codec.encode(value)
                if later:
                    if self._writer is None:
                        self._writer = ThreadPoolExecutor(1, thread_name_prefix="kview-write")
                    with self._guard:
                        self._writing[t] = self._writer.submit(_write_frames, t, frames, out)
                else:
                    _write_frames(t, frames, out)
                with self._guard:
                    self._written[t] = out

    def when_written(self, then: Callable[[], object]) -> None:
        """Call `then` once every file `make` handed its writer thread so far is written (on that
        thread, in turn; at once where none was handed to it); not at all where one failed
        (`flush` raises it)."""
        with self._guard:
            pending = list(self._writing.values())
        if self._writer is None:
            then()
            return

        def after() -> None:
            if all(f.exception() is None for f in pending):  # done: they were queued before
                then()

        self._then = self._writer.submit(after)

    def flush(self) -> None:
        """Wait until every file `make` handed its writer thread is written, and what
        `when_written` queued is done; raise what failed."""
        with self._guard:
            pending = list(self._writing.values())
        for f in pending:
            f.result()
        if self._then is not None:
            self._then.result()
        with self._guard:
            self._writing = {t: f for t, f in self._writing.items() if not f.done()}

    def _wait_written(self, t: Table) -> None:
        """Wait until table `t`'s files are written, where `make` handed them its writer thread."""
        with self._guard:
            f = self._writing.get(t)
        if f is not None:
            f.result()

    def read_made(self, keys: Iterable[str], out: str, later: Iterable[str] = ()) -> None:
        """Keep the tables `keys` a worker wrote into `out` (`make`), unless already here; those
        also in `later` are read only when asked (a caller may read part of their files
        instead: `made_file`). Any of them let go (`drop`) is read back from `out` when asked
        again, so `out` must last as long as this store asks."""
        later = set(later)
        for k in keys:
            t = table_by_key(k)
            assert t.codec is not None
            with self._guard:
                self._written.setdefault(t, out)
            if k in later:
                continue
            value = t.codec.decode(_read_frames(t, out))
            with self._guard:
                self._memory.setdefault((t,), value)

    def made_file(self, fn: Callable[..., Any], part: str = "") -> Path | None:
        """The file of frame `part` of table `fn` a worker wrote for this store (`read_made`),
        or None."""
        t = table_of(fn)
        with self._guard:
            out = self._written.get(t)
        if out is None or t.codec is None or part not in t.codec.parts:
            return None
        self._wait_written(t)
        return made_file(out, t.cache_key(part))

    def cached_bytes(self, fn: Callable[..., Any], part: str = "") -> bytes | None:
        """The Parquet bytes of frame `part` of persisted table `fn` in the disk tier, checked
        as a read of the table checks them but not decoded (a caller reads the columns or rows
        it needs of them), or None (no disk tier, not there, or not usable)."""
        t = table_of(fn)
        if self.disk is None or t.codec is None or part not in t.codec.parts:
            return None
        return self.disk.verified(t, part)


def made_file(out: str, name: str) -> Path:
    """The Parquet file of frame `name` (a table's cache key) written into folder `out`."""
    return Path(out, f"{name}.parquet")


def _write_frames(t: Table, frames: tuple[pl.DataFrame, ...], out: str) -> None:
    """Write table `t`'s `frames` into folder `out`, one Parquet file per cache key (read back
    by `_read_frames`)."""
    for name, frame in zip(t.cache_keys(), frames):
        # no statistics: a file is read back whole or by rows, never searched by them; lz4, as
        # the frame cache: written and read once, in the same minute, where zstd's smaller files
        # cost 0.7 CPU s more to write on dense_x25 (1.5 for the attributed table: 1.3 with lz4)
        # and more to read back
        frame.write_parquet(made_file(out, name), compression="lz4", row_group_size=MADE_ROW_GROUP, statistics=False)


def _read_frames(t: Table, out: str) -> tuple[pl.DataFrame, ...]:
    """The frames of table `t` written into folder `out` (Store.make)."""
    return tuple(pl.read_parquet(made_file(out, name)) for name in t.cache_keys())


# -- the graph, read from the code ---------------------------------------------------------


def _kview_module(name: str) -> types.ModuleType | None:
    if name.split(".")[0] != "kview":
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_named: dict[types.CodeType, list[Any]] = {}


def _objects_named(code: types.CodeType, globals_: dict) -> list[Any]:
    """The module-level objects `code` (and the code nested in it) may name: its globals, and
    every name it uses looked up in each kview module it names or imports (a call through a
    module alias, `nv.labels(trace)`, or imported inside the function). Read from the names
    the code holds (co_names), not from its instructions: a superset, found cheaply."""
    if code in _named:
        return _named[code]
    names: set[str] = set()
    todo = [code]
    while todo:
        c = todo.pop()
        names.update(c.co_names)
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    out: list[Any] = []
    modules: list[types.ModuleType] = []
    for n in names:
        obj = globals_.get(n)
        if obj is None and "." in n:  # `from kview.analysis.x import y` inside the function
            obj = _kview_module(n)
        if isinstance(obj, types.ModuleType):
            if obj.__name__.split(".")[0] == "kview":
                modules.append(obj)
        elif obj is not None:
            out.append(obj)
    for m in modules:
        for n in names:
            obj = getattr(m, n, None)
            if obj is None and hasattr(m, "__path__"):  # a submodule: `from kview.analysis import nvtx_ranges`
                obj = sys.modules.get(f"{m.__name__}.{n}") or (
                    _kview_module(f"{m.__name__}.{n}") if n.isidentifier() and n[0].islower() else None
                )
            if isinstance(obj, types.ModuleType):
                if obj.__name__.split(".")[0] == "kview" and obj not in modules:
                    modules.append(obj)
            elif obj is not None:
                out.append(obj)
    _named[code] = out
    return out


def _callees(fn: Callable[..., Any]) -> list[Any]:
    fn = inspect_unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = list(_objects_named(code, fn.__globals__))
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:
            continue
    return found


def inspect_unwrap(fn: Any) -> Any:
    while hasattr(fn, "__wrapped__") and not isinstance(getattr(fn, "__table__", None), Table):
        fn = fn.__wrapped__
    return fn


def _tables_used(fn: Callable[..., Any], include_self: bool = True) -> set[Table]:
    """The tables `fn` may ask for: those its code names, and those of the plain kview
    functions it names, to any depth (not through other tables: they are nodes themselves)."""
    found: set[Table] = set()
    seen: set[int] = set()
    todo = [fn]
    first = True
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        t = getattr(f, "__table__", None)
        if isinstance(t, Table) and not first:
            found.add(t)
            continue
        if isinstance(t, Table):
            f = t.fn
        first = False
        for obj in _callees(f):
            if isinstance(getattr(obj, "__table__", None), Table):
                todo.append(obj)
            elif isinstance(obj, types.FunctionType) and obj.__module__.split(".")[0] == "kview":
                todo.append(obj)
            elif isinstance(obj, type) and obj.__module__.split(".")[0] == "kview":
                todo += _methods(obj)
    if include_self and isinstance(getattr(fn, "__table__", None), Table):
        found.add(table_of(fn))
    return found


def _methods(cls: type) -> list[Any]:
    """The functions a class of kview defines (its methods, static, class and properties)."""
    out = []
    for v in vars(cls).values():
        v = getattr(v, "__func__", v)
        if isinstance(v, property):
            out += [f for f in (v.fget, v.fset) if f is not None]
        elif isinstance(v, functools.cached_property):
            out.append(v.func)
        elif isinstance(v, types.FunctionType):
            out.append(v)
    return out


def version_of(*fns: Callable[..., Any] | str) -> str:
    """The versions of every table the functions `fns` may ask for (a table's key: that table),
    as one digest: what a cache of their results (a run's per-file summaries) is keyed by."""
    used: set[Table] = set()
    for fn in fns:
        used |= {TABLES[fn]} if isinstance(fn, str) else _tables_used(fn)
    h = hashlib.blake2b(digest_size=8)
    for t in sorted(used, key=lambda t: t.key):
        h.update(t.digest.encode())
    return h.hexdigest()


def import_all() -> None:
    """Import every module that declares tables (for the whole graph: tests, a worker)."""
    import pkgutil

    import kview  # deferred: only a worker or a test asks for every module

    for m in pkgutil.walk_packages(kview.__path__, "kview."):
        if m.name.startswith(("kview.tui", "kview.capture", "kview.models")) or m.name in sys.modules:
            continue
        if m.name.startswith(("kview.analysis", "kview.reports", "kview.documents")):
            importlib.import_module(m.name)
