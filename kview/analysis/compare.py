"""Comparisons: traces side by side (ranges, categories, kernels or layers), phases within one
trace, and the before/after diff of two runs.

A column is a time window of one trace: the whole trace, the last instance of a root range
(`--root profiled_step`, so warm-up steps do not blur the numbers), or one named range of the
trace (`--ranges forward_pass,backward_pass`), or one rank of a distributed run (`--ranks`: a
process and GPU of a multi-process export, or a per-rank file). GPU time of a range counts
every kernel launched while it was open, from any thread (of the rank's process), so backward
work on the autograd thread lands in the range open on the main thread (prefix sums over launch
times, no interval loops).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute
from kview.analysis.gpu_time import launch_timeline, range_times
from kview.analysis.layers import kernel_layers, phase_times
from kview.analysis.ranks import Run, owned_ops
from kview.derived import derived
from kview.errors import UsageError
from kview.io.schema import PID_MASK
from kview.notation import short_names
from kview.trace import Trace

BY_FIRST_COLUMN = {"range": "Range", "category": "Category", "kernel": "Kernel", "layer": "Layer"}


@dataclass
class Window:
    trace: Trace
    label: str
    start: int | None = None  # None: the whole trace
    end: int | None = None
    # one rank of a trace holding several: its (global_pid, device); None: every process
    unit: tuple[int | None, int | None] | None = None


def distinct_labels(names: list[str]) -> list[str]:
    """Names without the prefix and suffix they all share, cut at `_`, `-` or `.`
    (lm-small_ctx256_forward_nsys, lm-small_ctx256_train_nsys -> forward, train): column
    headers a terminal can show whole. The names themselves when nothing would be left."""
    if len(names) < 2 or len(set(names)) < len(names):
        return names
    parts = [re.split(r"(?<=[_.-])", n) for n in names]
    lead = 0
    while all(len(p) > lead + 1 for p in parts) and len({p[lead] for p in parts}) == 1:
        lead += 1
    trail = 0
    while all(len(p) > lead + trail + 1 for p in parts) and len({p[-1 - trail] for p in parts}) == 1:
        trail += 1
    out = ["".join(p[lead : len(p) - trail]).strip("_.-") for p in parts]
    return out if all(out) and len(set(out)) == len(out) else names


def root_window(
    trace: Trace, root: str | None, label: str | None = None, unit: tuple[int | None, int | None] | None = None
) -> Window:
    label = label or trace.stem
    if not root:
        return Window(trace, label, unit=unit)
    r = _of_unit(nv.user_ranges(trace), unit).filter(pl.col("label") == root).sort("start")
    if r.height == 0:
        raise UsageError(f"{trace.name}: no range named {root!r}" + (f" in {label}" if unit else ""))
    last = r.row(-1, named=True)
    return Window(trace, label, last["start"], last["end"], unit)


def rank_windows(run: Run, root: str | None = None) -> list[Window]:
    """One window per rank of `run`, in rank order, labelled `rank N`: the rank's process and
    GPU of a trace that holds several, else its whole trace."""
    per_trace = run.units.group_by("trace").len()
    shared = set(per_trace.filter(pl.col("len") > 1)["trace"].to_list())
    return [
        root_window(
            run.traces[u["trace"]],
            root,
            f"rank {u['rank']}",
            (u["global_pid"], u["device"]) if u["trace"] in shared else None,
        )
        for u in run.units.sort("rank").iter_rows(named=True)  # one row per rank
    ]


def _of_unit(ranges: pl.DataFrame, unit: tuple[int | None, int | None] | None) -> pl.DataFrame:
    """The ranges of the rank's process (all of them without a unit)."""
    if unit is None or unit[0] is None:
        return ranges
    return ranges.filter((pl.col("global_tid") & PID_MASK) == unit[0])


