"""Where `e` writes what a view shows, and what data formats leave out."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from kview.output import render

EXPORT_FORMATS = ("md", "csv", "tsv", "json")


def destination(stem: str, fmt: str, folder: Path | None = None) -> Path:
    """`<folder>/<stem>.<ext>` with the stem made a file name (`lm_kernels by layer` ->
    `lm_kernels_by_layer`); when that file exists, the first free `<stem>-N.<ext>`, so an export
    never overwrites a file."""
    return free_path(stem, render.EXTENSIONS[fmt], folder)


def free_path(stem: str, ext: str, folder: Path | None = None) -> Path:
    """`<folder>/<stem>.<ext>` (the working directory by default), the stem made a file name,
    or the first free `<stem>-N.<ext>`."""
    folder = Path.cwd() if folder is None else folder
    stem = re.sub(r"[^\w.+-]+", "_", stem).strip("_") or "kview"
    out = folder / f"{stem}.{ext}"
    n = 1
    while out.exists():
        out = folder / f"{stem}-{n}.{ext}"
        n += 1
    return out


def without_bars(shown) -> pl.DataFrame:
    """The table of `shown` (views.base.Shown) without its bar columns: CSV, TSV and JSON carry
    the numbers the bars draw, never the glyphs."""
    return shown.frame.drop([c for c in shown.bars if c in shown.frame.columns])
