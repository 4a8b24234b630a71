"""`kview stats TRACE -r cuda_gpu_kern_sum` of an nsys export, answered straight from SQLite without
the trace model: a small trace with the standard library (no polars: on a trace of a few thousand
kernels importing the table library costs more than the whole answer; issue 28: a 3k-kernel summary
in 0.3 s), a large one from the three kernel columns alone, read by connectorx on two threads into
polars without pyarrow or numpy and grouped there with the report's own expressions (issue 28: the
summary of 1.1M kernels in at most 0.35x of SQLite's own GROUP BY). A large trace whose kernel
columns are in the frame cache is left to the columnar path, which reads them from there.

The numbers are those of reports.gpu_kernels.cuda_gpu_kern_sum, computed the same way: exact
integer totals, avg = total / count in doubles, the median of an even count the mean of the two
middle values, SQLite's round(x, 1), ORDER BY total DESC, count, name; the standard deviation is
the exact sample deviation rounded once (a large trace's: the report's own polars aggregate). The
document is the one render writes (the same table layout, table_text; nsys's CSV quoting). Anything
this path does not handle exactly as the columnar one (a large trace with its kernels cached, a
damaged or unusual file, impossible rows the columnar path warns about, -o, other formats, several
reports) is left to it: `answer` returns None and the command
goes on as before, so every error and every remark is still said in one place.
"""

from __future__ import annotations

import math
import sqlite3
import sys
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from pathlib import Path
from typing import cast

from kview.errors import OutOfMemory, TraceError, is_out_of_memory
from kview.io.converted import REPORT_SUFFIXES
from kview.io.paths import named
from kview.io.sqlite_source import SQLITE_MAGIC, check_sqlite_file, read_into_polars, sqlite_uri
from kview.output.table_text import table_text
from kview.output.visible import visible_lines

# Above this many kernels a read by connectorx on several threads and polars' group-by are faster
# than a Python loop over the rows, their imports included.
QUICK_ROWS = 50_000
FORMATS = ("table", "csv")
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
TITLE = "CUDA GPU Kernel Summary"
NAME = "cuda_gpu_kern_sum"
COLUMNS = [
    "Time (%)",
    "Total Time (ns)",
    "Instances",
    "Avg (ns)",
    "Med (ns)",
    "Min (ns)",
    "Max (ns)",
    "StdDev (ns)",
    "Name",
]
# a float at or past this prints in exponent form in one library and not the other: not ours
LARGEST_FLOAT = 1e15


def answer(args) -> int | None:
    """The command's exit code when this path answered it; None: the columnar path answers."""
    if args.command != "stats" or getattr(args, "output", None) or args.format not in FORMATS:
        return None
    if [n.strip() for n in (args.report or "").split(",") if n.strip()] != [NAME]:
        return None
    doc = document(named(args.trace), args.format, use_cache=not getattr(args, "no_cache", False))
    if doc is None:
        return None
    binary = getattr(sys.stdout, "buffer", None)
    if args.format == "table" or binary is None:  # as cmd_stats writes a table: through the text stream
        sys.stdout.write(doc)
        return 0
    sys.stdout.flush()  # as render.emit writes CSV: UTF-8 bytes
    binary.write(doc.encode())
    binary.flush()
    return 0


def document(path: Path, fmt: str, width: int | None = None, use_cache: bool = False) -> str | None:
    """What `kview stats PATH -r cuda_gpu_kern_sum -f FMT` prints (a table fitted to `width`,
    None: the terminal's), or None when this path does not answer for this trace (`use_cache`:
    nor for a large one whose kernel columns are cached)."""
    rows = _kernel_summary(path, use_cache)
    if rows is None:
        return None
    cells = [[_text(v) for v in r] for r in rows]
    if fmt == "table":
        numeric = [True] * (len(COLUMNS) - 1) + [False]
        return f"** {TITLE} ({NAME}):\n\n" + visible_lines(table_text(COLUMNS, numeric, cells, width))
    return visible_lines(_csv(COLUMNS, cells))


def _text(v) -> str | None:
    """A cell as polars casts it to text (integers and shortest round-trip floats agree there)."""
    return None if v is None else str(v)


