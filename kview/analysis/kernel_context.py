"""The context of one GPU op: the API call that launched it (name, thread, CPU start, launch
latency = GPU start - API start), the NVTX ranges open around that call, and the ops just
before and after it on the same stream. What a user looks up when one kernel is slow or late."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import GPU_OP_TABLES, LAUNCH_COLUMNS, attribute, launch_of, launched_ops
from kview.analysis.summary_stats import strip_version_suffix
from kview.trace import Trace

TID_MASK = 0xFFFFFF


@dataclass(frozen=True)
class KernelContext:
    kernel: dict  # the op's row of the attributed table
    launch: dict | None  # API, thread, tid, CPU start/end, latency (ns); None: no launch call recorded
    ranges: list[str]  # NVTX ranges open around the launch on its thread, outer to inner
    around: pl.DataFrame  # the ops before and after on the stream (Idx, Offset, Kernel, Duration, Gap)


def kernel_context(trace: Trace, idx: int, around: int = 5) -> KernelContext:
    """Context of the GPU op numbered `idx` (the attributed table's Idx)."""
    a = attribute(trace)
    row = a.filter(pl.col("Idx") == idx)
    if row.height == 0:
        raise ValueError(f"no GPU op {idx} in {trace.name}")
    kernel = row.row(0, named=True)
    op = launched_ops(trace).filter(pl.col("Idx") == idx).row(0, named=True)
    calls = trace.columns("runtime", CALL_COLUMNS)
    return KernelContext(kernel, _launch(trace, op, calls), _ranges(trace, op), _around(a, kernel, around))


# the runtime calls' columns a launch reads: those launch_of matches by, and the call's name
CALL_COLUMNS = [*LAUNCH_COLUMNS, "name_id"]


def kernel_context_in_part(
    trace: Trace,
    idx: int,
    attributed: Path | bytes,
    ranges: Callable[[str], Path | bytes | None],
    around: int = 5,
) -> KernelContext:
    """kernel_context of a trace whose tables are read in part, equal to it: the op's row and
    its stream's from the attributed table's Parquet (`attribute`'s file or bytes), its launch
    of the runtime calls of its correlation id alone, the ranges on its thread of the labelled
    ranges' Parquet and the names of those alone (`ranges(part)`: nv.labelled_ranges' frame
    `part`, labelled or names, or None: then as kernel_context reads them). What the in-memory
    path reads whole (every op, runtime call and range) is seconds and gigabytes on a
    million-kernel trace."""
    a = pl.scan_parquet(attributed)
    row = a.filter(pl.col("Idx") == idx).collect()
    if row.height == 0:
        raise ValueError(f"no GPU op {idx} in {trace.name}")
    kernel = row.row(0, named=True)
    op, calls = _launched_op(trace, kernel)
    return KernelContext(kernel, _launch(trace, op, calls), _ranges_read(trace, op, ranges), _around(a, kernel, around))


def _launched_op(trace: Trace, kernel: dict) -> tuple[dict, pl.DataFrame]:
    """(the op of attributed row `kernel` as launched_ops gives it: start, correlation, r_start,
    r_end, global_tid; the runtime calls of its correlation id), of the rows of that id alone,
    its launch matched by launched_ops' own rule (`launch_of`)."""
    start, corr = kernel["Start (ns)"], kernel["Correlation"]
    op = {"start": start, "correlation": corr, "r_start": None, "r_end": None, "global_tid": None}
    none = pl.DataFrame(schema={c: pl.Int64 for c in CALL_COLUMNS})
    if corr is None:
        return op, none
    cols = ["start", "device", "stream", "correlation", "global_pid"]
    same = (pl.col("start") == start) & (pl.col("device") == kernel["Device"]) & (pl.col("stream") == kernel["Stream"])
    ops = [
        trace.rows_where(key, cols, "correlation", [corr], keep=False).filter(same)
        for key, table in GPU_OP_TABLES.items()
        if trace.has(table)
    ]
    mine = pl.concat(ops, how="vertical_relaxed").head(1) if ops else None
    if mine is None or mine.height == 0:
        return op, none
    calls = trace.rows_where("runtime", CALL_COLUMNS, "correlation", [corr], keep=False)
    launch = launch_of(mine, calls.select(LAUNCH_COLUMNS)).row(0, named=True)
    return {**op, **launch}, calls


def _launch(trace: Trace, op: dict, calls: pl.DataFrame) -> dict | None:
    """The launch call of `op` (a row of launched_ops), named from `calls` (runtime calls, CALL_COLUMNS)."""
    if op.get("r_start") is None:
        return None
    calls = calls.filter(
        (pl.col("correlation") == op["correlation"])
        & (pl.col("start") == op["r_start"])
        & (pl.col("global_tid") == op["global_tid"])
    )
    name = None
    if calls.height:
        named = trace.with_strings(calls.head(1), "name_id", "API")
        name = named.select(strip_version_suffix(pl.col("API")))["API"][0]
    tid = op["global_tid"]
    thread = trace.with_strings(trace.threads.filter(pl.col("global_tid") == tid), "name_id", "thread")
    return {
        "API": name or "?",
        "Thread": thread["thread"][0] if thread.height else None,
        "TID": None if tid is None else int(tid) & TID_MASK,
        "CPU start (ns)": op["r_start"],
        "CPU end (ns)": op["r_end"],
        "Launch latency (ns)": op["start"] - op["r_start"],
    }


def _ranges(trace: Trace, op: dict) -> list[str]:
    """Every NVTX range (op markers included) open around the launch call on its thread."""
    if op.get("r_start") is None or not trace.has("NVTX_EVENTS"):
        return []
    r = nv.projection_ranges(trace).filter(_around_call(op))
    return _named(nv.with_names(trace, _outer_first(r)))


def _ranges_read(trace: Trace, op: dict, read: Callable[[str], Path | bytes | None]) -> list[str]:
    """_ranges of the labelled ranges and their names read in part (`read`: kernel_context_in_part's
    `ranges`), each read and let go in turn: the ranges of the call's thread that may be open
    around it, projection_ranges' rules applied to those alone."""
    if op.get("r_start") is None or not trace.has("NVTX_EVENTS"):
        return []
    source = read("labelled")
    if source is None:
        return _ranges(trace, op)
    labelled = pl.scan_parquet(source)
    maybe = (pl.col("end") >= op["r_end"]) | pl.col("end").is_null()
    near = (pl.col("global_tid") == op["global_tid"]) & (pl.col("start") <= op["r_start"]) & maybe
    r = labelled.filter(near & nv.ONE_THREAD).collect()
    if r["end"].null_count():
        r = r.with_columns(nv.ended(nv.last_timestamp(labelled)))
    del labelled, source
    r = _outer_first(r.drop("other_thread").filter(_around_call(op)))
    source = read("names")
    table = None
    if source is not None:
        codes = r["name_code"].unique().implode()
        table = pl.scan_parquet(source).filter(pl.col("name_code").is_in(codes)).collect()
    return _named(nv.with_names(trace, r, table=table))


def _around_call(op: dict) -> pl.Expr:
    """Projection ranges open around the launch call of `op` on its thread."""
    return (
        (pl.col("global_tid") == op["global_tid"]) & (pl.col("start") <= op["r_start"]) & (pl.col("end") >= op["r_end"])
    )


def _outer_first(r: pl.DataFrame) -> pl.DataFrame:
    return r.sort(["start", "end"], descending=[False, True])


def _named(r: pl.DataFrame) -> list[str]:
    return [n.split(":", 1)[-1] for n in r["name"].to_list()]


def _around(a: pl.DataFrame | pl.LazyFrame, kernel: dict, n: int) -> pl.DataFrame:
    """`n` ops before and after on the same device and stream, in start order; Offset is the
    start relative to the op's own, Gap the idle time since the previous op on the stream ended."""
    # the stream's times first, the names of the few ops shown alone (a large trace's stream
    # is a million ops: their names are most of what its columns hold)
    s = (
        a.lazy()
        .filter((pl.col("Device") == kernel["Device"]) & (pl.col("Stream") == kernel["Stream"]))
        .select("Idx", "Start (ns)", "Duration (ns)")
        .collect()
        .sort("Start (ns)")
    )
    s = s.with_columns(
        (pl.col("Start (ns)") - (pl.col("Start (ns)") + pl.col("Duration (ns)")).shift(1)).alias("Gap (ns)")
    )
    pos = int(s.with_row_index("i").filter(pl.col("Idx") == kernel["Idx"])["i"][0])
    part = s.slice(max(pos - n, 0), min(pos, n) + 1 + n)
    names = a.lazy().filter(pl.col("Idx").is_in(part["Idx"].implode())).select("Idx", "Kernel").collect()
    part = part.join(names, on="Idx", how="left", maintain_order="left")
    return part.select(
        "Idx", (pl.col("Start (ns)") - kernel["Start (ns)"]).alias("Offset (ns)"), "Duration (ns)", "Gap (ns)", "Kernel"
    )
