"""Kernel statistics per group of attributed kernels: the columns of `cuda_gpu_kern_sum`
(time share, total, instances, mean, median, min, max, standard deviation), computed and
rounded as that report does, for any column of the attributed table. Kernels can so be summed
by category, layer, op, direction or range, which nsys does not offer, and grouped by name they
equal the report value for value."""

from __future__ import annotations

import polars as pl

from kview.analysis.summary_stats import (
    STAT_HEADERS,
    order_like_sqlite,
    percent_of_total,
    sqlite_round,
    stats_aggs,
)

STATS = ("Time (%)", *STAT_HEADERS.values())


def group_stats(kernels: pl.DataFrame, by: str) -> pl.DataFrame:
    """One row per distinct value of column `by` of attributed kernels (`attribute`), ordered
    as the report orders (total descending, then instances, then key): the STATS columns, `by`
    and, unless grouped by it, `Category`, the category that holds most of the group's GPU time
    (ties: the first by name): a backward group of 88% gemm time is gemm, however many small
    elementwise kernels it has. Time (%) is of the total over `kernels`."""
    g = kernels.group_by(by).agg(*stats_aggs("Duration (ns)"))
    if by != "Category":
        time_by_cat = (
            kernels.group_by(by, "Category")
            .agg(pl.col("Duration (ns)").sum().alias("_t"))
            .sort(["_t", "Category"], descending=[True, False], nulls_last=True)
            .group_by(by, maintain_order=True)
            .agg(pl.col("Category").first())
        )
        g = g.join(time_by_cat, on=by, how="left", nulls_equal=True)
    g = sqlite_round(g.with_columns(percent_of_total().alias("Time (%)")), ["Time (%)", "avg", "med", "stddev"])
    g = order_like_sqlite(g, [by], ["total", "num", by], [True, False, False])
    return g.select(
        "Time (%)",
        *[pl.col(k).alias(v) for k, v in STAT_HEADERS.items()],
        by,
        *([] if by == "Category" else ["Category"]),
    )


FREQUENCY = ("Count", "Count (%)", "Total Time (ns)", "Time (%)")


def frequency(kernels: pl.DataFrame, by: str) -> pl.DataFrame:
    """VisiData's frequency table of column `by` over `kernels`: per distinct value its count,
    its share of the count, its total duration and its share of the time; most frequent
    first (ties: the most time, then the value)."""
    total_n = max(kernels.height, 1)
    total_t = kernels["Duration (ns)"].sum() or 1
    g = kernels.group_by(by).agg(
        pl.len().cast(pl.Int64).alias("Count"), pl.col("Duration (ns)").sum().alias("Total Time (ns)")
    )
    g = g.with_columns(
        (pl.col("Count") * 100.0 / total_n).round(1).alias("Count (%)"),
        (pl.col("Total Time (ns)") * 100.0 / total_t).round(1).alias("Time (%)"),
    )
    return g.sort(["Count", "Total Time (ns)", by], descending=[True, True, False], nulls_last=True).select(
        by, *FREQUENCY
    )
