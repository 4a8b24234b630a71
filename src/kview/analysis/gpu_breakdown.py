"""Where a rank's GPU time went inside time windows: busy, compute, communication (exposed and
overlapped), memory and idle.

Each quantity is the length of a union of op intervals clipped to the window, so a stretch where
two streams run at once counts once, and idle = wall - busy is never negative. Exposed
communication is communication not covered by any compute kernel on the same rank:
|comm ∪ compute| - |compute|. Every union is computed once per rank (a sorted sweep over the
rank's ops, already in start order) and measured in any number of windows with a
cumulative-coverage function and two sorted searches per window.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kview.analysis.ranks import Run, rank_ops

# the op classes whose unions are measured: name -> kinds in the union
UNIONS = {
    "busy": ("compute", "communication", "memory"),
    "compute": ("compute",),
    "communication": ("communication",),
    "comm_or_compute": ("compute", "communication"),
    "memory": ("memory",),
}

COLUMNS = {
    "Wall (ns)": "wall",
    "Busy (ns)": "busy",
    "Compute (ns)": "compute",
    "Communication (ns)": "communication",
    "Exposed comm (ns)": "exposed",
    "Overlapped comm (ns)": "overlapped",
    "Memory (ns)": "memory",
    "Idle (ns)": "idle",
}


def _covered(starts: np.ndarray, ends: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Length of the disjoint sorted segments [starts, ends) lying before each point x."""
    if len(starts) == 0:
        return np.zeros(len(x), dtype=np.int64)
    lens = ends - starts
    before = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)])
    i = np.searchsorted(starts, x, side="right")  # segments starting at or before x
    last = np.maximum(i - 1, 0)
    partial = np.clip(x - starts[last], 0, lens[last])
    return np.where(i > 0, before[last] + partial, 0)


def _union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals sorted by start, as disjoint sorted segments (touching intervals
    merge, as gpu_time.merge_intervals does): a segment starts where an interval starts after
    every earlier one has ended."""
    if len(starts) == 0:
        return starts, ends
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    return starts[first], np.maximum.reduceat(ends, first)


def breakdown(run: Run, windows: pl.DataFrame) -> pl.DataFrame:
    """`windows` (rank, start, end, any other columns) with the measures of COLUMNS added."""
    ops = rank_ops(run)  # sorted by rank, then start
    out = {name: np.zeros(windows.height, dtype=np.int64) for name in UNIONS}
    w = windows.with_row_index("_w")
    in_union = ops.select(
        "start", "end", *[pl.col("kind").is_in(list(kinds)).alias(name) for name, kinds in UNIONS.items()]
    )
    ranks = ops["rank"].to_numpy()
    for (rank,), part in w.group_by(["rank"]):
        first, past = np.searchsorted(ranks, rank, "left"), np.searchsorted(ranks, rank, "right")
        mine = in_union.slice(int(first), int(past - first))
        starts, ends = mine["start"].to_numpy(), mine["end"].to_numpy()
        lo, hi = part["start"].to_numpy(), part["end"].to_numpy()
        for name in UNIONS:
            keep = mine[name].to_numpy()
            a, b = _union(starts[keep], ends[keep])
            out[name][part["_w"].to_numpy()] = _covered(a, b, hi) - _covered(a, b, lo)
    m = {k: pl.Series(k, v, dtype=pl.Int64) for k, v in out.items()}
    wall = (pl.col("end") - pl.col("start")).alias("wall")
    return (
        windows.with_columns(wall, *m.values())
        .with_columns((pl.col("comm_or_compute") - pl.col("compute")).alias("exposed"))
        .with_columns(
            (pl.col("communication") - pl.col("exposed")).alias("overlapped"),
            (pl.col("wall") - pl.col("busy")).alias("idle"),
        )
        .drop("comm_or_compute")
    )


def shown(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The measures under their column names, after `keys`."""
    return df.select(*keys, *[pl.col(v).alias(k) for k, v in COLUMNS.items()])
