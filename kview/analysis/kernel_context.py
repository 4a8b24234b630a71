"""The context of one GPU op: the API call that launched it (name, thread, CPU start, launch
latency = GPU start - API start), the NVTX ranges open around that call, and the ops just
before and after it on the same stream. What a user looks up when one kernel is slow or late."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute, launched_ops
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
    return KernelContext(kernel, _launch(trace, op), _ranges(trace, op), _around(a, kernel, around))


def _launch(trace: Trace, op: dict) -> dict | None:
    if op.get("r_start") is None:
        return None
    calls = trace.columns("runtime", ["start", "global_tid", "correlation", "name_id"]).filter(
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
    r = nv.projection_ranges(trace).filter(
        (pl.col("global_tid") == op["global_tid"]) & (pl.col("start") <= op["r_start"]) & (pl.col("end") >= op["r_end"])
    )
    r = nv.with_names(trace, r.sort(["start", "end"], descending=[False, True]))
    return [n.split(":", 1)[-1] for n in r["name"].to_list()]


def _around(a: pl.DataFrame, kernel: dict, n: int) -> pl.DataFrame:
    """`n` ops before and after on the same device and stream, in start order; Offset is the
    start relative to the op's own, Gap the idle time since the previous op on the stream ended."""
    s = (
        a.filter((pl.col("Device") == kernel["Device"]) & (pl.col("Stream") == kernel["Stream"]))
        .select("Idx", "Start (ns)", "Duration (ns)", "Kernel")
        .sort("Start (ns)")
    )
    s = s.with_columns(
        (pl.col("Start (ns)") - (pl.col("Start (ns)") + pl.col("Duration (ns)")).shift(1)).alias("Gap (ns)")
    )
    pos = int(s.with_row_index("i").filter(pl.col("Idx") == kernel["Idx"])["i"][0])
    part = s.slice(max(pos - n, 0), min(pos, n) + 1 + n)
    return part.select(
        "Idx", (pl.col("Start (ns)") - kernel["Start (ns)"]).alias("Offset (ns)"), "Duration (ns)", "Gap (ns)", "Kernel"
    )
