"""Compare: several traces by range, or the phases of one trace by kernel category."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import CompareReady
from kview.tui.views.base import View
from kview.tui.widgets.frame_table import FrameTable


class CompareView(View):
    view_id = "compare"
    title = "Compare"
    BINDINGS = bindings(VIEW_KEYS["compare"])

    data: var[CompareReady | None] = var(None, init=False)

    def on_compare_ready(self, m: CompareReady) -> None:
        self.data = m

    def watch_data(self, m: CompareReady) -> None:
        if m.frame is None:  # nothing to compare: the caption says why
            self.show(Static(m.caption))
            return
        self.table = FrameTable(m.frame, id="compare-table")
        self.show(Static(Text(m.caption, style="bold")), self.table)
        self.focus_if_active(self.table)

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and self.data.frame is not None:
            self.table.sort_by_cursor(descending)
