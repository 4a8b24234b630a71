"""Nsight Systems SQLite export (nsys 2022.1 .. 2026.2) -> normalized polars frames.

Every loader reads only the columns it names, tolerates tables and columns that a given nsys
version did not create (tables are created lazily), and returns frames with stable column
names and int64 nanosecond timestamps. Strings stay as StringIds ids until a report needs the
text, so grouping a million kernels never hashes a million strings.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import polars as pl

from kview.errors import TraceError
from kview.io.kineto_reader import profiler_clock
from kview.io.schema import (
    KERNEL,
    MEMCPY,
    MEMCPY_KIND_LABELS,
    MEMSET,
    NVTX,
    NVTX_COLUMNS,
    NVTX_DOMAIN_CREATE,
    NVTX_RANGE_TYPES,
    RUNTIME,
    TABLES,
)
from kview.io.sqlite_source import SqliteSource, in_rowid_order, read_threads

NSYS_MARKER_TABLES = (
    "StringIds",
    KERNEL,
    RUNTIME,
    NVTX,
    "EXPORT_META_DATA",
    "META_DATA_EXPORT",
    "TARGET_INFO_SESSION_START_TIME",
    "ANALYSIS_DETAILS",
)


def check_nsys(src: SqliteSource) -> None:
    if not any(src.has(t) for t in NSYS_MARKER_TABLES):
        raise TraceError(
            src.path, "is a SQLite database but not an Nsight Systems export (no StringIds, CUPTI or NVTX tables)"
        )


def metadata(src: SqliteSource) -> dict[str, str]:
    table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if src.has(t)), None)
    meta: dict[str, str] = {}
    if table:
        cols = src.columns(table)
        if "name" in cols and "value" in cols:
            meta = {str(k): str(v) for k, v in src.rows(f'SELECT name, value FROM "{table}"')}
    return meta


def strings(src: SqliteSource) -> pl.DataFrame:
    if not src.has("StringIds"):
        return pl.DataFrame(schema={"id": pl.Int64, "value": pl.String})
    df = src.read("StringIds", ["id", "value"])
    return df.with_columns(pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))


OWNER_IDS = ("global_tid", "global_pid")  # the thread and process a row belongs to


def read_columns(
    src: SqliteSource, key: str, names: list[str], where: tuple[str, list[int]] | None = None
) -> pl.DataFrame:
    """Normalized columns `names` of logical table `key`, in rowid order; with `where` (a
    column, its integer values), only the rows holding one of those values.

    Columns this export lacks come back as nulls of the right type; an absent table gives
    an empty frame with the requested schema.
    """
    table, spec = TABLES[key]
    by_name = {v[0]: (raw, v[1]) for raw, v in spec.items()}
    schema = {n: by_name[n][1] for n in names}
    if not src.has(table):
        return pl.DataFrame(schema=schema)
    have = set(src.columns(table))
    cond = None
    if where is not None:
        column = by_name[where[0]][0]
        if column not in have:  # a column the export lacks is null in every row: none match
            return pl.DataFrame(schema=schema)
        cond = f'"{column}" IN ({", ".join(str(int(v)) for v in where[1])})' if where[1] else "0"
    raw = [by_name[n][0] for n in names if by_name[n][0] in have]
    df = src.read_rows_in_order(table, raw, cond) if raw else None
    count = f'SELECT count(*) FROM "{table}"' + (f" WHERE {cond}" if cond else "")
    height = df.height if df is not None and df.width else (src.scalar(count) or 0)
    out = {}
    for n in names:
        r, dtype = by_name[n]
        if df is not None and r in df.columns:
            out[n] = _cast(src, table, df[r], dtype)
            if n in OWNER_IDS:  # a NULL thread or process id in the file: thread 0, not a null downstream
                out[n] = out[n].fill_null(0)
        else:
            out[n] = pl.Series(n, [None] * height, dtype=dtype)
    return pl.DataFrame(out, schema=schema)


def _cast(src: SqliteSource, table: str, col: pl.Series, dtype) -> pl.Series:
    """A column in kview's type; text where the schema has numbers is the file's damage."""
    try:
        return col.cast(dtype)
    except (pl.exceptions.PolarsError, ValueError, TypeError) as e:
        raise TraceError(
            src.path,
            f"has values of the wrong type in {table}.{col.name} "
            f"({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})",
        ) from None


def nvtx_events(src, part_rows: int = 500_000, threads: int | None = None) -> pl.DataFrame:
    """NVTX_EVENTS rows that matter for ranges and domain names (marks and categories dropped).

    Read in rowid parts of `part_rows`, `threads` parts per connectorx call (one thread each;
    `read_threads()` by default), each call's rows cast to kview's types while they are few.
    `text` stays a plain string column: the labels are keyed by hash
    (`nvtx_ranges.first_appearance`), and a dictionary of five million distinct op labels would
    cost more than the strings themselves.
    """
    schema: dict[str, pl.DataType | type[pl.DataType]] = {v[0]: v[1] for v in NVTX_COLUMNS.values()}
    if not src.has(NVTX):
        return pl.DataFrame(schema=schema)
    have = set(src.columns(NVTX)) | {"rowid"}
    cols = [c for c in NVTX_COLUMNS if c in have]
    types = ",".join(str(t) for t in NVTX_RANGE_TYPES + (NVTX_DOMAIN_CREATE,))
    hi = src.scalar(f"SELECT max(rowid) FROM {NVTX}") or 0
    parts = []
    # several parts per read, which connectorx runs on a thread each (SQLite decodes one row at a time)
    step, per_read = part_rows, threads or read_threads()
    for lo in range(0, hi + 1, step * per_read):
        starts = range(lo, lo + step * per_read, step)
        sql = [
            "SELECT " + ", ".join(cols) + f" FROM {NVTX} WHERE eventType IN ({types})"
            f" AND rowid >= {a} AND rowid < {a + step}"
            for a in starts
        ]
        df = in_rowid_order(src.read_arrow(sql), "rowid")
        if df.width == 0 or df.height == 0:
            continue
        exprs = [
            (
                (pl.col(raw).cast(dtype).fill_null(0) if name in OWNER_IDS else pl.col(raw).cast(dtype))
                if raw in df.columns
                else pl.lit(None, dtype=dtype)
            ).alias(name)
            for raw, (name, dtype) in NVTX_COLUMNS.items()
        ]
        try:
            parts.append(df.select(exprs))
        except (pl.exceptions.PolarsError, ValueError, TypeError) as e:
            raise TraceError(
                src.path,
                f"has values of the wrong type in {NVTX} "
                f"({str(e).splitlines()[0][:80] if str(e) else type(e).__name__})",
            ) from None
        del df
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts)


def nvtx_max_timestamp_of_read(src, frame: pl.DataFrame) -> tuple[int | None] | None:
    """`nvtx_max_timestamp` from `frame`, what `nvtx_events` read, where that is every row of
    NVTX_EVENTS (no mark nor category left out): (it,), else None. Rowids are distinct, so as many
    rows read as the rowids span is every row; the table's own scan is then not made again (0.9 s
    on 5.7M rows). A read that succeeded held integers alone in start and end."""
    if frame.height == 0 or not {"start", "end"} <= set(frame.columns):
        return None
    lo, hi = src.scalar(f"SELECT min(rowid) FROM {NVTX}"), src.scalar(f"SELECT max(rowid) FROM {NVTX}")
    if not (isinstance(lo, int) and isinstance(hi, int)) or frame.height != hi - lo + 1:
        return None
    return (frame.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).item(),)


def nvtx_max_timestamp(src) -> int | None:
    """max(max(start), max(end)) over all NVTX_EVENTS: what nsys substitutes for a NULL end."""
    if not src.has(NVTX):
        return None
    # not SQLite's max(a, b): that is NULL when every end is (all ranges left open)
    found = src.rows(f"SELECT max(start), max(end) FROM {NVTX}")[0]
    if any(v is not None and not isinstance(v, int) for v in found):  # text sorts above numbers: damage
        found = src.rows(
            "SELECT max(CASE WHEN typeof(start) = 'integer' THEN start END), "
            f"max(CASE WHEN typeof(end) = 'integer' THEN end END) FROM {NVTX}"
        )[0]
    ints = [v for v in found if isinstance(v, int)]
    return max(ints) if ints else None


def session_ns(src) -> int | None:
    """The session's length (ANALYSIS_DETAILS.duration): event times count from its start."""
    if not src.has("ANALYSIS_DETAILS") or "duration" not in src.columns("ANALYSIS_DETAILS"):
        return None
    d = src.scalar("SELECT max(duration) FROM ANALYSIS_DETAILS")
    return int(d) if d else None


