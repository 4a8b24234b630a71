"""NCCL/RCCL collectives of a run: counts, time and bytes per rank, and the stragglers.

A collective ends on every rank at about the same moment, once the last rank has joined it, so
a rank that joined early spends the difference inside its collective kernel, waiting. The
stragglers table matches the instances of one collective across ranks (the n-th AllReduce of
iteration 3 on every rank) and reads the waiting from the kernels' durations: the rank with the
shortest kernel joined last, and every other rank waited its kernel's duration minus that one.
Durations need no shared clock, so per-rank files from different hosts compare as they are.
"""

from __future__ import annotations

import polars as pl

from kview.analysis.iterations import iteration_windows
from kview.analysis.ranks import Run, rank_ops
from kview.derived import derived


@derived
def collective_ops(run: Run) -> pl.DataFrame:
    """Communication kernels with their iteration (null outside every iteration of their rank)
    and their place among the same collective of that rank and iteration (`seq`, from 1)."""
    c = rank_ops(run).filter(pl.col("kind") == "communication").sort(["rank", "start"])
    w = (
        iteration_windows(run)
        .select("rank", "Iteration", pl.col("start").alias("w_start"), pl.col("end").alias("w_end"))
        .sort("w_start")
    )
    c = c.join_asof(w, left_on="start", right_on="w_start", by="rank", strategy="backward", check_sortedness=False)
    inside = pl.col("w_end").is_not_null() & (pl.col("start") <= pl.col("w_end"))
    c = c.with_columns(pl.when(inside).then(pl.col("Iteration")).alias("Iteration")).sort(["rank", "start"])
    seq = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(["rank", "Iteration", "collective"])
    return c.with_columns(seq.alias("seq"), (pl.col("end") - pl.col("start")).alias("dur")).select(
        "rank", "Iteration", "collective", "seq", "start", "end", "dur", "bytes"
    )


def collectives_by_rank(run: Run) -> pl.DataFrame:
    """Per rank and collective: count, GPU time (sum of kernel durations) and bytes (null where
    the trace does not record them: nsys exports; torch.profiler >= 2.1 does)."""
    c = collective_ops(run)
    return (
        c.group_by(["rank", "collective"])
        .agg(
            pl.len().alias("Count"),
            pl.col("dur").sum().alias("Time (ns)"),
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("Bytes"),
        )
        .select(pl.col("rank").alias("Rank"), pl.col("collective").alias("Collective"), "Count", "Time (ns)", "Bytes")
        .sort(["Rank", "Time (ns)"], descending=[False, True])
    )


def waits(run: Run) -> pl.DataFrame:
    """collective_ops of the instances seen on two or more ranks, with `wait`: the kernel's
    duration minus the shortest of the instance (0 for the rank that joined last). Only those
    inside iterations when the run has any: set-up collectives (the parameters' first
    broadcast) are not the loop's waiting."""
    c = collective_ops(run)
    if c["Iteration"].null_count() < c.height:
        c = c.filter(pl.col("Iteration").is_not_null())
    key = ["Iteration", "collective", "seq"]
    c = c.with_columns(pl.col("dur").min().over(key).alias("least"), pl.len().over(key).alias("n"))
    c = c.filter(pl.col("n") >= 2).with_columns((pl.col("dur") - pl.col("least")).alias("wait"))
    return c


def straggler_instances(run: Run) -> pl.DataFrame:
    """One row per collective instance seen on two or more ranks: Iteration, Collective, #
    (its place in the iteration), Ranks, Last rank (the shortest kernel: it joined last),
    Others' wait (ns) (summed over the other ranks) and Longest wait (ns)."""
    key = ["Iteration", "collective", "seq"]
    c = waits(run)
    g = (
        c.sort(["dur", "rank"])
        .group_by(key, maintain_order=False)
        .agg(
            pl.col("n").first().alias("Ranks"),
            pl.col("rank").first().alias("Last rank"),
            pl.col("wait").sum().alias("Others' wait (ns)"),
            pl.col("wait").max().alias("Longest wait (ns)"),
            pl.col("start").min().alias("_t"),
        )
    )
    return g.sort(["Iteration", "_t"], nulls_last=True).select(
        "Iteration",
        pl.col("collective").alias("Collective"),
        pl.col("seq").alias("#"),
        "Ranks",
        "Last rank",
        "Others' wait (ns)",
        "Longest wait (ns)",
    )


def stragglers(run: Run) -> pl.DataFrame:
    """Per iteration: the rank that joined its collectives last, weighted by how long the others
    waited for it (`Straggler`), the collectives, and the waiting: in all and the most one
    rank spent in one collective."""
    s = straggler_instances(run)
    per = s.group_by(["Iteration", "Last rank"]).agg(pl.col("Others' wait (ns)").sum().alias("w"))
    top = (
        per.sort(["w", "Last rank"], descending=[True, False])
        .group_by("Iteration", maintain_order=True)
        .agg(pl.col("Last rank").first().alias("Straggler"), pl.col("w").first().alias("Caused (ns)"))
    )
    g = s.group_by("Iteration").agg(
        pl.len().alias("Collectives"),
        pl.col("Others' wait (ns)").sum().alias("Wait (ns)"),
        pl.col("Longest wait (ns)").max(),
    )
    return (
        g.join(top, on="Iteration", how="left", nulls_equal=True)
        .select("Iteration", "Straggler", "Collectives", "Wait (ns)", "Caused (ns)", "Longest wait (ns)")
        .sort("Iteration", nulls_last=True)
    )