def _unit_ops(w: Window) -> pl.Series | None:
    """Idx of the GPU ops of the window's rank (None: every op of the trace)."""
    if w.unit is None:
        return None
    ops = owned_ops(w.trace)
    pid, device = w.unit
    return ops.filter(pl.col("global_pid").eq_missing(pid) & pl.col("device").eq_missing(device))["Idx"]


def phase_windows(trace: Trace, names: list[str], root: str | None = None) -> list[Window]:
    base = root_window(trace, root)
    r = nv.user_ranges(trace)
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


@derived(key="layers.phase_spans", version="1", persist=True)
def phase_spans(trace: Trace) -> pl.DataFrame:
    """Phase, start, end: the instance of each phase (`phase_times`' rows, in order) that
    Compare gives the phase's column (`compare.phase_windows`: its last), kept in the frame
    cache, so a reopened trace compares its phases without reading every range's label."""
    windows = phase_windows(trace, phase_times(trace)["Phase"].to_list())
    return pl.DataFrame(
        {"Phase": [w.label for w in windows], "start": [w.start for w in windows], "end": [w.end for w in windows]},
        schema={"Phase": pl.String, "start": pl.Int64, "end": pl.Int64},
    )


def kept_phase_windows(trace: Trace, names: list[str]) -> list[Window]:
    """The windows of the phases `names` (`phase_windows`), from the kept phase spans when they
    are the trace's own phases, in their order (no range's label read)."""
    spans = phase_spans(trace)
    if spans["Phase"].to_list() != names:
        return phase_windows(trace, names)
    return [Window(trace, p, s, e) for p, s, e in spans.iter_rows()]


def _in_window(df: pl.DataFrame, w: Window, start="start", end="end") -> pl.DataFrame:
    if w.start is None:
        return df
    return df.filter((pl.col(start) >= w.start) & (pl.col(end) <= w.end))


def check_metric(by: str, metric: str) -> None:
    if metric == "cpu" and by != "range":
        raise UsageError("--metric cpu applies to ranges only (use --by range)")


def column(w: Window, by: str, metric: str) -> pl.DataFrame:
    """item -> value (ns) for one window."""
    ops = _unit_ops(w)
    if by == "range":
        t = range_times(w.trace, _in_window(_of_unit(nv.user_ranges(w.trace), w.unit), w), ops)
        return t.select(pl.col("label").alias("item"), pl.col("cpu" if metric == "cpu" else "gpu").alias("v"))
    check_metric(by, metric)
    if ops is None and w.start is not None and w.end is not None:
        # the ops launched in the window: a slice of them in launch order, found by two binary
        # searches (250 steps side by side were 250 filters of every op)
        a, at = ops_by_launch_time(w.trace, by)
        lo, hi = int(np.searchsorted(at, w.start, "left")), int(np.searchsorted(at, w.end, "right"))
        a = a.slice(lo, hi - lo)
    else:
        a = ops_by_launch(w.trace, by)
        if ops is not None:
            a = a.filter(pl.col("Idx").is_in(ops.implode()))
        if w.start is not None:
            a = a.filter((pl.col("t") >= w.start) & (pl.col("t") <= w.end))
    key = {"category": "Category", "kernel": "Kernel", "layer": "Layer"}[by]
    return a.group_by(key).agg(pl.col("Duration (ns)").sum().alias("v")).rename({key: "item"})


@derived
def ops_by_launch(trace: Trace, by: str) -> pl.DataFrame:
    """The attributed GPU ops a column groups (Idx, duration, launch time `t` and the item `by`
    groups them by), joined once per trace and not once per window (one trace's 250 steps side
    by side were 250 joins of every op). By layer: the layer the Layers view counts the op in,
    else its path's first module."""
    key = {"category": "Category", "kernel": "Kernel", "layer": "Layer"}[by]
    launched = launch_timeline(trace).select("Idx", "t")
    a = attribute(trace).select("Idx", "Duration (ns)", key).join(launched, on="Idx", how="left")
    if by == "layer":
        layer = kernel_layers(trace).select("Idx", pl.col("Layer").alias("_layer"))
        a = a.join(layer, on=pl.col("Idx").cast(pl.Int64), how="left").with_columns(
            pl.coalesce("_layer", pl.col("Layer").str.split(":").list.first()).alias("Layer")
        )
    return a.select("Idx", "Duration (ns)", key, "t")


