"""Kernel statistics per group of attributed kernels: the columns of `cuda_gpu_kern_sum`
(time share, total, instances, mean, median, min, max, standard deviation), computed and
rounded as that report does, for any column of the attributed table. Kernels can so be summed
by category, layer, op, direction or range, which nsys does not offer, and grouped by name they
equal the report value for value."""

from __future__ import annotations

import polars as pl

from kview.reports.gpu_kernels import STAT_HEADERS
from kview.reports.summary_stats import order_like_sqlite, percent_of_total, sqlite_round, stats_aggs

STATS = ("Time (%)", *STAT_HEADERS.values())


def group_stats(kernels: pl.DataFrame, by: str) -> pl.DataFrame:
    """One row per distinct value of column `by` of attributed kernels (`attribute`), ordered
    as the report orders (total descending, then instances, then key): the STATS columns, `by`
    and, unless grouped by it, `Category`, the category most of the group's kernels have (ties:
    the first by name). Time (%) is of the total over `kernels`."""
    cat = [] if by == "Category" else [pl.col("Category").mode().sort(nulls_last=True).first().alias("Category")]
    g = kernels.group_by(by).agg(*stats_aggs("Duration (ns)"), *cat)
    g = sqlite_round(g.with_columns(percent_of_total().alias("Time (%)")), ["Time (%)", "avg", "med", "stddev"])
    g = order_like_sqlite(g, [by], ["total", "num", by], [True, False, False])
    return g.select(
        "Time (%)",
        *[pl.col(k).alias(v) for k, v in STAT_HEADERS.items()],
        by,
        *([] if by == "Category" else ["Category"]),
    )
