"""Renderers: one Report (or any titled polars table) to CSV, TSV, Markdown, JSON or a terminal table.

CSV is byte-compatible with `nsys stats --format csv`: Python's csv quoting, integers as
integers, rounded floats as Python prints them, empty cells for NULL, MB with 3 decimals.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable

import polars as pl

from kview.output.format import fit_header, shrink_headers

FORMATS = ("table", "csv", "tsv", "md", "json")
EXTENSIONS = {"table": "txt", "csv": "csv", "tsv": "tsv", "md": "md", "json": "json"}


def _fixed(d: int) -> Callable[[pl.Series], pl.Series]:
    """Numbers as text with `d` decimals, as nsys prints them."""
    return lambda s: pl.Series([None if v is None else f"{v:.{d}f}" for v in s.to_list()], dtype=pl.String)


def cell_strings(frame: pl.DataFrame, decimals: dict[str, int] | None = None) -> pl.DataFrame:
    """Every column as its nsys text form (vectorized; NULL stays NULL)."""
    decimals = decimals or {}
    exprs = []
    for name, dtype in frame.schema.items():
        c = pl.col(name)
        if name in decimals:
            exprs.append(c.map_batches(_fixed(decimals[name]), return_dtype=pl.String).alias(name))
        elif dtype == pl.String:
            exprs.append(c)
        else:
            exprs.append(c.cast(pl.String))
    return frame.select(exprs) if exprs else frame


def to_csv(frame: pl.DataFrame, decimals=None, sep: str = ",") -> str:
    """nsys's CSV: a cell is quoted only when it holds the separator or a line break."""
    if frame.width == 0 or frame.height == 0:  # nsys writes an empty file for an empty report
        return ""
    text = cell_strings(frame, decimals)

    def quote(e: pl.Expr) -> pl.Expr:
        e = e.fill_null("")
        needs = e.str.contains(sep, literal=True) | e.str.contains("\n", literal=True)
        return (
            pl.when(needs)
            .then(pl.concat_str([pl.lit('"'), e.str.replace_all('"', '""', literal=True), pl.lit('"')]))
            .otherwise(e)
        )

    lines = text.select(pl.concat_str([quote(pl.col(c)) for c in text.columns], separator=sep).alias("l"))
    header = sep.join(f'"{c}"' if sep in c else c for c in frame.columns)
    return header + "\n" + "\n".join(lines["l"].to_list()) + "\n"


def to_tsv(frame: pl.DataFrame, decimals=None) -> str:
    if frame.width == 0:
        return ""
    text = cell_strings(frame, decimals)
    lines = ["\t".join(frame.columns)]
    lines += ["\t".join("" if v is None else v.replace("\t", " ") for v in row) for row in text.iter_rows()]
    return "\n".join(lines) + "\n"


def _md_escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def to_markdown(frame: pl.DataFrame, decimals=None) -> str:
    if frame.width == 0:
        return ""
    text = cell_strings(frame, decimals)
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    head = "| " + " | ".join(_md_escape(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---:" if n else "---" for n in numeric) + "|"
    rows = ["| " + " | ".join("" if v is None else _md_escape(v) for v in row) + " |" for row in text.iter_rows()]
    return "\n".join([head, rule, *rows]) + "\n"


def to_json(frame: pl.DataFrame) -> str:
    return json.dumps(frame.to_dicts(), ensure_ascii=False, indent=1) + "\n"


def _group_digits(v: str) -> str:
    """1234567.5 -> 1,234,567.5 as nsys's console tables show numbers."""
    neg = v.startswith("-")
    v = v[1:] if neg else v
    whole, dot, frac = v.partition(".")
    if whole.isdigit():
        whole = f"{int(whole):,}"
    return ("-" if neg else "") + whole + dot + frac


def to_table(frame: pl.DataFrame, decimals=None, width: int | None = None) -> str:
    """A plain aligned table for a terminal (numbers right-aligned with thousands separators)."""
    if frame.width == 0:
        return ""
    width = width or shutil.get_terminal_size((200, 24)).columns
    text = cell_strings(frame, decimals)
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    rows = [
        [("" if v is None else (_group_digits(v) if numeric[i] else v)) for i, v in enumerate(r)]
        for r in text.iter_rows()
    ]
    values = [max([0] + [len(r[i]) for r in rows]) for i in range(len(frame.columns))]
    widths = [max(len(c), v) for c, v in zip(frame.columns, values)]
    # Numbers under a long header (a trace name in compare) give up the header first, then
    # text columns (kernel and range names), widest first, until the row fits.
    shrink_headers(widths, values, list(frame.columns), numeric, width + 2)
    while sum(w + 2 for w in widths) - 2 > width:
        texts = [i for i, n in enumerate(numeric) if not n and widths[i] > max(12, len(frame.columns[i]))]
        if not texts:
            break
        i = max(texts, key=lambda j: widths[j])
        excess = sum(w + 2 for w in widths) - 2 - width
        widths[i] = max(12, len(frame.columns[i]), widths[i] - excess)

    def fmt(cells):
        out = []
        for i, c in enumerate(cells):
            w = widths[i]
            if len(c) > w:
                c = c[: max(w - 1, 0)] + "…"
            out.append(c.rjust(w) if numeric[i] else c.ljust(w))
        return "  ".join(out).rstrip()

    head = "  ".join(
        (fit_header(c, w).rjust(w) if numeric[i] else fit_header(c, w).ljust(w))
        for i, (c, w) in enumerate(zip(frame.columns, widths))
    ).rstrip()
    lines = [head, "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines) + "\n"


# Formats that hold several titled tables in one document; CSV and TSV hold exactly one table.
MULTI_TABLE_FORMATS = ("table", "md", "json")


def render_sections(
    sections: dict[str, pl.DataFrame],
    fmt: str,
    suffix: str = "",
    empty: str | None = None,
    texts: dict[str, str] | None = None,
) -> str:
    """Several titled tables as one document: JSON, one object keyed by title (every table
    there, empty ones as []); Markdown, a `### Title` heading per table; a terminal table,
    `** Title:` blocks. Empty tables print `empty` (or are left out when it is None); `texts`
    replaces a table's body outside JSON. CSV and TSV cannot hold several tables."""
    if fmt == "json":
        return json.dumps({k: v.to_dicts() for k, v in sections.items()}, ensure_ascii=False, indent=1) + "\n"
    if fmt not in MULTI_TABLE_FORMATS:
        raise ValueError(f"{fmt} holds one table; several need json, md or table")
    blocks = []
    for title, df in sections.items():
        if df.height == 0 and empty is None and title not in (texts or {}):
            continue
        body = (texts or {}).get(title) or (render(df, fmt) if df.height else empty or "")
        head = f"### {title}{suffix}\n\n" if fmt == "md" else f"** {title}{suffix}:\n\n"
        blocks.append(head + body)
    return "\n".join(blocks)


def render(frame: pl.DataFrame, fmt: str, decimals=None, width: int | None = None) -> str:
    if fmt == "csv":
        return to_csv(frame, decimals)
    if fmt == "tsv":
        return to_tsv(frame, decimals)
    if fmt == "md":
        return to_markdown(frame, decimals)
    if fmt == "json":
        return to_json(frame)
    if fmt == "table":
        return to_table(frame, decimals, width)
    raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
