"""Readable kernel names: template arguments and parameter lists elided (full name kept aside)."""
from __future__ import annotations

import polars as pl


def short_names(names: pl.Series) -> pl.Series:
    """`void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)` ->
    `at::native::vectorized_elementwise_kernel<…>`. Computed once per distinct name."""
    uniq = names.unique().drop_nulls()
    s = uniq.str.replace(r"^void ", "")
    for _ in range(8):  # innermost brackets first, depth by depth
        s = s.str.replace_all(r"<[^<>]*>", "\x01").str.replace_all(r"\([^()]*\)", "\x02")
    s = s.str.replace_all("\x02+$", "").str.replace_all("\x01", "<…>").str.replace_all("\x02", "(…)")
    mapping = pl.DataFrame({"full": uniq, "short": s})
    return (pl.DataFrame({"full": names}).join(mapping, on="full", how="left", maintain_order="left")["short"]
            .alias(names.name))
