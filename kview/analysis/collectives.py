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

from kview.analysis.gpu_time import launched_in
from kview.analysis.iterations import iteration_windows
from kview.analysis.ranks import Run, rank_ops
from kview.derived import derived


@derived
def collective_ops(run: Run) -> pl.DataFrame:
    """Communication kernels with the iteration that launched them (null outside every iteration)
    and their place among the same collective of that rank and iteration (`seq`, from 1)."""
    c = rank_ops(run).filter(pl.col("kind") == "communication")
    # the iteration that launched it (the rule of the iteration table)
    c = launched_in(c, iteration_windows(run), ["rank"], ["Iteration"]).sort(["rank", "start"])
    seq = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(["rank", "Iteration", "collective"])
    return c.with_columns(seq.alias("seq"), (pl.col("end") - pl.col("start")).alias("dur")).select(
        "rank", "Iteration", "collective", "seq", "start", "end", "dur", "bytes"
    )


def collectives_by_rank(run: Run) -> pl.DataFrame:
    """Per rank and collective: count, GPU time (sum of kernel durations) and bytes (null where
    the trace does not record them: nsys exports; torch.profiler >= 2.1 does)."""
    return collectives_of(collective_ops(run))


def collectives_of(c: pl.DataFrame) -> pl.DataFrame:
    """collectives_by_rank of the collective_ops `c` (of any set of ranks: the rows of one rank
    depend on that rank's ops only)."""
    return (
        c.group_by(["rank", "collective"])
        .agg(
            pl.len().alias("Count"),
            pl.col("dur").sum().alias("Time (ns)"),
            pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()).alias("Bytes"),
        )
        .select(pl.col("rank").alias("Rank"), pl.col("collective").alias("Collective"), "Count", "Time (ns)", "Bytes")
        # ties of time broken by the name: the groups come out in no set order
        .sort(["Rank", "Time (ns)", "Collective"], descending=[False, True, False])
    )


# one instance of a collective: the n-th of its kind in an iteration, on every rank
INSTANCE = ["Iteration", "collective", "seq"]


def instance_parts(c: pl.DataFrame) -> pl.DataFrame:
    """Per instance of the collective_ops `c` of some of the ranks: how many ranks ran it (n),
    the shortest kernel (least) and the rank that ran it (last: the lowest of equals), the
    kernels' summed and longest duration and the first start. Parts of disjoint sets of ranks
    combine into those of all of them (combine_instances), so a run's instances can be built
    one rank file at a time."""
    return (
        c.sort(["dur", "rank"])
        .group_by(INSTANCE)
        .agg(
            pl.len().alias("n"),
            pl.col("dur").first().alias("least"),
            pl.col("rank").first().alias("last"),
            pl.col("dur").sum().alias("total"),
            pl.col("dur").max().alias("longest"),
            pl.col("start").min().alias("first"),
        )
    )


def combine_instances(parts: pl.DataFrame) -> pl.DataFrame:
    """instance_parts of disjoint sets of ranks, stacked, as the parts of all of them."""
    return (
        parts.sort(["least", "last"])
        .group_by(INSTANCE)
        .agg(
            pl.col("n").sum(),
            pl.col("least").first(),
            pl.col("last").first(),
            pl.col("total").sum(),
            pl.col("longest").max(),
            pl.col("first").min(),
        )
    )


def shared_instances(parts: pl.DataFrame) -> pl.DataFrame:
    """The instances (instance_parts of every rank) seen on two or more ranks; only those inside
    iterations when the run has any: set-up collectives (the parameters' first broadcast) are
    not the loop's waiting."""
    if parts["Iteration"].null_count() < parts.height:
        parts = parts.filter(pl.col("Iteration").is_not_null())
    return parts.filter(pl.col("n") >= 2)


def rank_waits(c: pl.DataFrame, shared: pl.DataFrame) -> pl.DataFrame:
    """Per rank of the collective_ops `c`: how long it waited in the shared instances (each
    kernel's duration minus the instance's shortest: 0 for the rank that joined last), and how
    often it joined last: is the instance's Last rank (of ranks tied on the shortest kernel, the
    lowest, as the stragglers table names it), so the ranks' counts add up to the instances.
    Columns rank, Waited (ns), Joined last."""
    w = c.join(shared.select(*INSTANCE, "least", "last"), on=INSTANCE, how="inner", nulls_equal=True)
    return w.group_by("rank").agg(
        (pl.col("dur") - pl.col("least")).sum().alias("Waited (ns)"),
        (pl.col("rank") == pl.col("last")).sum().alias("Joined last"),
    )


@derived
def run_instances(run: Run) -> pl.DataFrame:
    """shared_instances of the run."""
    return shared_instances(instance_parts(collective_ops(run)))


def waits(run: Run) -> pl.DataFrame:
    """rank_waits of every rank of the run."""
    return rank_waits(collective_ops(run), run_instances(run))


def straggler_instances(run: Run) -> pl.DataFrame:
    """One row per collective instance seen on two or more ranks: Iteration, Collective, #
    (its place in the iteration), Ranks, Last rank (the shortest kernel: it joined last),
    Others' wait (ns) (summed over the other ranks) and Longest wait (ns)."""
    return straggler_table(run_instances(run))


def straggler_table(shared: pl.DataFrame) -> pl.DataFrame:
    """straggler_instances of the shared_instances `shared`."""
    # instances that started at once (on different streams) in the order of their kind and place
    return shared.sort(["Iteration", "first", "collective", "seq"], nulls_last=True).select(
        "Iteration",
        pl.col("collective").alias("Collective"),
        pl.col("seq").alias("#"),
        pl.col("n").alias("Ranks"),
        pl.col("last").alias("Last rank"),
        (pl.col("total") - pl.col("n") * pl.col("least")).alias("Others' wait (ns)"),
        (pl.col("longest") - pl.col("least")).alias("Longest wait (ns)"),
    )


def stragglers(run: Run) -> pl.DataFrame:
    """Per iteration: the rank that joined its collectives last, weighted by how long the others
    waited for it (`Straggler`), the collectives, and the waiting: in all and the most one
    rank spent in one collective."""
    return stragglers_of(straggler_instances(run))


def stragglers_of(s: pl.DataFrame) -> pl.DataFrame:
    """stragglers of the straggler_instances `s`."""
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
