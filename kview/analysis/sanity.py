"""Rows a trace cannot hold: GPU work that ends before it starts, or that lies outside the
session the export recorded (nsys's ANALYSIS_DETAILS duration; a torch.profiler trace has no
such bound). They are counted and named, never folded silently into percentages: the Overview
leaves them out of what it computes and says how many; `stats` keeps nsys's numbers (nsys
folds them in) and says so on stderr."""

from __future__ import annotations

import polars as pl

from kview.derived import derived
from kview.trace import Trace

# logical table, nsys table, what its rows are called
GPU_TABLES = (
    ("kernels", "CUPTI_ACTIVITY_KIND_KERNEL", "kernels"),
    ("memcpy", "CUPTI_ACTIVITY_KIND_MEMCPY", "memory copies"),
    ("memset", "CUPTI_ACTIVITY_KIND_MEMSET", "memory sets"),
)
# each logical table's rows as the GPU ops name their kind
OP_KINDS = {"kernels": "kernel", "memcpy": "memcpy", "memset": "memset"}


def impossible(start: pl.Expr, end: pl.Expr, trace: Trace) -> pl.Expr:
    """True where a row [start, end] (from the trace's time zero) cannot be: it ends before it
    starts, or falls outside the recorded session."""
    bad = end < start
    window = trace.session_ns
    if window is not None:
        bad = bad | (start < 0) | (end > window)
    return bad.fill_null(False)


@derived
def counts(trace: Trace) -> dict[str, tuple[int, int]]:
    """{what the rows are: (ending before they start, outside the session)} for the GPU tables
    that hold any."""
    from kview.analysis.attribution import gpu_ops  # deferred: `stats` asks this without the GPU ops

    # the GPU ops where made hold every row's start and end (a command may have let the raw
    # columns go once they were joined: not read again)
    ops = trace.store.peek(gpu_ops)
    out = {}
    for key, table, what in GPU_TABLES:
        if not trace.has(table):
            continue
        if ops is None:
            r = trace.columns(key, ["start", "end"])
        else:
            r = ops.filter(pl.col("kind") == OP_KINDS[key]).select("start", "end")
        backwards = pl.col("end") < pl.col("start")
        got = r.select(
            backwards.sum().alias("b"),
            (impossible(pl.col("start"), pl.col("end"), trace) & ~backwards).sum().alias("o"),
        ).row(0)
        if got[0] or got[1]:
            out[what] = (int(got[0]), int(got[1]))
    return out


def warning(trace: Trace) -> str | None:
    """One sentence on the impossible rows, or None when there are none."""
    parts = []
    for what, (backwards, outside) in counts(trace).items():
        if backwards:
            parts.append(f"{backwards:,} {what} end before they start")
        if outside:
            parts.append(f"{outside:,} {what} lie outside the recorded session")
    if not parts:
        return None
    return "impossible rows: " + "; ".join(parts)
