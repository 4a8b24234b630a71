"""Renderers: one Report (or any titled polars table) to CSV, TSV, Markdown, JSON or a terminal table.

CSV is byte-compatible with `nsys stats --format csv`: Python's csv quoting, integers as
integers, rounded floats as Python prints them, empty cells for NULL, MB with 3 decimals.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, BinaryIO, Literal, cast

import polars as pl

from kview.analysis.summary_stats import texts_in_row_order
from kview.formats import DATA_FORMATS, FORMATS, MULTI_TABLE_FORMATS
from kview.formats import EXTENSIONS as EXTENSIONS  # render.EXTENSIONS, as before
from kview.notation import fixed
from kview.output.table_text import (
    head_lines,
    layout,
    left_out_lines,
    table_text,
    terminal_columns,
    text_cuts,
    wrap_text,
)
from kview.output.table_text import set_table_width as set_table_width  # the command line's
from kview.output.text_bytes import lacks, lacks_each, repeats, scattered
from kview.output.visible import ANY, ANY_ASCII, IN_LINES, IN_LINES_ASCII, VisibleStream, json_visible, visible

if TYPE_CHECKING:
    from kview.documents import Document, Section


def _fixed(d: int) -> Callable[[pl.Series], pl.Series]:
    """Numbers as text with `d` decimals, as nsys prints them (notation.fixed)."""
    return lambda s: pl.Series(fixed(s.to_list(), d), dtype=pl.String)


def _as_text(frame: pl.DataFrame, decimals: dict[str, int] | None, kept: Callable[[pl.DataType], bool]) -> pl.DataFrame:
    """Fixed-decimal columns as their text, columns whose type `kept` accepts as they are, every
    other column cast to its text (vectorized; NULL stays NULL)."""
    decimals = decimals or {}
    exprs = []
    for name, dtype in frame.schema.items():
        c = pl.col(name)
        if name in decimals:
            exprs.append(c.map_batches(_fixed(decimals[name]), return_dtype=pl.String).alias(name))
        elif kept(dtype):
            exprs.append(c)
        else:
            exprs.append(c.cast(pl.String))
    return frame.select(exprs) if exprs else frame


def cell_strings(frame: pl.DataFrame, decimals: dict[str, int] | None = None) -> pl.DataFrame:
    """Every column as its nsys text form."""
    return _as_text(frame, decimals, lambda dtype: dtype == pl.String)


def _as_written(dtype) -> bool:
    """Columns polars' writers print exactly as their text form (cast to String): strings,
    integers and floats (shortest round-trip digits, `NaN`, `inf`) go to the writer as they are."""
    return dtype == pl.String or dtype.is_integer() or dtype in (pl.Float32, pl.Float64)


def _cells(
    frame: pl.DataFrame, decimals: dict[str, int] | None = None, odd: tuple[str, ...] | None = None
) -> pl.DataFrame:
    """The table as the writers take it: strings and numbers as they are, fixed-decimal columns
    as their text, every other type (categories, booleans, times) cast to its text once. An Enum
    column stays as it is (polars writes its names) when no name is empty or holds one of the
    characters `odd` this format has to treat, so its million rows are not made text first."""
    decimals = decimals or {}

    def kept(dtype) -> bool:
        if _as_written(dtype):
            return True
        if odd is None or not isinstance(dtype, pl.Enum):
            return False
        names = pl.Series(dtype.categories, dtype=pl.String)
        return not (names.str.len_bytes() == 0).any() and not names.str.contains_any(list(odd)).any()

    if not decimals and all(_as_written(t) for t in frame.dtypes):
        return frame
    return _as_text(frame, decimals, kept)


# Where a column has to be rewritten for its format (quoting, escapes), the table is written a
# slice at a time, so the rewritten text never exists for a million rows at once; a table written
# as it is goes to polars' writer whole (which streams it out in chunks on every core).
BATCH_ROWS = 250_000


def _os_error(e: OSError) -> OSError:
    """polars' writers raise a plain OSError whose text holds the system's error number
    (`Broken pipe (os error 32)`, `[Errno 28] No space left on device`): that number as
    Python's own OSError (a closed pipe is then BrokenPipeError, as a write of Python's is)."""
    if e.errno is not None:
        return e
    found = re.search(r"os error (\d+)|\[Errno (\d+)\]", str(e))
    if not found:
        return e
    number = int(found.group(1) or found.group(2))
    return OSError(number, os.strerror(number))


def _out(write: Callable[[], None]) -> None:
    """Run one polars write into the caller's stream; its failures as Python's own OSErrors."""
    try:
        write()
    except OSError as e:
        error = _os_error(e)
        if error is e:
            raise
        raise error from None


def _written(
    frame: pl.DataFrame,
    out: BinaryIO,
    rewrite: dict[str, pl.Expr],
    separator: str = ",",
    include_header: bool = False,
    quote_style: Literal["necessary", "never"] = "never",
    texts: list[str] | None = None,
) -> None:
    """`frame` through polars' CSV writer straight into `out`, the columns in `rewrite` replaced
    by their expressions slice by slice. A text column whose bytes lie out of row order (sorted
    after it was made) is copied in row order a slice at a time: the writer reads each value's
    bytes after the last one's instead of waiting on memory for each (nvtx_sum's 5.6M names:
    write 5.0 -> 2.5 CPU s, the copy included), and the copy is one slice's. `texts`: the
    columns that may need it (None: every column; looking at a column of one repeated value
    makes it whole, a copy of it for every row)."""

    def one(part: pl.DataFrame, header: bool) -> None:
        _out(
            lambda: part.write_csv(
                out,
                separator=separator,
                quote_style=quote_style,
                include_header=header,
                line_terminator="\n",
            )
        )

    looked = frame.columns if texts is None else texts
    copied = [c for c in looked if frame.height > BATCH_ROWS and scattered(frame[c])]
    if not rewrite and not copied:
        one(frame, include_header)
        return
    exprs = [rewrite.get(c, pl.col(c)).alias(c) for c in frame.columns]
    for i, part in enumerate(_slices_in_row_order(frame, copied)):
        one(part.select(exprs), include_header and i == 0)


def _slices_in_row_order(frame: pl.DataFrame, copied: list[str]) -> Iterator[pl.DataFrame]:
    """`frame` a slice of BATCH_ROWS at a time (one empty slice for no rows), its text columns
    `copied` copied in row order, each slice in up to COPY_THREADS pieces given one after the
    other. The next slice is copied while this one is written, a piece of it per thread: the
    copy waits on memory for each text and releases the GIL, and on one thread it was the
    writer's critical path where the cores are many (nvtx_sum's 5.6M names: 0.8 s of one
    thread, the write itself 1.4 CPU s over every core). Two slices' copies are held at once,
    no more."""

    def made(offset: int) -> pl.DataFrame:
        part = frame.slice(offset, BATCH_ROWS)
        return part.with_columns(texts_in_row_order(pl.col(c)) for c in copied) if copied else part

    offsets = range(0, max(frame.height, 1), BATCH_ROWS)
    if not copied or len(offsets) < 2:
        yield from (made(o) for o in offsets)
        return
    from concurrent.futures import Future, ThreadPoolExecutor

    from kview.io.sqlite_source import read_threads  # deferred: only a large table is copied

    workers = min(COPY_THREADS, read_threads())

    def pieces(offset: int) -> list[tuple[int, Future[pl.DataFrame]]]:
        part = frame.slice(offset, BATCH_ROWS).select(copied)
        cuts = [part.height * i // workers for i in range(workers + 1)]
        return [
            (
                offset + a,
                pool.submit(
                    lambda a, b: part.slice(a, b - a).with_columns(texts_in_row_order(pl.col(c)) for c in copied), a, b
                ),
            )
            for a, b in zip(cuts, cuts[1:])
            if a < b
        ]

    with ThreadPoolExecutor(workers) as pool:
        ahead = pieces(offsets[0])
        for i in range(len(offsets)):
            now, ahead = ahead, pieces(offsets[i + 1]) if i + 1 < len(offsets) else []
            # each piece written as it is (a piece's rows are a slice's rows): joined, the
            # pieces' texts were copied once more, beside them (+35 MB at nvtx_sum's peak)
            for at, texts in now:
                got = texts.result()
                yield frame.slice(at, got.height).with_columns(got.get_columns())
                del got
            del now


COPY_THREADS = 4  # threads copying a slice's texts in row order, a piece each


def _any(frame: pl.DataFrame, tests: dict[str, pl.Expr]) -> dict[str, bool]:
    """Which of the named tests hold for some row (one pass of polars over the table)."""
    if not tests:
        return {}
    row = frame.select(e.any().alias(k) for k, e in tests.items()).row(0)
    return {k: bool(v) for k, v in zip(tests, row)}


def _texts(frame: pl.DataFrame) -> list[str]:
    return [c for c, t in frame.schema.items() if t == pl.String]


def write_csv(
    frame: pl.DataFrame, out: BinaryIO, decimals=None, sep: str = ",", plain: frozenset[str] = frozenset()
) -> None:
    """nsys's CSV: a cell is quoted only when it holds the separator or a line break (quotes
    doubled inside it); a quote alone is left as it is, as nsys leaves it; NULL is empty. A
    table without rows is its header line, so a reader still learns the columns. `plain`: text
    columns known to hold neither a quote nor a carriage return (`write` looked already)."""
    if frame.width == 0:
        return
    out.write((sep.join(f'"{c}"' if sep in c else c for c in frame.columns) + "\n").encode())
    if frame.height == 0:
        return
    # numbers never hold a separator, a quote or a line break: only text columns are looked at,
    # once for the whole table
    cells = _cells(frame, decimals, odd=('"', "\r"))
    texts = _texts(cells)
    # a column whose buffers hold neither byte needs no test of each value (text_bytes)
    unquoted = {c for c in texts if c in plain or lacks(cells[c], '"\r')}
    seen = _any(
        cells,
        {
            **{f"x{i}": pl.col(c).str.contains_any(['"', "\r"]) for i, c in enumerate(texts) if c not in unquoted},
            **{f"e{i}": pl.col(c).str.len_bytes() == 0 for i, c in enumerate(texts)},
        },
    )
    if not any(seen.get(f"x{i}") for i in range(len(texts))):
        # no quote or carriage return anywhere: polars' own minimal quoting is nsys's rule,
        # once empty strings (which it would write as "") are nulls
        blank = {
            c: pl.when(pl.col(c).str.len_bytes() == 0).then(None).otherwise(pl.col(c))
            for i, c in enumerate(texts)
            if seen[f"e{i}"]
        }
        _written(cells, out, blank, separator=sep, quote_style="necessary")
        return
    # quotes somewhere: polars would quote a cell for them, nsys does not; the cells that need
    # quotes get them here, and polars writes every cell as it is
    cells = _cells(frame, decimals)
    texts = _texts(cells)
    needs = _any(
        cells,
        {
            c: pl.col(c).str.contains_any([sep, "\n"])
            for c in texts
            if not (sep.isascii() and lacks(cells[c], sep + "\n"))
        },
    )
    _written(cells, out, {c: _quoted(pl.col(c), sep) for c in texts if needs.get(c)}, separator=sep)


def _quoted(e: pl.Expr, sep: str) -> pl.Expr:
    needs = e.str.contains(sep, literal=True) | e.str.contains("\n", literal=True)
    return (
        pl.when(needs)
        .then(pl.concat_str([pl.lit('"'), e.str.replace_all('"', '""', literal=True), pl.lit('"')]))
        .otherwise(e)
    )


def write_tsv(frame: pl.DataFrame, out: BinaryIO, decimals=None, plain: frozenset[str] = frozenset()) -> None:
    """Tab-separated, nothing quoted: a tab inside a cell becomes a space. `plain`: text columns
    known to hold no tab."""
    if frame.width == 0:
        return
    cells = _cells(frame, decimals, odd=("\t",))
    texts = _texts(cells)
    tabs = _any(
        cells,
        {c: pl.col(c).str.contains("\t", literal=True) for c in texts if c not in plain and not lacks(cells[c], "\t")},
    )
    spaced = {c: pl.col(c).str.replace_all("\t", " ", literal=True) for c in texts if tabs.get(c)}
    _written(cells, out, spaced, separator="\t", include_header=True)


# What CommonMark and GitHub would read as markup inside a table cell: inline HTML and
# autolinks (`<float>`), emphasis (`*`, `_`), strikethrough (`~`), code spans, entities (`&lt;`),
# links (`[x](y)`, opened by `[`), the cell separator and the escape character itself. Each is backslash-escaped, which both
# render as the character; a line break would end the row, so it becomes a space.
MD_SPECIAL = ("\\", "`", "*", "_", "<", ">", "|", "~", "&", "[", "\n", "\r")
_MD_CLASS = r"[\\`*_<>|~&\[]"


def _md_escape(e: pl.Expr) -> pl.Expr:
    return e.str.replace_all(_MD_CLASS, r"\$0").str.replace_all(r"\r\n|\r|\n", " ")


def code_block(text: str) -> str:
    """`text` as a Markdown code block, fenced by more backticks than any run of them inside
    it, so nothing inside is read as Markdown."""
    fence = "`" * max([3] + [len(m) + 1 for m in re.findall(r"`+", text)])
    return f"{fence}\n{text}{'' if text.endswith(chr(10)) else chr(10)}{fence}\n"


def md_escape(text: str) -> str:
    """One piece of text (a title, a heading) as Markdown shows it literally."""
    return re.sub(r"\r\n|\r|\n", " ", re.sub(_MD_CLASS, lambda m: "\\" + m.group(0), text))


def write_markdown(frame: pl.DataFrame, out: BinaryIO, decimals=None, plain: frozenset[str] = frozenset()) -> None:
    """A Markdown table: `| a | b |` lines. Written by polars' CSV writer with a space as the
    separator between the cells and `|` columns around them, so each cell is copied once; only
    columns holding a character of MD_SPECIAL are escaped (slice by slice). `plain`: text
    columns known to hold none."""
    if frame.width == 0:
        return
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    head = pl.DataFrame({"c": list(frame.columns)}).select(_md_escape(pl.col("c")))["c"].to_list()
    out.write(
        ("| " + " | ".join(head) + " |\n" + "|" + "|".join("---:" if n else "---" for n in numeric) + "|\n").encode()
    )
    if frame.height == 0:
        return
    cells = _cells(frame, decimals, odd=MD_SPECIAL)
    texts = _texts(cells)
    odd = _any(
        cells,
        {
            c: pl.col(c).str.contains_any(list(MD_SPECIAL))
            for c in texts
            if c not in plain and not lacks(cells[c], "".join(MD_SPECIAL))
        },
    )
    bar = pl.repeat("|", cells.height, dtype=pl.String)
    names = [f"c{i}" for i in range(cells.width)]
    lined = cells.rename(dict(zip(cells.columns, names))).select(
        [bar.alias("b0")] + [e for i, n in enumerate(names) for e in (pl.col(n), bar.alias(f"b{i + 1}"))]
    )
    escaped = {n: _md_escape(pl.col(n)) for n, c in zip(names, cells.columns) if c in odd and odd[c]}
    # the bars are one repeated value: only the cells' text may need a copy
    _written(lined, out, escaped, separator=" ", texts=[n for n, c in zip(names, cells.columns) if c in texts])


class _Rows:
    """A file polars' NDJSON writer writes into: every line break between two rows becomes
    `,\n`, so the lines are the elements of one JSON array (ndjson escapes line breaks inside
    values, so every raw one ends a row). The last row's line break is held back."""

    def __init__(self, out: BinaryIO, first: bool) -> None:
        self.out, self.first, self.pending = out, first, False

    def write(self, b) -> int:
        if not b:
            return 0
        text = json_visible(bytes(b)).replace(b"\n", b",\n")
        head = b"[\n" if self.first else b",\n" if self.pending else b""
        self.first = False
        self.pending = text.endswith(b",\n")
        self.out.write(head)
        self.out.write(memoryview(text)[: len(text) - 2] if self.pending else text)
        return len(b)

    def flush(self) -> None:
        pass


