"""Compare: several traces by range, or the phases of one trace by kernel category."""
from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.views.base import View
from kview.tui.widgets.frame_table import FrameTable


class CompareView(View):
    view_id = "compare"
    title = "Compare"
    BINDINGS = bindings(VIEW_KEYS["compare"])

    def build(self) -> None:
        from kview.analysis.compare import phase_windows, root_window, side_by_side, user_ranges

        traces = [self.data.trace] + [d.trace for d in self.extra]
        try:
            if len(traces) > 1:
                has_root = all(user_ranges(t).filter(pl.col("label") == "profiled_step").height for t in traces)
                windows = [root_window(t, "profiled_step" if has_root else None) for t in traces]
                df, what = side_by_side(windows, "range"), f"{len(traces)} traces by range (GPU time)"
            else:
                phases = self.data.phases["Phase"].to_list() if self.data.phases is not None else []
                if len(phases) < 2:
                    self.mount(Static("Open two or more traces (kview A B) or a trace with phase ranges to compare."))
                    return
                df = side_by_side(phase_windows(self.data.trace, phases), "category")
                what = "phases of this trace by kernel category (GPU time)"
        except ValueError as e:
            self.mount(Static(str(e)))
            return
        self.table = FrameTable(df, id="compare-table")
        self.mount(Static(Text(what, style="bold")), self.table)
        self.focus_if_active(self.table)

    def action_sort(self, descending: bool) -> None:
        self.table.sort_by_cursor(descending)
