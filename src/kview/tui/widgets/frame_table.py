"""A table over a polars DataFrame that renders only the rows on screen (Textual Line API).

The frame stays in polars; a screen of rows is formatted on demand, so a million-row table
scrolls, sorts and filters at the speed of polars, not of a widget per cell. Cursor row and
column, sorting by the column under the cursor, category colours, and share bars.
"""

from __future__ import annotations

import polars as pl
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kview.output.format import fit_header, shrink_headers
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
MAX_WIDTH = {"Kernel": 60, "Name": 60, "Layer": 36, "NVTX Path": 48, "Params": 28, "Range": 40, "Path": 60}


def fmt_cell(v, dtype) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


class FrameTable(ScrollView, can_focus=True):
    """Cursor over a polars frame; posts RowHighlighted and RowSelected."""

    BINDINGS = bindings(TABLE_KEYS)

    cursor_row: reactive[int] = reactive(0)
    cursor_col: reactive[int] = reactive(0)

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
        id=None,
    ):
        super().__init__(id=id)
        self.hidden = set(hidden)
        self.narrow = set(narrow)  # columns dropped when the terminal is narrower than narrow_below
        self.narrow_below = narrow_below
        self.natural: list[int] = []
        self.frame = pl.DataFrame()
        self.order: pl.Series | None = None  # row permutation after a sort (no column is gathered)
        self.widths: list[int] = []
        self.sort_state: tuple[str, bool] | None = None
        if frame is not None:
            self.set_frame(frame)

    # -- data -------------------------------------------------------------------
    @property
    def columns(self) -> list[str]:
        narrow = self.narrow if 0 < self.size.width < self.narrow_below else set()
        return [c for c in self.frame.columns if c not in self.hidden and c not in narrow]

    def shown(self) -> pl.DataFrame:
        """The table as shown (filtered and sorted, visible columns)."""
        f = self.sorted_frame()
        return f.select(self.columns) if f.width else f

    def sorted_frame(self) -> pl.DataFrame:
        return self.frame if self.order is None else self.frame[self.order]

    def set_frame(self, frame: pl.DataFrame, keep_cursor: bool = False) -> None:
        self.frame = frame
        self.order = None
        self.sort_state = None if not keep_cursor else self.sort_state
        self._fit()
        if not keep_cursor:
            self.cursor_row, self.cursor_col = 0, min(self.cursor_col, max(len(self.columns) - 1, 0))
        self.cursor_row = min(self.cursor_row, max(frame.height - 1, 0))
        self.virtual_size = Size(sum(w + 2 for w in self.widths), frame.height + 1)
        self.refresh()

    def _fit(self) -> None:
        """Column widths from the header and the first rows; until the table fits the terminal,
        number columns shrink to their values (the header cut), then text columns (widest
        first, down to 14 cells)."""
        sample = self.frame.head(200)
        self.widths, values = [], []
        for c in self.columns:
            v = max([0] + [len(fmt_cell(v, None)) for v in sample[c].to_list()])
            values.append(v)
            self.widths.append(min(max(len(c), v), MAX_WIDTH.get(c, 40)))
        avail = self.size.width - 1
        if avail > 20:
            # numbers under a long header (a trace name in Compare) give up the header first
            shrink_headers(
                self.widths, values, self.columns, [self.frame.schema[c].is_numeric() for c in self.columns], avail
            )
            text = [i for i, c in enumerate(self.columns) if not self.frame.schema[c].is_numeric()]
            while sum(w + 2 for w in self.widths) > avail:
                cand = [i for i in text if self.widths[i] > 14]
                if not cand:
                    break
                i = max(cand, key=lambda j: self.widths[j])
                self.widths[i] = max(14, self.widths[i] - (sum(w + 2 for w in self.widths) - avail))
        self.cursor_col = min(self.cursor_col, max(len(self.columns) - 1, 0))
        self.virtual_size = Size(sum(w + 2 for w in self.widths), self.frame.height + 1)

    def on_resize(self, _event) -> None:
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
        segs = []
        cursor = i == self.cursor_row
        base = Style(reverse=True) if cursor else Style()
        for j, (c, w) in enumerate(zip(self.columns, self.widths)):
            v = row[c]
            text = fmt_cell(v, None)
            if len(text) > w:
                text = text[: max(w - 1, 0)] + "…"
            numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
            text = text.rjust(w) if numeric else text.ljust(w)
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
            segs.append(Segment(text + "  ", style))
        strip = Strip(segs).crop(scroll_x, scroll_x + width)
        return strip.extend_cell_length(width)

    def _header(self, scroll_x: int, width: int) -> Strip:
        segs = []
        for j, (c, w) in enumerate(zip(self.columns, self.widths)):
            mark = ""
            if self.sort_state and self.sort_state[0] == c:
                mark = "▼" if self.sort_state[1] else "▲"
            label = (fit_header(c, w - len(mark)) + mark).ljust(w)
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
        if x0 < self.scroll_offset.x:
            self.scroll_to(x=x0, animate=False)
        elif x1 > self.scroll_offset.x + self.size.width:
            self.scroll_to(x=max(x1 - self.size.width, 0), animate=False)
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
