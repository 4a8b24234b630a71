"""Comparisons: traces side by side (ranges, categories, kernels or layers), phases within one
trace, and the before/after diff of two runs.

A column is a time window of one trace: the whole trace, the last instance of a root range
(`--root profiled_step`, so warm-up steps do not blur the numbers), or one named range of the
trace (`--ranges forward_pass,backward_pass`). GPU time of a range counts every kernel launched
while it was open, from any thread, so backward work on the autograd thread lands in the range
open on the main thread (prefix sums over launch times, no interval loops).
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kview.errors import UsageError

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute
from kview.analysis.gpu_time import launch_timeline, range_times
from kview.trace import Trace

BY_FIRST_COLUMN = {"range": "Range", "category": "Category", "kernel": "Kernel", "layer": "Layer"}


@dataclass
class Window:
    trace: Trace
    label: str
    start: int | None = None   # None: the whole trace
    end: int | None = None


def user_ranges(trace: Trace) -> pl.DataFrame:
    """Instances of user ranges (op markers excluded): id, label, start, end, global_tid."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema={"id": pl.Int64, "label": pl.String, "start": pl.Int64, "end": pl.Int64,
                                    "global_tid": pl.Int64})
    users = nv.labels(trace).filter(~pl.col("marker")).select("name_code", "label")
    return nv.projection_ranges(trace).join(users, on="name_code", how="inner").select(
        "id", "label", "start", "end", "global_tid")


def root_window(trace: Trace, root: str | None, label: str | None = None) -> Window:
    label = label or trace.stem
    if not root:
        return Window(trace, label)
    r = user_ranges(trace).filter(pl.col("label") == root).sort("start")
    if r.height == 0:
        raise UsageError(f"{trace.name}: no range named {root!r}")
    last = r.row(-1, named=True)
    return Window(trace, label, last["start"], last["end"])


def phase_windows(trace: Trace, names: list[str], root: str | None = None) -> list[Window]:
    base = root_window(trace, root)
    r = user_ranges(trace)
    if base.start is not None:
        r = r.filter((pl.col("start") >= base.start) & (pl.col("end") <= base.end))
    out = []
    for n in names:
        inst = r.filter(pl.col("label") == n).sort("start")
        if inst.height == 0:
            raise UsageError(f"{trace.name}: no range named {n!r}")
        row = inst.row(-1, named=True)
        out.append(Window(trace, n, row["start"], row["end"]))
    return out


def _in_window(df: pl.DataFrame, w: Window, start="start", end="end") -> pl.DataFrame:
    if w.start is None:
        return df
    return df.filter((pl.col(start) >= w.start) & (pl.col(end) <= w.end))


def column(w: Window, by: str, metric: str) -> pl.DataFrame:
    """item -> value (ns) for one window."""
    if by == "range":
        t = range_times(w.trace, _in_window(user_ranges(w.trace), w))
        return t.select(pl.col("label").alias("item"), pl.col("cpu" if metric == "cpu" else "gpu").alias("v"))
    if metric == "cpu":
        raise UsageError("--metric cpu applies to ranges only (use --by range)")
    a = attribute(w.trace)
    launched = launch_timeline(w.trace).select("Idx", "t")
    a = a.join(launched, on="Idx", how="left")
    if w.start is not None:
        a = a.filter((pl.col("t") >= w.start) & (pl.col("t") <= w.end))
    key = {"category": "Category", "kernel": "Kernel", "layer": "Layer"}[by]
    if by == "layer":  # the layer itself, not its sublayer path
        a = a.with_columns(pl.col("Layer").str.split(":").list.first().alias("Layer"))
    return a.group_by(key).agg(pl.col("Duration (ns)").sum().alias("v")).rename({key: "item"})


def side_by_side(windows: list[Window], by: str = "range", metric: str = "gpu") -> pl.DataFrame:
    first = BY_FIRST_COLUMN[by]
    cols = []
    labels = []
    for w in windows:
        label = w.label
        while label in labels:
            label += "'"
        labels.append(label)
        cols.append(column(w, by, metric).rename({"v": label}))
    out = cols[0]
    for c in cols[1:]:
        out = out.join(c, on="item", how="full", coalesce=True)
    out = out.with_columns([pl.col(c).cast(pl.Int64) for c in labels])
    exprs = []
    for c in labels[1:]:
        exprs.append((pl.col(c) - pl.col(labels[0])).alias(f"Δ {c}"))
        exprs.append(pl.when(pl.col(labels[0]) > 0).then(
            ((pl.col(c) - pl.col(labels[0])) * 100.0 / pl.col(labels[0])).round(1)).alias(f"Δ% {c}"))
    out = out.with_columns(exprs).rename({"item": first})
    return out.sort(pl.max_horizontal([pl.col(c) for c in labels]), descending=True, nulls_last=True)


def kernel_totals(trace: Trace) -> pl.DataFrame:
    a = attribute(trace).filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    return a.group_by("Kernel").agg(pl.col("Duration (ns)").sum().alias("total"), pl.len().alias("count"))


def diff(a: Trace, b: Trace, top: int = 15) -> dict[str, pl.DataFrame]:
    """Before/after: kernels that appeared or vanished, largest changes in time and count, phases."""
    ka, kb = kernel_totals(a), kernel_totals(b)
    j = ka.join(kb, on="Kernel", how="full", coalesce=True, suffix="_b").with_columns(
        pl.col("total").fill_null(0).alias("A (ns)"), pl.col("total_b").fill_null(0).alias("B (ns)"),
        pl.col("count").fill_null(0).alias("A count"), pl.col("count_b").fill_null(0).alias("B count"))
    j = j.with_columns((pl.col("B (ns)") - pl.col("A (ns)")).alias("Δ (ns)"),
                       (pl.col("B count").cast(pl.Int64) - pl.col("A count").cast(pl.Int64)).alias("Δ count"))
    cols = ["Kernel", "A (ns)", "B (ns)", "Δ (ns)", "A count", "B count", "Δ count"]
    appeared = j.filter(pl.col("total").is_null()).sort("B (ns)", descending=True).select(cols)
    vanished = j.filter(pl.col("total_b").is_null()).sort("A (ns)", descending=True).select(cols)
    both = j.filter(pl.col("total").is_not_null() & pl.col("total_b").is_not_null())
    by_time = both.sort(pl.col("Δ (ns)").abs(), descending=True).head(top).select(cols)
    by_count = both.filter(pl.col("Δ count") != 0).sort(pl.col("Δ count").abs(), descending=True).head(top).select(cols)
    from kview.analysis.layers import phase_times

    pa, pb = phase_times(a), phase_times(b)
    phases = (pa.select("Phase", pl.col("GPU Time (ns)").alias("A (ns)"))
              .join(pb.select("Phase", pl.col("GPU Time (ns)").alias("B (ns)")), on="Phase", how="full", coalesce=True)
              .with_columns((pl.col("B (ns)") - pl.col("A (ns)")).alias("Δ (ns)")))
    totals = pl.DataFrame({"": ["GPU kernel time (ns)", "kernels"],
                           "A": [int(ka["total"].sum() or 0), int(ka["count"].sum() or 0)],
                           "B": [int(kb["total"].sum() or 0), int(kb["count"].sum() or 0)]}).with_columns(
        (pl.col("B") - pl.col("A")).alias("Δ"))
    return {"Totals": totals, "Largest changes in total time": by_time, "Largest changes in count": by_count,
            "Kernels that appeared": appeared.head(top), "Kernels that vanished": vanished.head(top),
            "Phases": phases}
