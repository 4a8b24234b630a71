"""Summary statistics exactly as `nsys stats` computes and rounds them.

nsys runs SQL with its own aggregates: avg() over integers is an exact integer sum divided
as doubles, stdev is the sample deviation (0 for fewer than two values), median of an even
count is the mean of the two middle values. round(x, 1) in SQLite rounds the exact binary
value half away from zero, which differs from IEEE half-even and from naive x*10 rounding on
values such as 0.15; `sqlite_round` reproduces it: vectorized, with an exact Decimal fix-up
only for the rare rows that sit on a tie.
"""
from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

import numpy as np
import polars as pl


def stats_aggs(value: str, prefix: str = "") -> list[pl.Expr]:
    """total, num, avg, med, min, max, stddev of `value` within a group (nulls ignored)."""
    v = pl.col(value)
    n = v.count()
    return [
        v.sum().alias(f"{prefix}total"),
        n.alias(f"{prefix}num"),
        pl.when(n > 0).then(v.sum().cast(pl.Float64) / n.cast(pl.Float64)).alias(f"{prefix}avg"),
        v.median().alias(f"{prefix}med"),
        v.min().alias(f"{prefix}min"),
        v.max().alias(f"{prefix}max"),
        pl.when(n >= 2).then(v.cast(pl.Float64).std(ddof=1)).otherwise(0.0).alias(f"{prefix}stddev"),
    ]


def _exact_round(x: float, digits: int) -> float:
    q = Decimal(1).scaleb(-digits)
    return float(Decimal(x).quantize(q, rounding=ROUND_HALF_UP))


def sqlite_round(df: pl.DataFrame, cols: list[str], digits: int = 1) -> pl.DataFrame:
    """Round float columns like SQLite's round(x, digits).

    numpy does the division because polars turns `/ 10` into `* 0.1`, which prints
    7866.2 as 7866.200000000001.
    """
    scale = 10.0 ** digits
    out = []
    for c in cols:
        s = df[c].cast(pl.Float64)
        x = s.to_numpy().astype(np.float64, copy=True)
        y = np.abs(x) * scale
        with np.errstate(invalid="ignore"):
            r = np.copysign(np.floor(y + 0.5) / scale, x)
            tie = np.flatnonzero((y - np.floor(y)) == 0.5)
        for i in tie:  # exact decision for the few values that look like ties
            r[i] = _exact_round(float(x[i]), digits)
        res = pl.Series(c, r, dtype=pl.Float64)
        if s.null_count():
            res = pl.select(pl.when(s.is_null()).then(None).otherwise(res)).to_series().alias(c)
        out.append(res)
    return df.with_columns(out)


def percent_of_total(total: str = "total") -> pl.Expr:
    """Time (%) as nsys shows it: share of the listed rows' total, before rounding."""
    return pl.col(total).cast(pl.Float64) * 100.0 / pl.col(total).sum().cast(pl.Float64)


def order_like_sqlite(df: pl.DataFrame, group_keys: list[str], by: list[str], descending: list[bool]) -> pl.DataFrame:
    """ORDER BY after GROUP BY: ties keep the group order, which SQLite emits sorted by the keys."""
    df = df.sort(group_keys, nulls_last=False, maintain_order=True)
    # SQLite puts NULL first in ascending and last in descending order.
    return df.sort(by, descending=descending, nulls_last=list(descending), maintain_order=True)
