"""How a duration, a size, a share and a kernel name are written: one notation for every layer
(analysis's findings and notes, the documents, the renderers, the explorer), so no two places can
write the same quantity differently.

Bars are polars expressions over a whole column (no loop over rows), drawn in block characters
that every terminal font has: a share bar at 1/8-cell resolution, and a stacked bar whose
segments (forward, backward, ...) take different shades of whole cells.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where a bar or a short name is made: a table of text needs no polars
    import polars as pl

FULL = "█"
EIGHTHS = ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")  # 0/8 .. 7/8 of a cell
SHADES = "█▓▒░"  # the segments of a stacked bar, in order


def fmt_ns(ns: float | int | None) -> str:
    """A duration in the unit a person reads: `1.5 ms`, `312 µs`, `2.04 s`, `870 ns`."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}" if abs(ns) / scale < 100 else f"{ns / scale:,.1f} {unit}"
    return f"{ns:.0f} ns"


def fmt_cell(v, decimals: int = 1) -> str:
    """A cell of the explorer's tables: numbers with thousands separators (floats to `decimals`),
    booleans as the data formats write them, nothing for a missing value."""
    if v is None:
        return ""
    if isinstance(v, bool):  # as the data formats write it
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:,.{decimals}f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def bar(frac: pl.Expr, width: int = 10) -> pl.Expr:
    """A bar `frac` (0..1) of `width` cells long, rounded to the nearest 1/8 cell; empty for a
    missing or undefined fraction (0/0)."""
    import polars as pl

    cells = (frac.fill_nan(0).fill_null(0) * width * 8).round(0).cast(pl.Int64)
    return pl.concat_str(
        [
            pl.lit(FULL).repeat_by((cells // 8).cast(pl.UInt32)).list.join(""),
            (cells % 8).replace_strict(list(range(8)), list(EIGHTHS), default=""),
        ]
    )


def stacked_bar(parts: list[str], width: int = 30, glyphs: str = SHADES) -> pl.Expr:
    """One bar per row, a segment per column of `parts` drawn in its own shade, scaled so the
    row with the largest total fills `width` cells. Segment ends are rounded where they fall
    on the cumulative scale, so the segments of a row add up to its rounded total."""
    import polars as pl

    values = [pl.col(p).fill_null(0).cast(pl.Float64) for p in parts]
    top = pl.sum_horizontal(values).max()
    segments, used, drawn = [], None, pl.lit(0, dtype=pl.Int64)
    for i, v in enumerate(values):
        step = pl.when(top > 0).then(v / top * width).otherwise(0.0)
        used = step if used is None else used + step
        end = used.round(0).cast(pl.Int64)
        cells = (end - drawn).clip(lower_bound=0).cast(pl.UInt32)
        segments.append(pl.lit(glyphs[i % len(glyphs)]).repeat_by(cells).list.join(""))
        drawn = pl.max_horizontal(drawn, end)
    return pl.concat_str(segments) if segments else pl.lit("")


def short_names(names: pl.Series) -> pl.Series:
    """`void at::native::vectorized_elementwise_kernel<(int)4, ...>(int, T2, T3)` ->
    `at::native::vectorized_elementwise_kernel<…>`: template arguments and parameter lists
    elided. Computed once per distinct name."""
    import polars as pl

    uniq = names.unique().drop_nulls()
    s = uniq.str.replace(r"^void ", "")
    for _ in range(8):  # innermost brackets first, depth by depth
        s = s.str.replace_all(r"<[^<>]*>", "\x01").str.replace_all(r"\([^()]*\)", "\x02")
    s = s.str.replace_all("\x02+$", "").str.replace_all("\x01", "<…>").str.replace_all("\x02", "(…)")
    mapping = pl.DataFrame({"full": uniq, "short": s})
    return (
        pl.DataFrame({"full": names})
        .join(mapping, on="full", how="left", maintain_order="left")["short"]
        .alias(names.name)
    )


def human_bytes(n: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n:.0f} B"


def human_ms(ns: float) -> str:
    return f"{ns / 1e6:,.1f} ms"