@derived
def ops_by_launch_time(trace: Trace, by: str) -> tuple[pl.DataFrame, np.ndarray]:
    """ops_by_launch's ops with a launch time, in launch-time order, and those times (a column's
    window is a slice of them)."""
    a = ops_by_launch(trace, by).filter(pl.col("t").is_not_null()).sort("t", maintain_order=True)
    return a, a["t"].to_numpy()


def side_by_side(windows: list[Window], by: str = "range", metric: str = "gpu", spread: bool = False) -> pl.DataFrame:
    """One row per range (category, kernel, layer), one column per window, then how each later
    column differs from the first (Δ, Δ%); with `spread` (ranks: no column is the baseline)
    instead the spread across the columns: max − min, that as a share of the min, and the
    column holding the max (Longest)."""
    return columns_side_by_side([(w.label, column(w, by, metric)) for w in windows], by, spread)


def columns_side_by_side(columns: list[tuple[str, pl.DataFrame]], by: str, spread: bool = False) -> pl.DataFrame:
    """side_by_side of the windows' columns (label, `column`'s item -> value), in their order."""
    first = BY_FIRST_COLUMN[by]
    cols = []
    labels: list[str] = []
    for label, col in columns:
        while label in labels:
            label += "'"
        labels.append(label)
        cols.append(col.rename({"v": label}))
    out = cols[0]
    for col in cols[1:]:
        out = out.join(col, on="item", how="full", coalesce=True)
    out = out.with_columns([pl.col(c).cast(pl.Int64) for c in labels])
    exprs = []
    if spread:
        high, low = pl.max_horizontal(labels), pl.min_horizontal(labels)
        exprs = [
            (high - low).alias("Spread (ns)"),
            pl.when(low > 0).then(((high - low) * 100.0 / low).round(1)).alias("Spread (%)"),
            # the column holding the max (the first of equals)
            pl.concat_list([pl.col(c).fill_null(-1) for c in labels])
            .list.arg_max()
            .replace_strict(list(range(len(labels))), labels, return_dtype=pl.String)
            .alias("Longest"),
        ]
    for c in labels[1:] if not spread else []:
        exprs.append((pl.col(c) - pl.col(labels[0])).alias(f"Δ {c}"))
        exprs.append(
            pl.when(pl.col(labels[0]) > 0)
            .then(((pl.col(c) - pl.col(labels[0])) * 100.0 / pl.col(labels[0])).round(1))
            .alias(f"Δ% {c}")
        )
    out = out.with_columns(exprs).rename({"item": first})
    # ties broken by the item, so the order never depends on how the joins came out
    return out.sort(
        [pl.max_horizontal([pl.col(c) for c in labels]), pl.col(first)], descending=[True, False], nulls_last=True
    )


def kernel_totals(trace: Trace) -> pl.DataFrame:
    a = attribute(trace).filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    return a.group_by("Kernel").agg(pl.col("Duration (ns)").sum().alias("total"), pl.len().alias("count"))


