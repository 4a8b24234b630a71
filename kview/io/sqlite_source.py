"""Read-only access to a SQLite file: validation, schema, and columnar reads into polars.

Validation reads only the 100-byte header and the file size, so a zeroed, truncated or
foreign file is refused before SQLite touches it, and a leftover rollback journal or WAL
beside the trace (an interrupted write) is refused rather than rolled back or checkpointed.
Bulk reads go through connectorx (chosen by measurement, see bench/RESULTS.md): it returns
Arrow columns without building Python row objects. Every connection, connectorx's and the
stdlib's for schema look-ups, opens the same `file:` URI with `mode=ro&immutable=1` and the
path percent-encoded, so SQLite opens the file O_RDONLY, takes no locks and never creates,
reads or deletes a `-journal`, `-wal` or `-shm` beside it.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kview.errors import OutOfMemory, TraceError, is_out_of_memory
from kview.io.paths import named

if TYPE_CHECKING:  # polars is imported by the readers that return frames: the file checks need none
    import polars as pl
    import pyarrow as pa  # type: ignore[import-untyped]

SQLITE_MAGIC = b"SQLite format 3\x00"
WAL_HEADER = 32  # a WAL file holds pages only past its 32-byte header
PARTITION_ROWS = 200_000  # tables with more rows are read by several threads
# a read's threads at most: measured up to the GPU machine's 16 cores; a big host starts no hundred
READ_THREADS_MAX = 16


def read_threads() -> int:
    """Threads for one large read: the cores this process may run on (a container's or taskset's
    share, not the host's), at least two, at most READ_THREADS_MAX. SQLite decodes a row at a
    time, so a read's wall time falls with its threads: on 16 cores the dense trace's NVTX read
    (5.7M rows) takes 0.9 s on 16 threads against 3.1-3.9 s on 2, at the same peak (+40 MB)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call (macOS, Windows)
        cores = os.cpu_count() or 1
    return max(2, min(cores, READ_THREADS_MAX))


PROGRESS_STEPS = 100_000  # SQLite virtual-machine steps between two chances for a signal handler


def _let_signals_in() -> int:
    return 0  # a pending Ctrl-C or SIGTERM handler runs here, in Python; 0: go on


def sqlite_uri(path: Path) -> str:
    """The read-only, immutable `file:` URI of `path`, with every byte of the path that is not
    a plain URI character percent-encoded (`%`, `?`, `#`, spaces, newlines, non-ASCII)."""
    return "file:" + urllib.parse.quote(str(path), safe="/") + "?mode=ro&immutable=1"


def connectorx_url(path: Path) -> str:
    """connectorx percent-decodes what follows `sqlite://` once and hands the result to SQLite
    (opened with URI filenames on), so the file: URI goes in encoded once more."""
    return "sqlite://" + urllib.parse.quote(sqlite_uri(path), safe="/")


def leftover_write(path: Path) -> str | None:
    """The name of a hot rollback journal or a WAL with pages in it beside `path`, if any.

    Either means a writer stopped mid-transaction (an export killed, a disk filled): SQLite
    would roll the journal back into the trace, or checkpoint the WAL into it, on open. kview
    never does either, and reading the main file alone could show half a transaction.
    """
    for suffix, least in (("-journal", 1), ("-wal", WAL_HEADER + 1)):
        side = path.with_name(path.name + suffix)
        try:
            if side.stat().st_size < least:
                continue
            with open(side, "rb") as f:
                first = f.read(1)
        except OSError:
            continue
        # A journal whose header was zeroed (journal_mode=PERSIST after a commit) is not hot.
        if suffix == "-wal" or first not in (b"", b"\x00"):
            return side.name
    return None


def check_sqlite_file(path: Path) -> None:
    """Raise TraceError unless `path` looks like a complete SQLite database."""
    if not path.exists():
        raise TraceError(path, "no such file")
    if path.is_dir():
        raise TraceError(path, "is a folder, not a trace file")
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as e:
        raise TraceError(path, f"cannot be read ({e.strerror})") from None
    if size == 0:
        raise TraceError(path, "is empty")
    if not header.startswith(SQLITE_MAGIC):
        if header.strip(b"\x00") == b"":
            raise TraceError(path, "has a zeroed header (an interrupted nsys export?)")
        raise TraceError(path, "is not a SQLite database")
    if len(header) < 100:
        raise TraceError(path, "is truncated (shorter than a SQLite header)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    change_counter = int.from_bytes(header[24:28], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    # The in-header page count is only trusted when it was written by the same change.
    if pages and valid_for == change_counter and size < pages * page_size:
        raise TraceError(path, f"is truncated ({size} of {pages * page_size} bytes)")
    if page_size < 512 or page_size & (page_size - 1):
        raise TraceError(path, "has a corrupt SQLite header")
    # SQLite keeps a database's journal beside the file a link leads to: both places are looked at
    side = leftover_write(path) or leftover_write(Path(os.path.realpath(path)))
    if side:
        raise TraceError(
            path,
            f"has a leftover {side} beside it (an interrupted write): open a copy, "
            f"or run `sqlite3 {shlex.quote(path.name)} .recover`",
        )


def read_into_polars(path: Path, queries: list[str]) -> Callable[[], pl.DataFrame]:
    """Start reading the rows of `queries` (connectorx runs them in parallel, one thread each)
    and return the function that waits for them as one polars frame. The read runs on a thread
    of its own, so the caller can load polars meanwhile (the table library's import is a third of
    a kernel summary's time; its GIL is free while connectorx reads). Without pyarrow: connectorx's
    Arrow arrays go to polars through the Arrow C data interface (its own polars return builds
    pyarrow tables first, and pyarrow's import, numpy's with it, costs more than a small read).
    Errors are connectorx's, raised by the returned function, as `SqliteSource.query`'s."""
    import threading  # here: a small answer, which never reads this way, starts no thread

    cx = _connectorx()
    url = connectorx_url(path)
    if not str(getattr(cx, "__version__", "")).startswith("0.4."):  # the pointers' layout below is 0.4's
        return lambda: cx.read_sql(url, queries, return_type="polars")
    got: list = []

    def read() -> None:
        try:
            got.append(cx._read_sql(url, "arrow", queries=queries))
        except BaseException as e:  # raised where the rows are waited for
            got.append(e)

    reader = threading.Thread(target=read, name="kview-read", daemon=True)
    reader.start()

    def frame() -> pl.DataFrame:
        # deferred: the caller loads polars while the rows are read
        import polars as pl

        reader.join()
        if isinstance(got[0], BaseException):
            raise got[0]
        names, batches = got[0]
        # each column of each batch is (ArrowArray*, ArrowSchema*), handed over to the reader,
        # which polars takes as (schema, array) and whose buffers it then owns
        return pl.DataFrame(
            [pl.Series._import_arrow_from_c(n, [(b[i][1], b[i][0]) for b in batches]) for i, n in enumerate(names)]
        )

    return frame


def return_freed_memory() -> None:
    """Hand the C allocator's free pages back to the system (glibc only; elsewhere nothing).

    connectorx makes a read's Arrow buffers with the C allocator (polars allocates with its
    own), and when polars frees them glibc keeps the pages in its arenas: 0.37 GiB held after
    the NVTX read of a dense trace (5.7M rows) was let go, counted in the process's memory
    while polars asks the system for more."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@cache
def _malloc_trim():
    import ctypes

    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no glibc (macOS, musl, Windows): nothing to trim
        return None


@cache
def _connectorx():
    """connectorx, loaded once (deferred: a small answer never needs it). Its connection pool logs
    each failed attempt to stderr through Rust's logger, which reads RUST_LOG when the module
    loads: off, since the one line kview prints says it instead."""
    os.environ["RUST_LOG"] = "off"
    import connectorx

    return connectorx


def in_rowid_order(got: pa.Table, key: str) -> pl.DataFrame:
    """A parallel read's rows in the order of integer column `key`. Each query read a rowid
    range in order, and its batches arrive in the order the threads finish them: put back in
    order by their first key, the rows need no sort (a sort, or a filter per part, copies every
    column, the NVTX texts included)."""
    import polars as pl
    import pyarrow as pa

    batches = [b for b in got.to_batches() if b.num_rows]
    batches.sort(key=lambda b: b.column(key)[0].as_py())
    df = pl.from_arrow(pa.Table.from_batches(batches, got.schema))  # as connectorx makes its polars frames
    assert isinstance(df, pl.DataFrame)
    return df if df[key].is_sorted() else df.sort(key)  # a part out of order, or parts overlapping


class SqliteSource:
    """One SQLite file opened read-only; tables and columns resolved once."""

    def __init__(self, path: str | os.PathLike):
        self.path = named(path).absolute()
        check_sqlite_file(self.path)
        self._url = connectorx_url(self.path)
        try:
            self.con = sqlite3.connect(sqlite_uri(self.path), uri=True, check_same_thread=False)
            # one thread at a time on the connection: a thread stepping a query holds SQLite's
            # lock and wants the GIL for the progress handler below, while another holding the
            # GIL reads its own rows' columns and wants SQLite's lock (the explorer's views read
            # one trace from several threads: they hung, each waiting for the other)
            self._one_at_a_time = threading.Lock()
            # Python runs signal handlers only between its own instructions: a callback every so
            # many SQLite steps lets Ctrl-C and SIGTERM end a long query
            self.con.set_progress_handler(_let_signals_in, PROGRESS_STEPS)
            rows = self.con.execute(
                "SELECT name, type, sql FROM sqlite_master WHERE type IN ('table','view')"
            ).fetchall()
        except sqlite3.DatabaseError as e:
            raise TraceError(self.path, f"is not a readable SQLite database ({e})") from None
        # only plain tables are read: a view (or a virtual table) runs the file's own SQL on every
        # read, a recursive one forever; nsys writes neither
        self.tables: set[str] = {
            name
            for name, kind, sql in rows
            if kind == "table" and not str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL")
        }
        self.not_tables: dict[str, str] = {
            name: "a view" if kind == "view" else "a virtual table" for name, kind, _ in rows if name not in self.tables
        }

    def has(self, table: str) -> bool:
        if table in self.not_tables:
            raise TraceError(
                self.path, f"holds {table} as {self.not_tables[table]}, not a table (nsys exports only tables)"
            )
        return table in self.tables

    def columns(self, table: str) -> list[str]:
        return self._columns.setdefault(table, self._read_columns(table))

    @cached_property
    def _columns(self) -> dict[str, list[str]]:
        return {}

    def _read_columns(self, table: str) -> list[str]:
        if not self.has(table):
            return []
        with self._one_at_a_time:
            return [r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')]

    def scalar(self, sql: str, params=()):
        try:
            with self._one_at_a_time:
                row = self.con.execute(sql, params).fetchone()
        except sqlite3.DatabaseError as e:
            raise self._query_error(e) from None
        return None if row is None else row[0]

    def rows(self, sql: str, params=()) -> list[tuple]:
        try:
            with self._one_at_a_time:
                return self.con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise self._query_error(e) from None

    def _query_error(self, e: sqlite3.DatabaseError) -> BaseException:
        if isinstance(e, sqlite3.OperationalError) and str(e) == "interrupted":
            # a signal handler raised inside the progress callback: that, not the file, ended the query
            return KeyboardInterrupt()
        return TraceError(self.path, f"cannot be queried ({e})")

    def read(self, table: str, columns: list[str], where: str | None = None) -> pl.DataFrame:
        """Selected columns of a table as a polars frame (empty frame when the table is absent)."""
        have = set(self.columns(table))
        cols = [c for c in columns if c in have]
        if not cols:
            import polars as pl

            return pl.DataFrame()
        sql = "SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{table}"'
        if where:
            sql += f" WHERE {where}"
        return self.query(sql)

    def read_rows_in_order(self, table: str, columns: list[str], where: str | None = None) -> pl.DataFrame:
        """Columns of a table in rowid order; large tables are read by several threads.

        Reading the same table twice with different columns gives aligned rows, so a
        column can be loaded only when a request first needs it.
        """
        have = set(self.columns(table)) | {"rowid"}
        cols = [c for c in columns if c in have]
        if not cols:
            import polars as pl

            return pl.DataFrame()
        sel = ", ".join('rowid AS "_rid"' if c == "rowid" else f'"{c}"' for c in cols)
        # two subqueries: SQLite answers a lone min() or max() of the rowid from the table's
        # b-tree, but both in one select scan every row (0.65 CPU s on 5.7M NVTX rows)
        lo, hi = self.rows(f'SELECT (SELECT min(rowid) FROM "{table}"), (SELECT max(rowid) FROM "{table}")')[0]
        parts = read_threads() if (hi or 0) >= PARTITION_ROWS else 1
        if parts > 1:
            # One query per rowid range, run in parallel by connectorx (its own partition_on
            # would read the bounds through a path that does not decode the file: URI).
            step = (hi - lo) // parts + 1
            cond = f" AND ({where})" if where else ""
            sql = [
                f'SELECT rowid AS "_kv_rid", {sel} FROM "{table}" WHERE rowid >= {a} AND rowid < {a + step}{cond}'
                for a in range(lo, hi + 1, step)
            ]
            df = in_rowid_order(self.read_arrow(sql), "_kv_rid").drop("_kv_rid")
            # what the reading threads and a sort's copy freed stays in the C allocator's arenas
            # (0.09-0.12 GB after 2.4M runtime calls on 16 threads), counted in the process's
            # memory through what follows: handed back
            return_freed_memory()
        else:
            df = self.query(f'SELECT {sel} FROM "{table}"' + (f" WHERE {where}" if where else ""))
        return df.rename({"_rid": "rowid"}) if "_rid" in df.columns else df

    def query(self, sql: str | list[str], **kw) -> pl.DataFrame:
        return self._read(sql, "polars", **kw)

    def read_arrow(self, sql: list[str]) -> pa.Table:
        """The queries' rows as connectorx's Arrow batches, one query per thread."""
        return self._read(sql, "arrow")

    def _read(self, sql: str | list[str], return_type: str, **kw):
        cx = _connectorx()
        try:
            return cx.read_sql(self._url, sql, return_type=return_type, **kw)
        except (KeyboardInterrupt, SystemExit, GeneratorExit):
            raise
        except BaseException as e:  # RuntimeError, or a pyo3 PanicException (a BaseException) on damage
            if is_out_of_memory(e):  # a thread or a buffer the reader could not get: not the file's fault
                raise OutOfMemory("reading " + self.path.name) from None
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise TraceError(self.path, f"cannot be read ({msg})") from None

    def close(self) -> None:
        with self._one_at_a_time:
            self.con.close()
