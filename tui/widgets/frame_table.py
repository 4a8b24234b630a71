"""A table over a polars DataFrame that renders only the rows on screen (Textual Line API).

The frame stays in polars; a screen of rows is formatted on demand, so a million-row table
scrolls, sorts and filters at the speed of polars, not of a widget per cell. Cursor row and
column, sorting by the column under the cursor, category colours, and share bars.

Column widths come from the whole column, not the first rows, so a sort or `end` never shows a
cut value. Numbers are never cut (the table scrolls sideways instead); names shorten in the
middle (kernel names) or keep their end (paths). Like VisiData, a column can be hidden (`-`),
shown again (`=`), widened and narrowed (`>` `<`) or shown full (`_`); `u` shows durations in
ns, µs or ms.
"""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kview.notation import NAME_COLUMNS, cut, cut_how, distinct_cuts, fmt_cell
from kview.output.format import fit_header, shrink_headers
from kview.output.visible import visible
from kview.tui.keymap import TABLE_KEYS, bindings

# 16-colour safe: named ANSI colours only, consistent across views.
CATEGORY_COLOURS = {
    "gemm": "green",
    "attention": "bright_green",
    "elementwise": "cyan",
    "reduction": "blue",
    "normalization": "magenta",
    "softmax": "bright_magenta",
    "embedding/index": "yellow",
    "memcpy": "red",
    "memset": "bright_red",
    "communication": "bright_yellow",
    "optimizer": "bright_blue",
    "other": "white",
}
DIRECTION_COLOURS = {"fprop": "green", "bprop": "yellow", "optim": "bright_blue"}
# the widest a text column starts (`_` shows it full) and the narrowest it is squeezed to
MAX_WIDTH = {
    "Kernel": 70,
    "Name": 70,
    "Short name": 60,
    "Layer": 40,
    "NVTX Path": 60,
    "Params": 32,
    "Range": 60,
    "Path": 70,
    "Op": 24,
}
MIN_WIDTH = {
    "Kernel": 40,
    "Name": 40,
    "Short name": 30,
    "Layer": 20,
    "NVTX Path": 24,
    "Params": 16,
    "Range": 24,
    "Path": 30,
}
HARD_MIN_WIDTH = 14  # the narrowest any text column gets before the table scrolls sideways
EXACT_ROWS = 100_000  # above this, text widths come from the frame's width hints (computed once)
UNITS = {"ns": 1, "µs": 1_000, "ms": 1_000_000}


def is_duration(column: str) -> bool:
    return column.endswith("(ns)")


