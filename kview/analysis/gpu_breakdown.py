"""Where the GPU time of the work a rank launched in time windows (its steps) went: busy,
compute, communication (exposed and overlapped), memory and idle, and how long it ran past the
window's end (tail).

A window owns every op whose launch call started inside it (gpu_time.launched_in: the rule of
phases, compare and nsys's projection), wherever on the GPU it ran: a step of an asynchronous
loop, whose GPU work runs after its CPU end, keeps that work. Its wall time runs from its start
to the later of its end and its last op's end. Each quantity is the length of a union of the
owned ops, so a stretch where two streams run at once counts once, and idle = wall - busy is
never negative. Exposed communication is communication not covered by any compute kernel of
the same window: |comm ∪ compute| - |compute|.
"""

from __future__ import annotations

import polars as pl

from kview.analysis.gpu_time import launched_in, merge_intervals
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
    "Tail (ns)": "tail",
    "GPU ops": "ops",
    "Busy (ns)": "busy",
    "Compute (ns)": "compute",
    "Communication (ns)": "communication",
    "Exposed comm (ns)": "exposed",
    "Overlapped comm (ns)": "overlapped",
    "Memory (ns)": "memory",
    "Idle (ns)": "idle",
}


def breakdown(run: Run, windows: pl.DataFrame) -> pl.DataFrame:
    """`windows` (rank, start, end, any other columns; one rank's windows never overlap) with
    the measures of COLUMNS added, over the ops each window launched."""
    ops = rank_ops(run)
    w = windows.with_row_index("_w")
    owned = launched_in(ops, w.select("rank", "_w", "start", "end"), ["rank"], ["_w"]).drop_nulls("_w")
    per = owned.group_by("_w").agg(pl.col("end").max().alias("_last"), pl.len().alias("ops"))
    for name, kinds in UNIONS.items():
        seg = merge_intervals(owned.filter(pl.col("kind").is_in(list(kinds))), ["_w"])
        per = per.join(seg.group_by("_w").agg((pl.col("end") - pl.col("start")).sum().alias(name)), on="_w", how="left")
    out = w.join(per, on="_w", how="left").with_columns(pl.col(name).fill_null(0) for name in [*UNIONS, "ops"])
    last = pl.max_horizontal("end", pl.col("_last").fill_null(pl.col("end")))
    return (
        out.with_columns(
            (last - pl.col("start")).alias("wall"),
            (last - pl.col("end")).alias("tail"),
            (pl.col("comm_or_compute") - pl.col("compute")).alias("exposed"),
        )
        .with_columns(
            (pl.col("communication") - pl.col("exposed")).alias("overlapped"),
            (pl.col("wall") - pl.col("busy")).alias("idle"),
        )
        .drop("comm_or_compute", "_last", "_w")
    )


def shown(df: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The measures under their column names, after `keys`."""
    return df.select(*keys, *[pl.col(v).alias(k) for k, v in COLUMNS.items()])
