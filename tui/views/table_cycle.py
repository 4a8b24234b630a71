"""A view over one message that holds several named tables, one shown at a time under a caption
naming it and the next; `t` moves on, `s`/`S` sort the shown table by the cursor's column. The
Efficiency and Launches views are this with their own tables."""

from __future__ import annotations

from typing import Any, ClassVar

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable


class TableCycleView(View):
    TABLES: ClassVar[dict[str, str]] = {}  # table name -> the caption shown above it

    data: var[Any] = var(None, init=False)
    table_name: var[str] = var("", init=False)

    def show_tables(self, *above: Static) -> None:
        """Mount the caption and the table (under `above`) and show the current table."""
        self.caption = Static("", id=f"{self.view_id}-caption")
        self.table = FrameTable(id=f"{self.view_id}-table")
        self.show(*above, self.caption, self.table)
        self.render_table()
        self.focus_if_active(self.table)

    def watch_table_name(self) -> None:
        if self.data is not None and hasattr(self, "table"):
            self.render_table()

    def render_table(self) -> None:
        assert self.data is not None
        self.table.set_frame(self.data.tables[self.table_name])
        names = list(self.TABLES)
        following = names[(names.index(self.table_name) + 1) % len(names)]
        self.caption.update(Text(f"{self.TABLES[self.table_name]} · t: {following}", style="bold"))

    def action_cycle_table(self) -> None:
        names = list(self.TABLES)
        self.table_name = names[(names.index(self.table_name) + 1) % len(names)]

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and hasattr(self, "table"):
            self.table.sort_by_cursor(descending)

    def shown(self) -> Shown:
        if self.data is None or not hasattr(self, "table"):
            return Shown(pl.DataFrame(), self.view_id)
        return Shown(self.table.shown(), f"{self.view_id} {self.table_name}")