class FrameTable(ScrollView, can_focus=True):
    """Cursor over a polars frame; posts RowHighlighted and RowSelected."""

    BINDINGS = bindings(TABLE_KEYS)

    cursor_row: reactive[int] = reactive(0)
    cursor_col: reactive[int] = reactive(0)
    unit: ClassVar[str] = "ns"  # every table shows durations in the same unit (`u`)

    class RowHighlighted(Message):
        def __init__(self, table: FrameTable, row: int):
            super().__init__()
            self.table, self.row = table, row

    class RowSelected(Message):
        def __init__(self, table: FrameTable, row: int):
            super().__init__()
            self.table, self.row = table, row

    def __init__(
        self,
        frame: pl.DataFrame | None = None,
        *,
        hidden: tuple[str, ...] = (),
        narrow: tuple[str, ...] = (),
        narrow_below: int = 120,
        bar_colours: dict[str, dict[str, str]] | None = None,
        id=None,
    ):
        super().__init__(id=id)
        self.hidden = set(hidden)
        self.narrow = set(narrow)  # columns dropped when the terminal is narrower than narrow_below
        self.narrow_below = narrow_below
        self.bar_colours = bar_colours or {}  # column -> glyph -> colour (stacked bars)
        self.user_hidden: set[str] = set()  # hidden by `-`, by name, across frames
        self.width_of: dict[str, int] = {}  # set by `<` `>` `_`, by name, across frames
        self.natural: dict[str, int] = {}  # the widest value of each column
        self.frame = pl.DataFrame()
        self.order: pl.Series | None = None  # row permutation after a sort (no column is gathered)
        self.widths: list[int] = []
        self.sort_state: tuple[str, bool] | None = None
        self.width_hints: dict[str, int] = {}
        self.cut_cache: dict[tuple[str, int], dict[str, str]] = {}
        self.fitted_for: tuple[int, int] | None = None  # (width, room) the widths were fitted for
        if frame is not None:
            self.set_frame(frame)

    # -- data -------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        narrow = self.narrow if 0 < self.size.width < self.narrow_below else set()
        return [c for c in self.frame.columns if c not in self.hidden and c not in narrow and c not in self.user_hidden]

    def header(self, column: str) -> str:
        """The column's name as shown (durations in the chosen unit)."""
        if is_duration(column) and self.unit != "ns":
            return column[: -len("(ns)")] + f"({self.unit})"
        return column

    def shown(self) -> pl.DataFrame:
        """The table as shown (filtered and sorted, visible columns, durations in the unit shown)."""
        f = self.sorted_frame()
        if not f.width:
            return f
        scale = UNITS[self.unit]
        schema = f.schema
        return f.select(
            [
                (pl.col(c) / scale).round(3).alias(self.header(c))
                if is_duration(c) and scale > 1 and schema[c].is_numeric()
                else pl.col(c)
                for c in self.columns
            ]
        )

    def sorted_frame(self) -> pl.DataFrame:
        return self.frame if self.order is None else self.frame[self.order]

    def set_frame(
        self, frame: pl.DataFrame, keep_cursor: bool = False, width_hints: dict[str, int] | None = None
    ) -> None:
        """Show `frame`. `width_hints` (column -> widest value, computed once for a large source
        table) stand in for measuring text columns of more than EXACT_ROWS rows."""
        self.frame = frame
        self.order = None
        self.sort_state = None if not keep_cursor else self.sort_state
        self.width_hints = width_hints or {}
        self.cut_cache = {}
        self._measure()
        self._fit()
        if not keep_cursor:
            self.cursor_row, self.cursor_col = 0, min(self.cursor_col, max(len(self.columns) - 1, 0))
        self.cursor_row = min(self.cursor_row, max(frame.height - 1, 0))
        self.refresh()

    def _measure(self) -> None:
        """The widest formatted value of every column, over all rows: numbers from their minimum
        and maximum (the widest value is one of the two), text from its longest value."""
        f = self.frame
        self.natural = {}
        if f.height == 0:
            return
        schema = f.schema  # made anew on every access: once, not once per column
        nums = [c for c in f.columns if schema[c].is_numeric() and c not in self.hidden]
        texts = [c for c in f.columns if not schema[c].is_numeric() and c not in self.hidden]
        big = f.height > EXACT_ROWS
        measured = [c for c in texts if not (big and c in self.width_hints)]
        ends = f.select(
            [pl.col(c).min().alias(f"{c}\0min") for c in nums]
            + [pl.col(c).max().alias(f"{c}\0max") for c in nums]
            + [pl.col(c).cast(pl.String).str.len_chars().max().alias(c) for c in measured]
        ).row(0, named=True)
        scale = UNITS[self.unit]
        for c in nums:
            lo, hi = ends[f"{c}\0min"], ends[f"{c}\0max"]
            if is_duration(c) and scale > 1:
                lo, hi = (None if lo is None else lo / scale), (None if hi is None else hi / scale)
            decimals = 3 if is_duration(c) and scale > 1 else 1
            self.natural[c] = max(len(fmt_cell(lo, decimals)), len(fmt_cell(hi, decimals)))
        for c in texts:
            self.natural[c] = int((ends.get(c) if c in measured else self.width_hints[c]) or 0)
        for c in f.columns:
            self.natural.setdefault(c, 1)

    def room(self) -> tuple[int, int]:
        """The table's width (which columns show) and the cells its rows are drawn in: that width
        less the vertical scrollbar when the rows overflow."""
        return self.size.width, self.scrollable_content_region.width

    def _fit(self) -> None:
        """Widths: a number column as wide as its widest value (its header may be cut), a text
        column as wide as its widest value up to its cap (MAX_WIDTH). When that is wider than
        the room the rows have, text columns give way, the widest first, down to their floor
        (MIN_WIDTH); what still does not fit is reached by scrolling sideways. `<` `>` `_` set
        a width."""
        self.fitted_for = self.room()
        cols = self.columns
        schema = self.frame.schema  # made anew on every access: once, not once per column
        numeric = [schema[c].is_numeric() for c in cols]
        values = [self.natural.get(c, 1) for c in cols]
        headers = [self.header(c) for c in cols]
        self.widths = []
        for c, n, v, h in zip(cols, numeric, values, headers):
            if c in self.width_of:
                w = self.width_of[c]
            elif n:
                w = max(len(h) + 1, v)  # room for the sort arrow
            else:
                w = min(max(len(h) + 1, v), MAX_WIDTH.get(c, 40))
            self.widths.append(max(w, v) if n else max(w, 1))
        avail = self.fitted_for[1] - 1
        if avail > 20:
            # numbers under a long header (a trace name in Compare) give up the header first,
            # then text columns down to their floor, then any number header down to its values,
            # then text columns down to a few words when that fits the whole row on screen
            shrink_headers(self.widths, values, headers, numeric, avail)
            squeezable = [i for i, c in enumerate(cols) if not numeric[i] and c not in self.width_of]
            self._squeeze(
                squeezable, {i: max(MIN_WIDTH.get(cols[i], 10), len(headers[i]) + 1) for i in squeezable}, avail
            )
            shrink_headers(self.widths, values, headers, numeric, avail, long=8)
            hard = {i: min(self.widths[i], max(HARD_MIN_WIDTH, min(len(headers[i]) + 1, 12))) for i in squeezable}
            at_floor = sum(hard.get(i, w) + 2 for i, w in enumerate(self.widths))
            if at_floor <= avail:  # only when that makes the whole row fit; else names keep their room
                self._squeeze(squeezable, hard, avail)
        self.cursor_col = min(self.cursor_col, max(len(cols) - 1, 0))
        self.virtual_size = Size(sum(w + 2 for w in self.widths), self.frame.height + 1)

    def _squeeze(self, squeezable: list[int], floor: dict[int, int], avail: int) -> None:
        """Narrow the text columns `squeezable`, the most above its floor first, until the row
        fits `avail` or every one is at its floor."""
        while sum(w + 2 for w in self.widths) > avail:
            cand = [i for i in squeezable if self.widths[i] > floor[i]]
            if not cand:
                return
            i = max(cand, key=lambda j: self.widths[j] - floor[j])
            over = sum(w + 2 for w in self.widths) - avail
            self.widths[i] = max(floor[i], self.widths[i] - over)

    def on_resize(self, _event) -> None:
        self._fit()
        self.refresh()

    def render_lines(self, crop: Region) -> list[Strip]:
        # Fit again when the room changed without a Resize: a scrollbar that appears takes two
        # cells, and Textual sends none to a table it first lays out while the screen's map is
        # rebuilt by a lookup (the table would keep widths fitted for no width at all)
        if self.fitted_for != self.room():
            self._fit()
        return super().render_lines(crop)

    def relayout(self) -> None:
        """Measure and fit again (the unit or the hidden columns changed)."""
        self._measure()
        self._fit()
        self.refresh()

    def sort_by_cursor(self, descending: bool) -> str:
        if not self.columns:
            return ""
        col = self.columns[self.cursor_col]
        # sort a permutation of one column, not the whole frame: a million-row, twenty-column
        # table re-sorts in the time of one arg_sort
        self.order = self.frame[col].arg_sort(descending=descending, nulls_last=True)
        self.sort_state = (col, descending)
        self.cursor_row = 0
        self.scroll_to(y=0, animate=False)
        self.refresh()
        return col

    def _index(self, i: int) -> int:
        return i if self.order is None else int(self.order[i])

    def row(self, i: int | None = None) -> dict | None:
        i = self.cursor_row if i is None else i
        if not 0 <= i < self.frame.height:
            return None
        return self.frame.row(self._index(i), named=True)

    def _cuts(self, column: str, width: int) -> dict[str, str]:
        """How the names of `column` read in `width` cells (once per frame, column and width)."""
        key = (column, width)
        if key not in self.cut_cache:
            names = self.frame[column].drop_nulls().unique().cast(pl.String).to_list()
            self.cut_cache[key] = distinct_cuts(names, width)
        return self.cut_cache[key]

    def column_at_cursor(self) -> str | None:
        cols = self.columns
        return cols[self.cursor_col] if cols else None

    # -- rendering ----------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            return self._header(scroll_x, width)
        i = scroll_y + y - 1
        if i >= self.frame.height or not self.columns:
            return Strip.blank(width)
        row = self.frame.row(self._index(i), named=True)
        segs: list[Segment] = []
        cursor = i == self.cursor_row
        base = Style(reverse=True) if cursor else Style()
        scale = UNITS[self.unit]
        for j, (c, w) in enumerate(zip(self.columns, self.widths)):
            v = row[c]
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            if numeric and is_duration(c) and scale > 1:
                text = fmt_cell(v / scale, 3)
            else:
                text = visible(fmt_cell(v))
            if numeric:
                text = text.rjust(w)
            elif c in NAME_COLUMNS and len(text) > w:
                text = self._cuts(c, w).get(text, cut(text, w)).ljust(w)
            else:
                text = cut(text, w, cut_how(c)).ljust(w)
            style = base
            if c == "Category" and v in CATEGORY_COLOURS:
                style = base + Style(color=CATEGORY_COLOURS[v])
            elif c == "Direction" and v in DIRECTION_COLOURS:
                style = base + Style(color=DIRECTION_COLOURS[v])
            elif c.startswith("Δ") and numeric and v:
                style = base + Style(color="red" if v > 0 else "green")
            elif c in ("Share", "Bar"):
                cat = row.get("Category")
                style = base + Style(color=CATEGORY_COLOURS.get(str(cat), "cyan"))
            if cursor and j == self.cursor_col:
                style = style + Style(bold=True, underline=True)
            if c in self.bar_colours:
                segs.extend(self._bar_segments(text, self.bar_colours[c], style))
                segs.append(Segment("  ", base))
            else:
                segs.append(Segment(text + "  ", style))
        strip = Strip(segs).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width)

    @staticmethod
    def _bar_segments(text: str, colours: dict[str, str], style: Style) -> list[Segment]:
        """A stacked bar with each glyph's run in its own colour (forward green, backward yellow)."""
        segs: list[Segment] = []
        start = 0
        for k in range(1, len(text) + 1):
            if k == len(text) or text[k] != text[start]:
                colour = colours.get(text[start])
                segs.append(Segment(text[start:k], style + Style(color=colour) if colour else style))
                start = k
        return segs

    def _header(self, scroll_x: int, width: int) -> Strip:
        segs = []
        for j, (c, w) in enumerate(zip(self.columns, self.widths)):
            mark = ""
            if self.sort_state and self.sort_state[0] == c:
                mark = "▼" if self.sort_state[1] else "▲"
            label = (fit_header(visible(self.header(c)), w - len(mark)) + mark).ljust(w)
            style = Style(bold=True, underline=(j == self.cursor_col))
            segs.append(Segment(label + "  ", style))
        return Strip(segs).crop(scroll_x, scroll_x + width).extend_cell_length(width)

    # -- movement -------------------------------------------------------------------
    def _follow(self) -> None:
        top = self.scroll_offset.y
        visible = max(self.size.height - 1, 1)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= top + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)
        x0 = sum(w + 2 for w in self.widths[: self.cursor_col])
        x1 = x0 + (self.widths[self.cursor_col] if self.widths else 0)
        room = self.room()[1]
        if x0 < self.scroll_offset.x:
            self.scroll_to(x=x0, animate=False)
        elif x1 > self.scroll_offset.x + room:
            self.scroll_to(x=max(x1 - room, 0), animate=False)
        self.refresh()
        self.post_message(self.RowHighlighted(self, self.cursor_row))

    def action_cursor(self, delta: int) -> None:
        if self.frame.height:
            self.cursor_row = max(0, min(self.frame.height - 1, self.cursor_row + delta))
            self._follow()

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(self.size.height - 2, 1))

    def action_jump(self, where: int) -> None:
        if self.frame.height:
            self.cursor_row = 0 if where == 0 else self.frame.height - 1
            self._follow()

    def action_column(self, delta: int) -> None:
        if self.columns:
            self.cursor_col = max(0, min(len(self.columns) - 1, self.cursor_col + delta))
            self._follow()

    def action_select(self) -> None:
        if self.frame.height:
            self.post_message(self.RowSelected(self, self.cursor_row))

    # -- columns (VisiData's keys) ----------------------------------------------------------
    def action_hide_column(self) -> None:
        c = self.column_at_cursor()
        if c is not None and len(self.columns) > 1:
            self.user_hidden.add(c)
            self._fit()
            self._follow()
            self.notify(f"column {c} hidden (= shows every column)", timeout=3)

    def action_show_columns(self) -> None:
        if self.user_hidden or self.width_of:
            self.user_hidden.clear()
            self.width_of.clear()
            self.relayout()
            self.notify("every column shown at its own width", timeout=3)

    def action_widen(self, delta: int) -> None:
        c = self.column_at_cursor()
        if c is not None:
            w = self.widths[self.cursor_col]
            floor = self.natural.get(c, 1) if self.frame.schema[c].is_numeric() else 4
            self.width_of[c] = max(floor, w + delta)
            self._fit()
            self._follow()

    def action_full_width(self) -> None:
        """`_`: the column under the cursor as wide as its widest value (again: back to its fit)."""
        c = self.column_at_cursor()
        if c is None:
            return
        if c in self.width_of:
            del self.width_of[c]
        else:
            self.width_of[c] = max(self.natural.get(c, 1), len(self.header(c)) + 1)
        self._fit()
        self._follow()
