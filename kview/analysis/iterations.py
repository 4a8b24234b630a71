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

from kview.analysis.gpu_breakdown import COLUMNS, breakdown
from kview.analysis.ranks import Run, rank_ops
from kview.analysis.steps import step_instances
from kview.derived import derived
from kview.io.schema import PID_MASK

WINDOW_SCHEMA = pl.Schema(
    {"rank": pl.Int64, "Iteration": pl.Int64, "Step": pl.String, "start": pl.Int64, "end": pl.Int64}
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
