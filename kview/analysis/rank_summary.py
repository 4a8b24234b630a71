"""One row per rank: where its GPU time went over its iterations, how much of its communication
was exposed, and how long it waited in collectives for the others.

The sums are those of the iteration table (iterations.iteration_table), so `kview ranks` and
`kview iterations` never disagree; a rank without iterations is measured over its GPU span.
"""

from __future__ import annotations

import polars as pl

from kview.analysis.collectives import waits
from kview.analysis.gpu_breakdown import COLUMNS
from kview.analysis.iterations import iteration_table
from kview.analysis.ranks import Run
from kview.derived import derived
from kview.notation import stacked_bar

BAR_TITLE = "█comp ▓exposed ▒mem ░idle"


def with_time_bar(summary: pl.DataFrame, width: int = 20) -> pl.DataFrame:
    """`summary` with each rank's wall time as one bar (BAR_TITLE): compute, exposed
    communication, the rest of busy (memory outside both), idle; scaled to the longest wall
    time, so ranks compare at a glance. The CLI's table and the TUI's Ranks view draw this bar."""
    rest = pl.col("Busy (ns)") - pl.col("Compute (ns)") - pl.col("Exposed comm (ns)")
    return (
        summary.with_columns(rest.alias("_rest"))
        .with_columns(
            stacked_bar(["Compute (ns)", "Exposed comm (ns)", "_rest", "Idle (ns)"], width, "█▓▒░").alias(BAR_TITLE)
        )
        .drop("_rest")
    )


@derived
def rank_summary(run: Run) -> pl.DataFrame:
    return summary_of(iteration_table(run), waits(run))


def summary_of(iterations: pl.DataFrame, waited: pl.DataFrame) -> pl.DataFrame:
    """rank_summary of a run's iteration_table and its ranks' waits (collectives.rank_waits)."""
    g = iterations.group_by("Rank").agg(
        pl.col("Iteration").drop_nulls().len().alias("Iterations"), *[pl.col(c).sum() for c in COLUMNS]
    )
    pct = lambda a, b: pl.when(pl.col(b) > 0).then((pl.col(a) * 100.0 / pl.col(b)).round(1))  # noqa: E731
    return (
        g.join(waited.rename({"rank": "Rank"}), on="Rank", how="left")
        .with_columns(
            pl.col("Waited (ns)").fill_null(0),
            pl.col("Joined last").fill_null(0).cast(pl.Int64),
            pct("Busy (ns)", "Wall (ns)").alias("Busy (% of wall)"),
            pct("Exposed comm (ns)", "Communication (ns)").alias("Exposed (% of comm)"),
        )
        .select("Rank", "Iterations", *COLUMNS, "Busy (% of wall)", "Exposed (% of comm)", "Waited (ns)", "Joined last")
        .sort("Rank")
    )