def _csv(columns: list[str], cells: list[list[str | None]], sep: str = ",") -> str:
    """nsys's CSV as render.write_csv writes it: a cell quoted only when it holds the separator or
    a line break (quotes doubled inside), NULL, an empty text and kview's `-` (missing) empty."""

    def cell(v: str | None) -> str:
        if v is None or v == "-":
            return ""
        return '"' + v.replace('"', '""') + '"' if sep in v or "\n" in v else v

    lines = [sep.join(f'"{c}"' if sep in c else c for c in columns)]
    lines += [sep.join(cell(v) for v in r) for r in cells]
    return "\n".join(lines) + "\n"


def exact_round(x: float, digits: int = 1) -> float:
    return float(Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def sqlite_round(x: float) -> float:
    """One value as analysis.summary_stats.sqlite_round makes it (SQLite's round(x, 1)), operation for operation."""
    if not math.isfinite(x):
        return x
    y = abs(x) * 10
    if y - math.floor(y) == 0.5:  # looks like a tie: decided exactly
        return exact_round(x)
    q = float(math.floor(y + 0.5)) / 10
    return q * (-1.0 if x < 0 else 1.0)


def _plain_tables(con: sqlite3.Connection) -> set[str] | None:
    """The plain tables of the file; None when a table kview reads here is a view or virtual."""
    rows = con.execute("SELECT name, type, sql FROM sqlite_master WHERE type IN ('table','view')").fetchall()
    plain = {
        n
        for n, kind, sql in rows
        if kind == "table" and not str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL")
    }
    others = {n for n, _, _ in rows} - plain
    read = {KERNEL, "StringIds", "ANALYSIS_DETAILS", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"}
    read |= {"META_DATA_EXPORT", "EXPORT_META_DATA"}
    return None if others & read else plain


def _columns(con: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}


def _kernel_summary(p: Path, use_cache: bool = False) -> list[tuple] | None:
    """The report's rows, or None when the columnar path is to answer."""

    try:
        if p.suffix.lower() in REPORT_SUFFIXES or not p.is_file():
            return None
        with open(p, "rb") as f:
            if not f.read(len(SQLITE_MAGIC)).startswith(SQLITE_MAGIC):
                return None
        check_sqlite_file(p)
    except (OSError, TraceError):
        return None
    try:
        con = sqlite3.connect(sqlite_uri(p.absolute()), uri=True)
    except sqlite3.Error:
        return None
    try:
        return _summary(con, p.absolute(), use_cache)
    except (sqlite3.Error, ValueError, TypeError, OverflowError):
        return None  # whatever the file holds, the columnar path says it in its words
    finally:
        con.close()


def _summary(con: sqlite3.Connection, path: Path, use_cache: bool) -> list[tuple] | None:
    tables = _plain_tables(con)
    if tables is None or KERNEL not in tables or "StringIds" not in tables:
        return None
    if not {"start", "end", "demangledName"} <= _columns(con, KERNEL):
        return None
    for meta in ("META_DATA_EXPORT", "EXPORT_META_DATA"):  # a torch.profiler capture counts from its first event
        if meta in tables and {"name", "value"} <= _columns(con, meta):
            if con.execute(f"SELECT 1 FROM {meta} WHERE name = 'CAPTURE_BACKEND'").fetchone():
                return None
    last = con.execute(f"SELECT max(rowid) FROM {KERNEL}").fetchone()[0]
    if not isinstance(last, int):
        return None
    session = None
    if "ANALYSIS_DETAILS" in tables and "duration" in _columns(con, "ANALYSIS_DETAILS"):
        d = con.execute("SELECT max(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
        if d is not None and not isinstance(d, int):
            return None
        session = d or None
    # impossible rows make the columnar path warn on stderr (analysis.sanity): it answers those
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in tables:
            if not {"start", "end"} <= _columns(con, table):
                return None
            bad = "end < start" + ("" if session is None else f" OR start < 0 OR end > {int(session)}")
            if con.execute(f"SELECT 1 FROM {table} WHERE {bad} LIMIT 1").fetchone():
                return None
    if last > QUICK_ROWS:
        if use_cache and _cached(path):
            return None
        stats = _grouped(path, last, session)
    else:
        stats = _looped(con, session)
    if not stats:
        return None
    names = dict(con.execute(f"SELECT id, value FROM StringIds WHERE id IN ({','.join(str(g[0]) for g in stats)})"))
    if any(type(names.get(g[0])) is not str for g in stats):
        return None
    grand = float(sum(g[1] for g in stats))
    if grand == 0:
        return None
    rows = []
    for name_id, total, n, avg, med, least, most, std in stats:
        floats = [sqlite_round(float(total) * 100.0 / grand), sqlite_round(avg), sqlite_round(med), sqlite_round(std)]
        if any(not math.isfinite(v) or abs(v) >= LARGEST_FLOAT for v in floats):
            return None
        pct, avg_r, med_r, std_r = floats
        rows.append((pct, total, n, avg_r, med_r, least, most, std_r, names[name_id]))
    rows.sort(key=lambda r: (-r[1], r[2], r[8]))
    return rows


# one kernel name's statistics: name id, total, count, avg, median, min, max, standard deviation
Stats = tuple[int, int, int, float, float, int, int, float]


def _looped(con: sqlite3.Connection, session: int | None) -> list[Stats] | None:
    """Every kernel name's statistics, by a Python loop over the rows; None: a row the columnar
    path reads otherwise (not an integer) or warns about (impossible)."""
    groups: dict[int, list[int]] = {}
    for name_id, start, end in con.execute(f"SELECT demangledName, start, end FROM {KERNEL}"):
        if type(name_id) is not int or type(start) is not int or type(end) is not int or end < start:
            return None
        if session is not None and (start < 0 or end > session):
            return None
        groups.setdefault(name_id, []).append(end - start)
    out = []
    for name_id, durations in groups.items():
        durations.sort()
        n = len(durations)
        total = sum(durations)
        med = float(durations[n // 2]) if n % 2 else (durations[n // 2 - 1] + durations[n // 2]) / 2
        if n >= 2:
            s1 = total
            s2 = sum(d * d for d in durations)
            std = math.sqrt(float(Fraction(n * s2 - s1 * s1, n * (n - 1))))
        else:
            std = 0.0
        out.append((name_id, total, n, float(total) / n, med, durations[0], durations[-1], std))
    return out


def _cached(path: Path) -> bool:
    """Whether the frame cache holds the kernel columns the columnar report reads."""
    # deferred: the cache module loads polars, which a small answer never needs
    from kview.io import cache

    return cache.has(path, [f"kernels.{c}" for c in ("start", "end", "name_id")])


def _grouped(path: Path, last: int, session: int | None) -> list[Stats] | None:
    """Every kernel name's statistics from the three kernel columns, read by connectorx in two
    rowid ranges (two threads) into polars and grouped there with the report's own aggregates
    (the same values, float for float); None as `_looped`."""
    half = last // 2 + 1
    cols = f'rowid AS "_kv_rid", start, end, demangledName FROM {KERNEL}'
    try:
        rows = read_into_polars(path, [f"SELECT {cols} WHERE rowid < {half}", f"SELECT {cols} WHERE rowid >= {half}"])
        # deferred: polars loads only for a large trace, while its rows are read
        import polars as pl

        from kview.analysis.summary_stats import stats_aggs

        k = rows()
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as e:  # text for a time, damage: the columnar path says it in its words
        if is_out_of_memory(e):  # said now: the columnar path would wait for the same memory again
            raise OutOfMemory("reading " + path.name) from None
        return None
    if k.height == 0 or any(k.schema.get(c) != pl.Int64 for c in ("_kv_rid", "start", "end", "demangledName")):
        return None
    if k.null_count().sum_horizontal().item():
        return None
    if not k["_kv_rid"].is_sorted():  # in rowid order, as the columnar reader hands the rows on
        k = k.sort("_kv_rid")
    bad = pl.col("end") < pl.col("start")
    if session is not None:
        bad = bad | (pl.col("start") < 0) | (pl.col("end") > session)
    if k.select(bad.any()).item():
        return None
    g = k.select(pl.col("demangledName").alias("name_id"), (pl.col("end") - pl.col("start")).alias("dur"))
    g = g.group_by("name_id").agg(stats_aggs("dur"))
    stats = ["name_id", "total", "num", "avg", "med", "min", "max", "stddev"]
    return [cast(Stats, r) for r in g.select(stats).iter_rows()]
