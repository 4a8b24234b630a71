"""Allocated and reserved bytes over time as lines of text: the memory timeline in a terminal.

Each column is one slice of time and shows the highest value inside it (a sharp peak is never
averaged away, as it would be by sampling one point per column); a column without events keeps
the level the last event left. Allocated bytes are the filled area (eighth blocks, so a column is
8x finer than a text row), reserved bytes a `─` line above it. Under the time axis a row marks
the phases (a letter each, named in the legend), and the peak is marked `▲` on the axis.

The binning is polars (one group_by over the events); only the W x H characters are Python.
"""

from __future__ import annotations

import polars as pl

from kview.notation import human_bytes, human_ms

EIGHTHS = " ▁▂▃▄▅▆▇█"
LETTERS = "FBOSACDEGHIJKLMNPQRTUVWXYZ"  # each once: a letter names one phase


def columns(series: pl.DataFrame, width: int, t0: int | None = None, t1: int | None = None) -> pl.DataFrame:
    """Per column (0..width-1): the highest allocated and reserved bytes in its time slice."""
    t0 = int(series.select(pl.col("t").min()).item() or 0) if t0 is None else t0
    t1 = int(series.select(pl.col("t").max()).item() or 0) if t1 is None else t1
    span = max(t1 - t0, 1)
    col = ((pl.col("t") - t0) * width // (span + 1)).clip(0, width - 1).alias("col")
    agg = (
        series.select(col, "allocated", "reserved")
        .group_by("col")
        .agg(
            pl.col("allocated").max().alias("a_max"),
            pl.col("reserved").max().alias("r_max"),
            pl.col("allocated").last().alias("a_last"),
            pl.col("reserved").last().alias("r_last"),
        )
    )
    full = pl.DataFrame({"col": range(width)}, schema={"col": pl.Int64}).join(agg, on="col", how="left").sort("col")
    # an empty column holds the level the previous column ended at
    return full.select(
        "col",
        pl.coalesce("a_max", pl.col("a_last").forward_fill().shift(1)).fill_null(0).alias("allocated"),
        pl.coalesce("r_max", pl.col("r_last").forward_fill().shift(1)).fill_null(0).alias("reserved"),
    )


def plot(
    series: pl.DataFrame,
    phases: pl.DataFrame,
    width: int = 80,
    height: int = 12,
    peak: dict | None = None,
    compact: bool = False,
    zero: int | None = None,
    level: str = "allocated",
) -> list[str]:
    """The timeline as `height` plot rows plus an axis, a phase row and a legend, `width` wide
    (`compact`: the phase names and the glyphs' legend on one line, where they fit). The axis
    counts from `zero` (default: the first event); `level` names the filled area."""
    if series.height == 0:
        return ["(no allocator events)"]
    label_w = 10
    w = max(width - label_w - 1, 10)
    t0, t1 = int(series.select(pl.col("t").min()).item() or 0), int(series.select(pl.col("t").max()).item() or 0)
    cols = columns(series, w, t0, t1)
    alloc = cols["allocated"].to_list()
    res = cols["reserved"].to_list()
    top = max(max(res), max(alloc), 1)
    levels = height * 8
    a_lv = [round(v / top * levels) for v in alloc]
    r_row = [min(height - 1, int(v / top * height - 1e-9)) if v > 0 else -1 for v in res]
    peak_col = None
    if peak and peak.get("t") is not None:
        peak_col = min(w - 1, max(0, (int(peak["t"]) - t0) * w // (max(t1 - t0, 1) + 1)))
    rows = []
    for r in range(height - 1, -1, -1):  # top row first
        line = []
        for c in range(w):
            filled = a_lv[c] - r * 8
            if filled >= 8:
                ch = "█"
            elif filled > 0:
                ch = EIGHTHS[filled]
            elif r_row[c] == r:
                ch = "─"
            else:
                ch = " "
            line.append(ch)
        label = human_bytes(top * (r + 1) / height) if r in (height - 1, height // 2, 0) else ""
        rows.append(f"{label:>{label_w}}│{''.join(line)}")
    axis = ["─"] * w
    if peak_col is not None:  # on the axis, where no value can hide it
        axis[peak_col] = "▲"
    rows.append(" " * label_w + "└" + "".join(axis))
    z = t0 if zero is None else zero
    left, right = human_ms(t0 - z), human_ms(t1 - z)
    rows.append(" " * (label_w + 1) + left + " " * max(1, w - len(left) - len(right)) + right)
    if phases.height:
        names = phases["Phase"].unique(maintain_order=True).to_list()
        letter = {n: (LETTERS[i] if i < len(LETTERS) else "?") for i, n in enumerate(names)}
        marks = [" "] * w
        for p in phases.iter_rows(named=True):
            a = max(0, min(w - 1, (int(p["start"]) - t0) * w // (t1 - t0 + 1)))
            b = max(a, min(w - 1, (int(p["end"]) - t0) * w // (t1 - t0 + 1)))
            if int(p["end"]) < t0 or int(p["start"]) > t1:
                continue
            for c in range(a, b + 1):
                marks[c] = "·" if c > a else letter[p["Phase"]]
        rows.append(f"{'phases':>{label_w}} " + "".join(marks))
        legend = [""]  # the phase names, wrapped between names to the plot's width
        for entry in (f"{letter[n]} {n}" for n in names):
            if legend[-1] and len(legend[-1]) + 2 + len(entry) > w:
                legend.append("")
            legend[-1] += ("  " if legend[-1] else "") + entry
        rows += [" " * (label_w + 1) + x for x in legend]
    glyphs = f"█ {level}" + ("  ─ reserved" if max(res) > 0 else "") + ("  ▲ peak" if peak_col is not None else "")
    if compact and phases.height and len(rows[-1]) + 3 + len(glyphs) <= width:
        rows[-1] += "   " + glyphs
    else:
        rows.append(" " * (label_w + 1) + glyphs)
    return rows