def _json_rows(frame: pl.DataFrame, out: BinaryIO) -> None:
    """A JSON array of row objects, one row a line (polars' own JSON writer; NaN and infinities,
    which JSON cannot hold, as null)."""
    rows = _Rows(out, first=True)

    def one(part: pl.DataFrame) -> None:
        _out(lambda: part.write_ndjson(cast(BinaryIO, rows)))

    # a text column whose bytes lie out of row order is copied in row order a slice at a time,
    # as `_written` does (nvtx_sum's 5.6M names: 7.1 -> 4.5 CPU s, the copy included)
    texts = [c for c, t in frame.schema.items() if t == pl.String]
    copied = [c for c in texts if frame.height > BATCH_ROWS and scattered(frame[c])]
    if copied:
        for part in _slices_in_row_order(frame, copied):
            one(part)
    elif frame.height:
        one(frame)
    out.write(b"[]" if rows.first else b"\n]")


def write_json(frame: pl.DataFrame, out: BinaryIO) -> None:
    _json_rows(frame, out)
    out.write(b"\n")


def write_json_object(tables: dict[str, pl.DataFrame], out: BinaryIO) -> None:
    """Several tables as one JSON object keyed by name, each an array of row objects."""
    for i, (name, frame) in enumerate(tables.items()):
        out.write(
            ("{" if i == 0 else ",\n").encode() + json_visible(json.dumps(name, ensure_ascii=False).encode()) + b": "
        )
        _json_rows(as_data(frame), out)
    out.write(b"}\n" if tables else b"{}\n")