def session_start_utc_ns(src) -> int | None:
    """The UTC time (ns since the epoch) of the session's time zero, as nsys records it."""
    table = "TARGET_INFO_SESSION_START_TIME"
    if not src.has(table) or "utcEpochNs" not in src.columns(table):
        return None
    v = src.scalar(f"SELECT max(utcEpochNs) FROM {table}")
    return int(v) if v else None


def first_event(src) -> int:
    """The earliest start of any GPU op, CUDA API call or NVTX range (0 when there is none)."""
    firsts = [src.scalar(f"SELECT min(start) FROM {t}") for t in (KERNEL, RUNTIME, MEMCPY, MEMSET, NVTX) if src.has(t)]
    found = [int(v) for v in firsts if v is not None]
    return min(found) if found else 0


def memcpy_kind_labels(src) -> dict[int, str]:
    if src.has("ENUM_CUDA_MEMCPY_OPER"):
        return {int(k): str(v) for k, v in src.rows("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER")}
    return dict(MEMCPY_KIND_LABELS)


def threads(src) -> pl.DataFrame:
    if not src.has("ThreadNames"):
        return pl.DataFrame(schema={"global_tid": pl.Int64, "name_id": pl.Int64})
    return src.read("ThreadNames", ["globalTid", "nameId"]).select(
        pl.col("globalTid").cast(pl.Int64).alias("global_tid"), pl.col("nameId").cast(pl.Int64).alias("name_id")
    )


