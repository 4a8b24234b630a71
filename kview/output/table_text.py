"""Terminal tables as text, from cells already made text: the layout (widths fitted to the
terminal, headers wrapped, long names cut) without polars, so a small answer computed with the
standard library (kview.quick_stats) prints exactly the table render.to_table prints."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable, Sequence

from kview.notation import NAME_COLUMNS, NAME_HEAD, cut, cut_how, distinct_cuts, grouped
from kview.output.format import SECONDARY_COLUMNS, header_lines, longest_word
from kview.output.visible import visible

# The width terminal tables are fitted to when the caller names none: None asks the terminal
# (COLUMNS, else the terminal on stdout; a pipe or a file is not fitted), 0 fits nothing.
_table_width: int | None = None


def set_table_width(width: int | None) -> None:
    """Fit terminal tables to `width` columns (0: fit nothing, as for `-o FILE`; None: the terminal)."""
    global _table_width
    _table_width = width


def terminal_columns() -> int:
    """The columns a table has to fit: COLUMNS, else the terminal on stdout; 0 (no limit) when
    stdout is a pipe or a file, where a line is never wrapped by anyone."""
    if _table_width is not None:
        return _table_width
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        if sys.stdout.isatty():
            return shutil.get_terminal_size((80, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return 0


# the narrowest a text column is squeezed to before columns are left out: kernel names keep
# their first NAME_HEAD characters, paths and layers a few segments, other text a word or two
TEXT_FLOOR = {"Layer": 16, "NVTX Path": 24, "Range": 24, "Path": 24}
TEXT_FLOOR_OTHER = 16
NAME_WEIGHT = 3  # a name column takes this many shares of the room left to text columns


def _floor(column: str, natural: int, width: int) -> int:
    if column in NAME_COLUMNS:  # the start of a name, and on a wide terminal room for what tells it apart
        return min(natural, max(24, min(NAME_HEAD + 20, width * 3 // 10)))
    return max(longest_word(column), min(natural, TEXT_FLOOR.get(column, TEXT_FLOOR_OTHER)))


def _fit_widths(columns: list[str], numeric: list[bool], values: list[int], width: int) -> tuple[list[int], list[int]]:
    """(the columns kept, their widths) so that a row fits `width`: numbers whole, headers
    wrapped between words, text columns sharing what is left. Columns are left out only when
    the rest cannot fit even so: SECONDARY_COLUMNS from the right first, then other text, then
    numbers, each from the right (never the first column or a name column)."""
    n = len(columns)
    minimum = [
        max(values[i], longest_word(c)) if numeric[i] else _floor(c, max(values[i], longest_word(c)), width)
        for i, c in enumerate(columns)
    ]
    kept = list(range(n))

    def need(ix: list[int]) -> int:
        return sum(minimum[i] for i in ix) + 2 * (len(ix) - 1)

    rest = [
        i for i in reversed(kept) if columns[i] not in SECONDARY_COLUMNS and i != 0 and columns[i] not in NAME_COLUMNS
    ]
    # the numbers are the answer: text (context) goes before them
    droppable = (
        [i for i in reversed(kept) if columns[i] in SECONDARY_COLUMNS]
        + [i for i in rest if not numeric[i]]
        + [i for i in rest if numeric[i]]
    )
    for i in droppable:
        if need(kept) <= width:
            break
        kept.remove(i)
    widths = {i: minimum[i] for i in kept}
    spare = width - need(kept)
    # number headers on one line first (a few cells each), then text up to its widest value
    # (names take NAME_WEIGHT shares)
    for i in kept:
        if numeric[i] and spare > 0:
            step = min(spare, len(columns[i]) - widths[i])
            if step > 0:
                widths[i] += step
                spare -= step
    growing = [i for i in kept if not numeric[i] and widths[i] < values[i]]
    while spare > 0 and growing:
        for i in list(growing):
            step = min(NAME_WEIGHT if columns[i] in NAME_COLUMNS else 1, spare, values[i] - widths[i])
            widths[i] += step
            spare -= step
            if widths[i] >= values[i]:
                growing.remove(i)
            if spare <= 0:
                break
    return kept, [widths[i] for i in kept]


def table_text(
    columns: list[str], numeric: list[bool], texts: Iterable[Sequence[str | None]], width: int | None = None
) -> str:
    """A plain aligned table for a terminal: numbers right-aligned with thousands separators and
    never cut; fitted to `width` (None: the terminal's; 0: not fitted) by wrapping headers
    between words, shortening text as the explorer does (notation.cut, distinct_cuts), and,
    only when that is not enough, leaving columns out (named on the last line). `texts` are
    the rows as text (None: NULL), `numeric` says which columns are numbers."""
    width = terminal_columns() if width is None else width
    rows = [[("" if v is None else (grouped(v) if numeric[i] else visible(v))) for i, v in enumerate(r)] for r in texts]
    columns = [visible(c) for c in columns]
    values = [max([0] + [len(r[i]) for r in rows]) for i in range(len(columns))]
    kept, widths = layout(columns, numeric, values, width)
    cuts: dict[int, dict[str, str]] = {}
    for i, w in zip(kept, widths):
        if not numeric[i] and values[i] > w:
            cuts[i] = text_cuts(columns[i], {r[i] for r in rows}, w)
    lines = head_lines(columns, numeric, kept, widths)
    for r in rows:
        cells = []
        for i, w in zip(kept, widths):
            v = r[i]
            if i in cuts:
                v = cuts[i].get(v, v)
            cells.append(v.rjust(w) if numeric[i] else v.ljust(w))
        lines.append("  ".join(cells).rstrip())
    lines += left_out_lines(columns, kept, width)
    return "\n".join(lines) + "\n"


def layout(columns: list[str], numeric: list[bool], values: list[int], width: int) -> tuple[list[int], list[int]]:
    """(the columns kept, their widths) for cells at most `values` long: fitted to `width`, or
    each as wide as its header and its widest cell (0)."""
    if width:
        return _fit_widths(columns, numeric, values, width)
    return list(range(len(columns))), [max(len(c), v) for c, v in zip(columns, values)]


def text_cuts(column: str, values: Iterable[str], width: int) -> dict[str, str]:
    """Each distinct text of a column too wide for `width`, cut as the column is cut (names
    told apart from each other, other text by its own end kept)."""
    if column in NAME_COLUMNS:
        return distinct_cuts(list(values), width)
    how = cut_how(column)
    return {v: cut(v, width, how) for v in set(values)}


def head_lines(columns: list[str], numeric: list[bool], kept: list[int], widths: list[int]) -> list[str]:
    """A table's header lines and its rule (the kept columns at their widths)."""
    heads = [header_lines(columns[i], w) for i, w in zip(kept, widths)]
    depth = max(len(h) for h in heads)
    lines = []
    for k in range(depth):  # a wrapped header's last line sits on the rule, as its values do
        cells = []
        for i, w, h in zip(kept, widths, heads):
            part = h[k - (depth - len(h))] if k >= depth - len(h) else ""
            cells.append(part.rjust(w) if numeric[i] else part.ljust(w))
        lines.append("  ".join(cells).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    return lines


def left_out_lines(columns: list[str], kept: list[int], width: int) -> list[str]:
    """The note naming the columns a fitted table left out (none: no lines)."""
    left_out = [c for i, c in enumerate(columns) if i not in kept]
    if not left_out:
        return []
    # -f json holds every table of every command; csv/tsv one table (--table NAME where there are several)
    note = f"({len(left_out)} more columns at a wider terminal or with -f json: {', '.join(left_out)})"
    return wrap_text(note, width)


def wrap_text(text: str, width: int, indent: str = "") -> list[str]:
    """`text` as lines of at most `width` characters, broken between words (0: one line);
    lines after the first start with `indent`."""
    import textwrap

    if not width:
        return [text]
    return textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=True, break_on_hyphens=False) or [""]