# kview's tables write `-` where a text value is missing (no layer, no op markers, no launch
# dimensions); the data formats carry it as missing instead: null in JSON, an empty cell in CSV/TSV
MISSING = "-"


def as_data(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with every text cell that reads `-` made missing (only the columns holding one
    are rewritten)."""
    texts = [c for c, t in frame.schema.items() if t == pl.String]
    if not texts or frame.height == 0:
        return frame
    marked = _any(frame, {c: pl.col(c) == MISSING for c in texts})
    rewrite = [pl.when(pl.col(c) != MISSING).then(pl.col(c)).alias(c) for c in texts if marked[c]]
    return frame.with_columns(rewrite) if rewrite else frame


# the characters each text format treats in a cell, besides the control characters: CSV quotes
# (and a carriage return), TSV tabs, Markdown its markup
FORMAT_SPECIAL = {"csv": '"\r', "tsv": "\t", "md": "".join(MD_SPECIAL)}


def write(frame: pl.DataFrame, fmt: str, out: BinaryIO, decimals=None, width: int | None = None) -> None:
    """One table in `fmt` to a binary stream as polars writes it (never the whole document in
    memory); every control character in it made visible (JSON escapes them itself)."""
    if fmt in DATA_FORMATS:
        frame = as_data(frame)
    if fmt == "json":
        write_json(frame, out)
        return
    # each large text column's bytes looked at once for control characters and for the
    # characters the format treats (text_bytes)
    special = FORMAT_SPECIAL.get(fmt)
    looked = {
        c: lacks_each(frame[c], [(IN_LINES_ASCII, True)] + ([(special, False)] if special else []))
        for c, t in frame.schema.items()
        if t == pl.String
    }
    plain = frozenset(c for c, lacking in looked.items() if special and lacking[1])
    if not _may_hold_controls(frame, frozenset(c for c, lacking in looked.items() if lacking[0])):
        # only the cells can hold a control character (the layouts add none): a table whose
        # cells hold none is written as it is, not scanned byte by byte on its way out (a
        # million kernels' CSV is 1.8 GB, and the scan in Python was most of its CPU time)
        _write_text(frame, fmt, out, decimals, width, plain)
        return
    shown = VisibleStream(out)
    _write_text(frame, fmt, cast(BinaryIO, shown), decimals, width, plain)
    shown.finish()


def _may_hold_controls(frame: pl.DataFrame, clean: frozenset[str] = frozenset()) -> bool:
    """Whether a cell or a column name of `frame` may hold a control character (visible.IN_LINES):
    its text columns and the names of its categories (those present, for a Categorical) are looked at, in one pass of polars; a
    column of any type other than text, numbers, booleans and times counts as one that may."""
    if any(re.search(IN_LINES, c) for c in frame.columns):
        return True
    tests: dict[str, pl.Expr] = {}
    for i, (c, t) in enumerate(frame.schema.items()):
        if t == pl.String:
            if c in clean or lacks(frame[c], IN_LINES_ASCII, c1=True):
                continue
            # a column that repeats a few texts (a kernel's name, its shapes: 37 distinct
            # texts of 1 KB each over a million kernels) is looked at once per distinct text
            col = pl.col(c).unique() if repeats(frame[c]) else pl.col(c)
            tests[f"c{i}"] = col.str.contains(IN_LINES)
        elif isinstance(t, (pl.Enum, pl.Categorical)):
            names = t.categories if isinstance(t, pl.Enum) else frame[c].unique().cast(pl.String).drop_nulls()
            if names.str.contains(IN_LINES).any():
                return True
        elif not (t.is_numeric() or t.is_temporal() or t in (pl.Boolean, pl.Null)):
            return True
    return frame.height > 0 and any(_any(frame, tests).values())


def _write_text(
    frame: pl.DataFrame,
    fmt: str,
    out: BinaryIO,
    decimals=None,
    width: int | None = None,
    plain: frozenset[str] = frozenset(),
) -> None:
    """`frame` in text format `fmt`; `plain`: its text columns known to hold none of the
    format's FORMAT_SPECIAL characters."""
    if fmt == "csv":
        write_csv(frame, out, decimals, plain=plain)
    elif fmt == "tsv":
        write_tsv(frame, out, decimals, plain)
    elif fmt == "md":
        write_markdown(frame, out, decimals, plain)
    elif fmt == "table":
        write_table(frame, out, decimals, width)
    else:
        raise ValueError(f"unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


def _text(writer, *args) -> str:
    """A text format's document as one string, its control characters made visible (as `write`'s)."""
    buf = io.BytesIO()
    shown = VisibleStream(buf)
    writer(*args[:1], cast(BinaryIO, shown), *args[1:])
    shown.finish()
    return buf.getvalue().decode()


def to_csv(frame: pl.DataFrame, decimals=None, sep: str = ",") -> str:
    return _text(write_csv, frame, decimals, sep)


def to_tsv(frame: pl.DataFrame, decimals=None) -> str:
    return _text(write_tsv, frame, decimals)


def to_markdown(frame: pl.DataFrame, decimals=None) -> str:
    return _text(write_markdown, frame, decimals)


def to_json(frame: pl.DataFrame) -> str:
    buf = io.BytesIO()
    write_json(frame, buf)
    return buf.getvalue().decode()


def to_table(frame: pl.DataFrame, decimals=None, width: int | None = None) -> str:
    """A plain aligned table for a terminal (table_text.table_text over the cells' text)."""
    if frame.width == 0:
        return ""
    text = cell_strings(frame, decimals)
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    return table_text(list(frame.columns), numeric, text.iter_rows(), width)


# A table of more rows than this is laid out by polars and written a slice at a time (the same
# bytes as table_text's); a smaller one is laid out in Python (as fast up to ~1,000 rows: 19 columns,
# 5,000 rows 0.16 -> 0.08-0.11 CPU s, 80,000 rows 1.8-2.5 -> 0.65-0.86).
TABLE_ROWS = 2_000


def _grouped(e: pl.Expr) -> pl.Expr:
    """notation.grouped as an expression: the whole part of a number's text, when it is digits
    alone, with thousands separators (a sign and a fraction kept as they are)."""
    neg = e.str.starts_with("-")
    body = pl.when(neg).then(e.str.slice(1)).otherwise(e)
    whole = body.str.extract(r"^([^.]*)", 1)
    rest = body.str.slice(whole.str.len_chars())
    digits = whole.str.strip_chars_start("0").replace("", "0")
    # every third digit from the right, read on the reversed digits
    sep = digits.str.reverse().str.replace_all(r"(\d{3})", "${1},").str.strip_chars_end(",").str.reverse()
    whole = pl.when(whole.str.contains(r"^[0-9]+$")).then(sep).otherwise(whole)
    return pl.concat_str([pl.when(neg).then(pl.lit("-")).otherwise(pl.lit("")), whole, rest])


def _visible(s: pl.Series) -> pl.Series:
    """visible() of every value, called once per distinct value that holds a control character."""
    if lacks(s, ANY_ASCII, c1=True):
        return s
    odd = s.filter(s.str.contains(ANY)).unique()
    if odd.len() == 0:
        return s
    return s.replace(odd, pl.Series([visible(v) for v in odd.to_list()], dtype=pl.String))


def write_table(frame: pl.DataFrame, out: BinaryIO, decimals=None, width: int | None = None) -> None:
    """to_table's text into `out`; a large table laid out by polars expressions (the cells'
    text, widths from the column maxima, cuts over distinct values, padding) and written a
    slice of rows at a time, never as one document."""
    if frame.height <= TABLE_ROWS or frame.width == 0:
        out.write(to_table(frame, decimals, width).encode())
        return
    width = terminal_columns() if width is None else width
    numeric = [dt.is_numeric() for dt in frame.dtypes]
    columns = [visible(c) for c in frame.columns]
    text = cell_strings(frame, decimals)
    text = text.select(
        (_grouped(pl.col(c)) if numeric[i] else pl.col(c)).fill_null("").alias(f"c{i}")
        for i, c in enumerate(text.columns)
    )
    text = text.with_columns(_visible(text[f"c{i}"]) for i in range(len(columns)) if not numeric[i])
    most = text.select(pl.all().str.len_chars().max()).row(0)
    values = [int(v or 0) for v in most]
    kept, widths = layout(columns, numeric, values, width)
    shown = []
    for i, w in zip(kept, widths):
        if not numeric[i] and values[i] > w:
            distinct = text[f"c{i}"].unique()
            names = distinct.to_list()
            cuts = text_cuts(columns[i], names, w)
            shown.append(pl.col(f"c{i}").replace(distinct, pl.Series([cuts[v] for v in names], dtype=pl.String)))
        else:
            shown.append(pl.col(f"c{i}"))
    text = text.select(shown)  # only the columns shown, cut
    out.write(("\n".join(head_lines(columns, numeric, kept, widths)) + "\n").encode())
    # padded and joined a slice at a time: the lines never exist for every row at once
    # the last column is not padded at its end: the strip would take the padding off again (a
    # name column thousands of characters wide at its widest, padded on every row, would be most
    # of the time)
    cells = [
        pl.col(c).str.pad_start(w) if numeric[i] else pl.col(c).str.pad_end(w) if k < len(kept) - 1 else pl.col(c)
        for k, (c, i, w) in enumerate(zip(text.columns, kept, widths))
    ]
    line = pl.concat_str(cells, separator="  ").str.strip_chars_end().alias("line")

    def one(part: pl.DataFrame) -> None:
        _out(lambda: part.write_csv(out, include_header=False, quote_style="never", line_terminator="\n"))

    for offset in range(0, text.height, BATCH_ROWS):
        one(text.slice(offset, BATCH_ROWS).select(line))
    note = left_out_lines(columns, kept, width)
    if note:
        out.write(("\n".join(note) + "\n").encode())


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
        buf = io.BytesIO()
        write_json_object(sections, buf)
        return buf.getvalue().decode()
    if fmt not in MULTI_TABLE_FORMATS:
        raise ValueError(f"{fmt} holds one table; several need json, md or table")
    blocks = []
    for title, df in sections.items():
        if df.height == 0 and empty is None and title not in (texts or {}):
            continue
        body = (texts or {}).get(title) or (render(df, fmt) if df.height else empty or "")
        if fmt == "md":
            head = f"### {md_escape(title + suffix)}\n\n"
        else:
            head = "\n".join(wrap_text(f"** {title}{suffix}:", terminal_columns(), "   ")) + "\n\n"
        blocks.append(head + body)
    return "\n".join(blocks)


def render(frame: pl.DataFrame, fmt: str, decimals=None, width: int | None = None) -> str:
    """One table in `fmt` as text (for files, the clipboard and tests; stdout is streamed by emit)."""
    buf = io.BytesIO()
    write(frame, fmt, buf, decimals, width)
    return buf.getvalue().decode()


def emit(frame: pl.DataFrame, fmt: str, decimals=None, width: int | None = None) -> None:
    """One table in `fmt` to stdout as it is made (polars writes it in chunks, on every core)."""
    _to_stdout(lambda out: write(frame, fmt, out, decimals, width))


def emit_json_object(tables: dict[str, pl.DataFrame]) -> None:
    """Several tables to stdout as one JSON object keyed by name."""
    _to_stdout(lambda out: write_json_object(tables, out))


def _to_stdout(writer) -> None:
    stream = sys.stdout
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text-only stdout (a caller's StringIO)
        buf = io.BytesIO()
        writer(buf)
        stream.write(buf.getvalue().decode())
        return
    stream.flush()
    writer(binary)
    binary.flush()


def one_table(doc: Document, fmt: str, table: str | None = None) -> Section | None:
    """The section a document in `fmt` is alone, untitled: `table` (by name), its only section,
    or the only one its whole document holds in `fmt`; None when it is several titled tables."""
    if table is not None:
        return doc.section(table)
    if len(doc.sections) == 1:
        return doc.sections[0]
    whole = [s for s in doc.sections if s.in_whole(fmt)]
    return whole[0] if len(whole) == 1 else None


def written(doc: Document, frame: pl.DataFrame, fmt: str) -> bool:
    """Whether `frame`, the document's one table, is written in `fmt` (a table without rows is
    not, in the formats the document says)."""
    return frame.height > 0 or doc.written_empty is None or fmt in doc.written_empty


def render_document(doc: Document, fmt: str, table: str | None = None, texts: dict[str, str] | None = None) -> str:
    """A Document in `fmt`: its one section (`one_table`) untitled, or every section its whole
    document holds in `fmt` (render_sections, each title followed by the document's suffix). A
    terminal table shows a list of sentences as wrapped bullets; `texts` (by title) replaces a
    section's body in a terminal table or Markdown (a plot drawn for the terminal's width)."""
    one = one_table(doc, fmt, table)
    if one is not None:  # one table: that table alone, untitled
        if one.picture is not None and fmt in ("table", "md"):
            return code_block(one.picture) if fmt == "md" else one.picture
        frame = one.frame_for(fmt)
        return render(frame, fmt) if written(doc, frame, fmt) else ""
    shown = [s for s in doc.sections if s.in_whole(fmt)]
    bodies = dict(texts or {})
    if fmt == "table":
        width = terminal_columns()
        for s in shown:
            if s.bullets and s.title not in bodies:
                column = s.frame.columns[0]
                bodies[s.title] = "".join(
                    line + "\n" for f in s.frame[column].to_list() for line in wrap_text(f"- {f}", width, "  ")
                )
    return render_sections(
        {s.title: s.frame_for(fmt) for s in shown}, fmt, suffix=doc.suffix, empty=doc.empty, texts=bodies or None
    )
