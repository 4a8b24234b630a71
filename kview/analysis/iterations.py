"""Iterations (training steps) of each rank and what each one cost on the GPU.

Iterations are the top-level user ranges of one step family, the same roots phases start from
(layers.user_range_tree: op markers and library ranges such as NCCL's never count), named for a
step, iteration or batch: `ProfilerStep#N`, `step_N`, `iter12`, or unnumbered (`profiled_step`,
whose instances are numbered in order; a `warmup` beside it is no iteration). Where several
families qualify, the one covering the most time wins. Without any, the optimizer's step markers (`Optimizer.step#AdamW.step`) end one iteration
each. Steps carry their number across ranks (step_3 of rank 0 and of rank 1 are iteration 3),
so ranks are matched without a shared clock. A rank without iterations has one window, its
GPU span.

An iteration's window is its step range on the CPU; its GPU time is that of the work it
launched (gpu_breakdown: the rule of phases and compare), with how long that work ran past the
step's CPU end (tail). Outliers are iterations whose wall time is more than 25%
and more than three scaled median absolute deviations from the median of their rank.
"""

from __future__ import annotations

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.gpu_breakdown import COLUMNS, breakdown
from kview.analysis.layers import STEP_FAMILY, user_range_tree
from kview.analysis.ranks import Run, rank_ops
from kview.derived import derived
from kview.io.schema import PID_MASK
from kview.trace import Trace

STEP_WORDS = r"(?i)step|iter|batch"
OPTIMIZER_STEP = r"^Optimizer\.step#\w+\.step$"
STEP_SCHEMA = pl.Schema(
    {"global_tid": pl.Int64, "label": pl.String, "number": pl.Int64, "start": pl.Int64, "end": pl.Int64}
)
WINDOW_SCHEMA = pl.Schema(
    {"rank": pl.Int64, "Iteration": pl.Int64, "Step": pl.String, "start": pl.Int64, "end": pl.Int64}
)


def _numbered(df: pl.DataFrame) -> pl.DataFrame:
    """Number each step: its label's trailing number, else its order on its thread (from 1)."""
    order = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("global_tid")
    digits = pl.col("label").str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)
    return (
        df.sort("start")
        .select("global_tid", "label", pl.coalesce(digits, order).alias("number"), "start", "end")
        .cast(STEP_SCHEMA)
    )


# kept in the disk cache: a run's worker processes find the steps there, so the process that
# summarizes the run never builds a rank's range tree (the key's number changes with the rules)
@derived(persist="iterations.steps1")
def step_instances(trace: Trace) -> pl.DataFrame:
    """The trace's steps: global_tid, label, number, start, end (empty when it has none)."""
    roots = user_range_tree(trace).filter(pl.col("depth") == 0)
    if roots.height:
        roots = roots.with_columns(pl.col("label").str.replace(STEP_FAMILY, "").alias("family"))
        fam = (
            roots.group_by("family")
            .agg(
                pl.len().alias("n"),
                (pl.col("end") - pl.col("start")).sum().alias("span"),
            )
            .filter(pl.col("family").str.contains(STEP_WORDS))
            .sort(["span", "family"], descending=[True, False])
        )
        if fam.height:
            return _numbered(roots.filter(pl.col("family") == fam["family"][0]))
    return _optimizer_steps(trace)