def _pair_renamed(ka: pl.DataFrame, kb: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kernels whose names differ only in template arguments (a tile size, a dtype) are the same
    kernel before and after: a name found on one side only is keyed by its short name
    (`gemm_kernel<…>`) when exactly one such name on each side shares it."""

    only_a = ka.filter(~pl.col("Kernel").is_in(kb["Kernel"].implode()))
    only_b = kb.filter(~pl.col("Kernel").is_in(ka["Kernel"].implode()))

    def unique_short(k: pl.DataFrame) -> pl.DataFrame:
        s = k.select("Kernel", short_names(k["Kernel"]).alias("short"))
        return s.filter(pl.col("short").is_unique() & (pl.col("short") != pl.col("Kernel")))

    pairs = (
        unique_short(only_a)
        .join(unique_short(only_b), on="short", suffix="_b")
        .select(pl.col("Kernel").alias("a"), pl.col("Kernel_b").alias("b"), "short")
    )
    rename_a = dict(zip(pairs["a"], pairs["short"]))
    rename_b = dict(zip(pairs["b"], pairs["short"]))
    return (ka.with_columns(pl.col("Kernel").replace(rename_a)), kb.with_columns(pl.col("Kernel").replace(rename_b)))


def gpu_names(trace: Trace) -> str:
    dev = trace.devices
    names = dev["name"].drop_nulls().unique(maintain_order=True).to_list() if "name" in dev.columns else []
    return ", ".join(str(n) for n in names) or "?"


def diff(a: Trace, b: Trace, top: int = 15) -> dict[str, pl.DataFrame]:
    """Before/after: the runs (GPUs), kernels that appeared or vanished, largest changes in time
    and count, phases. Kernels renamed only in their template arguments count as changed."""
    ka, kb = _pair_renamed(kernel_totals(a), kernel_totals(b))
    j = ka.join(kb, on="Kernel", how="full", coalesce=True, suffix="_b").with_columns(
        pl.col("total").fill_null(0).alias("A (ns)"),
        pl.col("total_b").fill_null(0).alias("B (ns)"),
        pl.col("count").fill_null(0).alias("A count"),
        pl.col("count_b").fill_null(0).alias("B count"),
    )
    j = j.with_columns(
        (pl.col("B (ns)") - pl.col("A (ns)")).alias("Δ (ns)"),
        (pl.col("B count").cast(pl.Int64) - pl.col("A count").cast(pl.Int64)).alias("Δ count"),
    )
    cols = ["Kernel", "A (ns)", "B (ns)", "Δ (ns)", "A count", "B count", "Δ count"]
    # every order ends with the kernel's name: equal values never come out in a run-dependent order
    desc = [True, False]
    appeared = j.filter(pl.col("total").is_null()).sort(["B (ns)", "Kernel"], descending=desc).select(cols)
    vanished = j.filter(pl.col("total_b").is_null()).sort(["A (ns)", "Kernel"], descending=desc).select(cols)
    both = j.filter(pl.col("total").is_not_null() & pl.col("total_b").is_not_null())
    by_time = both.sort([pl.col("Δ (ns)").abs(), pl.col("Kernel")], descending=desc).head(top).select(cols)
    changed = both.filter(pl.col("Δ count") != 0)
    by_count = changed.sort([pl.col("Δ count").abs(), pl.col("Kernel")], descending=desc).head(top).select(cols)
    pa, pb = phase_times(a), phase_times(b)
    phases = (
        pa.select("Phase", pl.col("GPU Time (ns)").alias("A (ns)"))
        .join(pb.select("Phase", pl.col("GPU Time (ns)").alias("B (ns)")), on="Phase", how="full", coalesce=True)
        .with_columns((pl.col("B (ns)") - pl.col("A (ns)")).alias("Δ (ns)"))
    )
    totals = pl.DataFrame(
        {
            "": ["GPU kernel time (ns)", "kernels"],
            "A": [int(ka["total"].sum() or 0), int(ka["count"].sum() or 0)],
            "B": [int(kb["total"].sum() or 0), int(kb["count"].sum() or 0)],
        }
    ).with_columns((pl.col("B") - pl.col("A")).alias("Δ"))
    runs = pl.DataFrame({"": ["trace", "GPU"], "A": [a.name, gpu_names(a)], "B": [b.name, gpu_names(b)]})
    return {
        "Runs": runs,
        "Totals": totals,
        "Largest changes in total time": by_time,
        "Largest changes in count": by_count,
        "Kernels that appeared": appeared.head(top),
        "Kernels that vanished": vanished.head(top),
        "Phases": phases,
    }