def processes(src) -> pl.DataFrame:
    if not src.has("PROCESSES"):
        return pl.DataFrame(schema={"global_pid": pl.Int64, "pid": pl.Int64, "name": pl.String})
    return src.read("PROCESSES", ["globalPid", "pid", "name"]).select(
        pl.col("globalPid").cast(pl.Int64).alias("global_pid"),
        pl.col("pid").cast(pl.Int64),
        pl.col("name").cast(pl.String),
    )


def devices(src) -> pl.DataFrame:
    if not src.has("TARGET_INFO_GPU"):
        return pl.DataFrame(schema={"id": pl.Int64, "name": pl.String})
    want = [
        "id",
        "name",
        "busLocation",
        "totalMemory",
        "smCount",
        "clockRate",
        "memoryBandwidth",
        "computeMajor",
        "computeMinor",
        "chipName",
    ]
    return src.read("TARGET_INFO_GPU", want)


class NsysSource:
    """An Nsight Systems export (or a kview capture in the same schema), read column by column
    through one read-only SQLite connection. Opening it checks the file once: a complete SQLite
    database (sqlite_source.check_sqlite_file) holding an nsys export's tables."""

    persist_frames = True

    def __init__(self, path: Path):
        self.path = path
        self.db = SqliteSource(path)
        check_nsys(self.db)
        self._nvtx_max: tuple[int | None] | None = None  # (nvtx_max_timestamp,) once known

    def has(self, table: str) -> bool:
        return self.db.has(table)

    def metadata(self) -> dict[str, str]:
        return metadata(self.db)

    @cached_property
    def _profiler_clock(self) -> bool:
        """A trace kview wrote from torch.profiler (`kview capture --backend torch`): its times
        are the profiler's clock readings, not offsets from a session start."""
        return self.metadata().get("CAPTURE_BACKEND") == "torch"

    @cached_property
    def _origin(self) -> int:
        return first_event(self.db) if self._profiler_clock else 0

    def origin(self) -> int:
        return self._origin  # nsys exports count from the session start already

    def clock(self) -> tuple[str, int] | None:
        if self._profiler_clock:
            return profiler_clock(self.metadata().get("KINETO_BASE_TIME_NS"), self._origin)
        utc = session_start_utc_ns(self.db)
        return None if utc is None else ("UTC", utc)

    def read_columns(self, key: str, names: list[str], where: tuple[str, list[int]] | None = None) -> pl.DataFrame:
        return read_columns(self.db, key, names, where)

    def row_count(self, key: str) -> int:
        # SQLite counts a table's rows from its b-tree's pages, decoding none of them
        table = TABLES[key][0]
        return int(self.db.scalar(f'SELECT count(*) FROM "{table}"') or 0) if self.db.has(table) else 0

    def strings(self) -> pl.DataFrame:
        return strings(self.db)

    @cached_property
    def _string_count(self) -> int:
        return int(self.db.scalar("SELECT count(*) FROM StringIds") or 0) if self.has("StringIds") else 0

    def string_count(self) -> int:
        return self._string_count

    def strings_for(self, ids: pl.Series) -> pl.DataFrame:
        parts = []
        for i in range(0, len(ids), 20_000):
            chunk = ",".join(str(v) for v in ids[i : i + 20_000].to_list())
            parts.append(self.db.query(f"SELECT id, value FROM StringIds WHERE id IN ({chunk})"))
        if not parts:
            return pl.DataFrame(schema={"id": pl.Int64, "value": pl.String})
        return pl.concat(parts).select(pl.col("id").cast(pl.Int64), pl.col("value").cast(pl.String))

    def nvtx_events(self) -> pl.DataFrame:
        frame = nvtx_events(self.db)
        if self._nvtx_max is None:
            self._nvtx_max = nvtx_max_timestamp_of_read(self.db, frame)
        return frame

    def nvtx_max_timestamp(self) -> int | None:
        if self._nvtx_max is None:
            self._nvtx_max = (nvtx_max_timestamp(self.db),)
        return self._nvtx_max[0]

    def session_ns(self) -> int | None:
        return session_ns(self.db)

    def memcpy_kind_labels(self) -> dict[int, str]:
        return memcpy_kind_labels(self.db)

    def threads(self) -> pl.DataFrame:
        return threads(self.db)

    def processes(self) -> pl.DataFrame:
        return processes(self.db)

    def devices(self) -> pl.DataFrame:
        return devices(self.db)

    def close(self) -> None:
        self.db.close()