def _optimizer_steps(trace: Trace) -> pl.DataFrame:
    """One iteration per optimizer step, from the end of the one before (the first from the
    first range of its thread) to its own end."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema=STEP_SCHEMA)
    opt = nv.labels(trace).filter(pl.col("label").str.contains(OPTIMIZER_STEP)).select("name_code", "label")
    r = nv.projection_ranges(trace)
    steps = r.join(opt, on="name_code", how="inner").sort("start")
    if steps.height == 0:
        return pl.DataFrame(schema=STEP_SCHEMA)
    first = r.group_by("global_tid").agg(pl.col("start").min().alias("first"))
    steps = steps.join(first, on="global_tid").with_columns(
        pl.col("end").shift(1).over("global_tid").fill_null(pl.col("first")).alias("start")
    )
    return _numbered(steps.with_columns(pl.lit("optimizer step").alias("label"))).with_columns(
        pl.format("optimizer step {}", pl.col("number")).alias("label")
    )


@derived
def iteration_windows(run: Run) -> pl.DataFrame:
    """rank, Iteration, Step (its range's label), start, end: one row per iteration of each rank
    (its step ranges on the rank's process); a rank without steps gets its GPU span, Iteration null."""
    parts = []
    for i, t in enumerate(run.traces):
        units = run.units.filter(pl.col("trace") == i)
        steps = step_instances(t)
        if units.height == 0 or steps.height == 0:
            continue
        if units.height == 1:  # one rank in this file: its steps, whatever thread opened them
            s = steps.with_columns(pl.lit(units["rank"][0], dtype=pl.Int64).alias("rank"))
        else:
            s = steps.with_columns((pl.col("global_tid") & PID_MASK).alias("global_pid")).join(
                units.select("global_pid", "rank"), on="global_pid", how="inner"
            )
        parts.append(
            s.group_by(["rank", "number"]).agg(pl.col("label").first(), pl.col("start").min(), pl.col("end").max())
        )
    stepped = (
        pl.concat(parts)
        if parts
        else pl.DataFrame(
            schema={"rank": pl.Int64, "number": pl.Int64, "label": pl.String, "start": pl.Int64, "end": pl.Int64}
        )
    )
    w = stepped.select("rank", pl.col("number").alias("Iteration"), pl.col("label").alias("Step"), "start", "end")
    ops = rank_ops(run)
    bare = (
        ops.filter(~pl.col("rank").is_in(w["rank"].implode()))
        .group_by("rank")
        .agg(
            pl.lit(None, dtype=pl.Int64).alias("Iteration"),
            pl.lit("(whole trace)").alias("Step"),
            pl.min_horizontal(pl.col("start").min(), pl.col("t").min()).alias("start"),  # it launched them all
            pl.col("end").max(),
        )
    )
    return pl.concat([w.cast(WINDOW_SCHEMA), bare.cast(WINDOW_SCHEMA)]).sort(["rank", "Iteration", "start"])


@derived
def iteration_table(run: Run) -> pl.DataFrame:
    """One row per rank and iteration: wall time, GPU busy, compute, communication (exposed,
    overlapped), memory, idle, and whether the iteration is an outlier of its rank."""
    b = breakdown(run, iteration_windows(run))
    wall = pl.col("wall")
    dev = (wall - wall.median().over("rank")).abs()
    mad = dev.median().over("rank") * 1.4826
    outlier = (dev > 0.25 * wall.median().over("rank")) & (dev > 3 * mad) & pl.col("Iteration").is_not_null()
    return (
        b.with_columns(outlier.alias("Outlier"))
        .select(
            pl.col("rank").alias("Rank"),
            "Iteration",
            "Step",
            *[pl.col(v).alias(k) for k, v in COLUMNS.items()],
            "Outlier",
        )
        .sort(["Rank", "Iteration"], nulls_last=True)
    )


def iteration_stats(run: Run) -> pl.DataFrame:
    """Per rank and measure: mean, std, min and max across its iterations (outliers included;
    the table flags them)."""
    return stats_of(iteration_table(run))


def stats_of(t: pl.DataFrame) -> pl.DataFrame:
    """iteration_stats of the iteration_table `t`."""
    long = t.unpivot(index=["Rank"], on=list(COLUMNS), variable_name="Measure", value_name="v")
    order = pl.DataFrame({"Measure": list(COLUMNS)}).with_row_index("_o")
    return (
        long.group_by(["Rank", "Measure"])
        .agg(
            pl.len().alias("Iterations"),
            pl.col("v").mean().round(0).cast(pl.Int64).alias("Mean (ns)"),
            pl.col("v").std().round(0).cast(pl.Int64).alias("Std (ns)"),
            pl.col("v").min().alias("Min (ns)"),
            pl.col("v").max().alias("Max (ns)"),
        )
        .join(order, on="Measure")
        .sort(["Rank", "_o"])
        .drop("_o")
        .with_columns(pl.col("Measure").str.replace(r" \(ns\)$", ""))
    )
