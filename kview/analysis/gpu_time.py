"""GPU time of the work launched inside time windows.

A window (an NVTX range, a phase, a compare column) owns every GPU op whose launch call
started inside it, on any thread: backward work launched by the autograd thread lands in the
range open on the main thread. Prefix sums over launch times answer any number of windows
with two sorted searches each, never an interval loop.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kview.analysis.attribution import gpu_ops, launched_ops
from kview.analysis.summary_stats import even_bounds, in_slices, small_blocks
from kview.derived import derived
from kview.io.schema import PID_MASK
from kview.trace import Trace

# gpu_time_in's windows are searched in slices of this many, up to SEARCH_THREADS at once
WINDOWS_PER_SLICE = 1 << 19
SEARCH_THREADS = 8


# kept in the frame cache: a reopen (the explorer's NVTX tree, phases, Compare) reads these three
# columns back instead of joining every op to its launch again
@derived(key="gpu_time.launch_timeline", version="1", persist=True)
def launch_timeline(trace: Trace) -> pl.DataFrame:
    """Idx, launch time `t` and duration of every GPU op, sorted by `t` (ops whose launch call
    is outside the trace's window use their own start)."""
    ops = launched_ops(trace)
    if ops.height == 0:
        return pl.DataFrame(schema={"Idx": pl.Int64, "t": pl.Int64, "dur": pl.Int64})
    return ops.select(
        "Idx", pl.coalesce("r_start", "start").alias("t"), (pl.col("end") - pl.col("start")).alias("dur")
    ).sort("t")


def gpu_time_in(
    trace: Trace, starts: np.ndarray, ends: np.ndarray, ops: pl.Series | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(GPU ns, op count) launched within each [start, end] window (of the ops whose Idx is in
    `ops`, when given: one rank of a multi-process trace)."""
    tl = launch_timeline(trace)
    if ops is not None:
        tl = tl.filter(pl.col("Idx").is_in(ops.implode()))
    t = tl["t"].to_numpy()
    csum = np.concatenate([[0], np.cumsum(tl["dur"].to_numpy(), dtype=np.int64)])
    n = len(starts)
    gpu = np.empty(n, dtype=np.int64)
    count = np.empty(n, dtype=np.int64)

    def part(first: int, last: int) -> None:
        for a, b in small_blocks(first, last):
            lo = np.searchsorted(t, starts[a:b], side="left")
            hi = np.searchsorted(t, ends[a:b], side="right")
            np.subtract(csum[hi], csum[lo], out=gpu[a:b])
            np.subtract(hi, lo, out=count[a:b])

    # in slices on threads: the NVTX tree's 5.7M windows on dense_x25 were 0.5 s of one core
    # (numpy's searches and gathers release the GIL)
    in_slices(part, even_bounds(n, -(-n // WINDOWS_PER_SLICE)), SEARCH_THREADS)
    return gpu, count


def launched_in(ops: pl.DataFrame, windows: pl.DataFrame, by: list[str], keep: list[str]) -> pl.DataFrame:
    """`ops` (with `t`, when each op's launch call started) with the columns `keep` of the
    window that launched it: the window of the same `by` whose [start, end] holds `t`, as
    gpu_time_in counts (null where none). The windows of one `by` group must not overlap
    (steps); a step owns the work it launched, wherever on the GPU it ran (as nsys's
    projection and HTA count it), so its work running past its CPU end stays its own."""
    w = windows.select(*by, *keep, pl.col("start").alias("_w_start"), pl.col("end").alias("_w_end")).sort("_w_start")
    j = ops.sort("t").join_asof(
        w, left_on="t", right_on="_w_start", by=by or None, strategy="backward", check_sortedness=False
    )
    inside = pl.col("_w_end").is_not_null() & (pl.col("t") <= pl.col("_w_end"))
    return j.with_columns(pl.when(inside).then(pl.col(c)).alias(c) for c in keep).drop("_w_start", "_w_end")


def merge_intervals(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """The union of [start, end] intervals within each `by` group, as disjoint segments
    (touching intervals merge), sorted by `by` and start. A sorted sweep: a segment starts
    where an interval starts after every earlier one has ended."""
    o = df.select(*by, "start", "end").sort([*by, "start"])
    prev = pl.col("end").cum_max().shift(1)
    reach = pl.col("end").cum_max()
    if by:
        prev, reach = prev.over(by), reach.over(by)
    first = prev.is_null() | (pl.col("start") > prev)
    if o.select(pl.any_horizontal(pl.all().is_null().any()) | (pl.col("end") < pl.col("start")).any()).item():
        # nulls, or an interval that ends before it starts (its segment's end is then not the
        # furthest end reached): each segment's rows grouped
        o = o.with_columns(first.cum_sum().alias("_seg"))
        if by:
            o = o.with_columns(pl.col("_seg").over(by))
        seg = o.group_by([*by, "_seg"]).agg(pl.col("start").min(), pl.col("end").max())
        return seg.sort([*by, "_seg"]).drop("_seg")
    # the rows are in segment order: a segment's start is its first row's, its end the furthest
    # end reached at its last row (no group_by and sort of a million segments)
    o = o.with_columns(first.alias("_first"), reach.alias("_reach"))
    starts = o.filter("_first").select(*by, "start")
    return starts.hstack(o.filter(pl.col("_first").shift(-1, fill_value=True)).select(pl.col("_reach").alias("end")))


def _ops_by_process(trace: Trace) -> dict[int, pl.Series] | None:
    """Idx of the GPU ops each process launched, when more than one process did (else None)."""
    ops = gpu_ops(trace)
    if ops.height == 0:
        return None
    ops = ops.select("Idx", "global_pid").drop_nulls("global_pid")
    if ops["global_pid"].n_unique() < 2:
        return None
    return {p: g["Idx"] for (p,), g in ops.group_by("global_pid")}


def range_times(trace: Trace, ranges: pl.DataFrame, ops: pl.Series | None = None) -> pl.DataFrame:
    """Per range label: CPU time (how long an instance was open, per thread, an instance inside
    another of the same label on its thread counted once), and the GPU time and op count of
    the work launched while any instance was open, on any thread, each op counted once.

    `ranges` has label, start, end, global_tid. Phases, compare's ranges and diff's phases all
    come from here, so they never disagree. In a trace of several processes (one export of a
    distributed run) a range owns the work its own process launched: step_3 of rank 0 does not
    take rank 1's kernels launched while it was open, and the per-process sums are added."""
    schema = pl.Schema({"label": pl.String, "cpu": pl.Int64, "gpu": pl.Int64, "ops": pl.Int64})
    if ranges.height == 0:
        return pl.DataFrame(schema=schema)
    if ops is None and (by_process := _ops_by_process(trace)) is not None:
        pid = pl.col("global_tid") & PID_MASK
        parts = [
            range_times(trace, r, by_process.get(p, pl.Series("Idx", [], dtype=pl.Int64)))
            for (p,), r in ranges.group_by(pid.alias("_pid"), maintain_order=True)
        ]
        return (
            pl.concat(parts)
            .group_by("label", maintain_order=True)
            .agg(pl.col("cpu").sum(), pl.col("gpu").sum(), pl.col("ops").sum())
            .cast(schema)
        )
    per_thread = merge_intervals(ranges, ["label", "global_tid"])
    cpu = per_thread.group_by("label").agg((pl.col("end") - pl.col("start")).sum().cast(pl.Int64).alias("cpu"))
    windows = merge_intervals(ranges, ["label"])
    gpu, count = gpu_time_in(trace, windows["start"].to_numpy(), windows["end"].to_numpy(), ops)
    g = (
        windows.with_columns(pl.Series("gpu", gpu, dtype=pl.Int64), pl.Series("ops", count, dtype=pl.Int64))
        .group_by("label")
        .agg(pl.col("gpu").sum(), pl.col("ops").sum())
    )
    return cpu.join(g, on="label", how="left").select(list(schema)).cast(schema)
