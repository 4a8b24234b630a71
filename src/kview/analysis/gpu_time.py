"""GPU time of the work launched inside time windows.

A window (an NVTX range, a phase, a compare column) owns every GPU op whose launch call
started inside it, on any thread: backward work launched by the autograd thread lands in the
range open on the main thread. Prefix sums over launch times answer any number of windows
with two sorted searches each, never an interval loop.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from kview.analysis.attribution import launched_ops
from kview.trace import Trace


def launch_timeline(trace: Trace) -> pl.DataFrame:
    """Idx, launch time `t` and duration of every GPU op, sorted by `t` (ops whose launch call
    is outside the trace's window use their own start)."""
    return trace.memo("launch_timeline", lambda: _timeline(trace))


def _timeline(trace: Trace) -> pl.DataFrame:
    ops = launched_ops(trace)
    if ops.height == 0:
        return pl.DataFrame(schema={"Idx": pl.Int64, "t": pl.Int64, "dur": pl.Int64})
    return ops.select("Idx", pl.coalesce("r_start", "start").alias("t"),
                      (pl.col("end") - pl.col("start")).alias("dur")).sort("t")


def gpu_time_in(trace: Trace, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(GPU ns, op count) launched within each [start, end] window."""
    tl = launch_timeline(trace)
    t = tl["t"].to_numpy()
    csum = np.concatenate([[0], np.cumsum(tl["dur"].to_numpy(), dtype=np.int64)])
    lo = np.searchsorted(t, starts, side="left")
    hi = np.searchsorted(t, ends, side="right")
    return csum[hi] - csum[lo], hi - lo
