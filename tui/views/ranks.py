"""Ranks: every trace on the command line (or in a folder) as one distributed run: a bar per
rank (compute, exposed communication, memory, idle over its iterations) with its busy and
exposed shares and the time it waited in collectives, above the iterations of every rank, which
`t` swaps for the stragglers by iteration and the collectives: the tables of `kview ranks` and
`kview iterations` over the same files."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.analysis.rank_summary import BAR_TITLE
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import RanksReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable

# what fits 80 columns; the lower table and `kview ranks` have the rest
RANK_COLUMNS = ("Rank", BAR_TITLE, "Busy (% of wall)", "Exposed (% of comm)", "Waited (ns)", "Wall (ns)")
BAR_COLOURS = {BAR_TITLE: {"█": "green", "▓": "red", "▒": "yellow", "░": "grey50"}}
LOWER = {
    "iterations": "Iterations of every rank (outliers flagged)",
    "stragglers": "Stragglers by iteration: the rank the others waited for, and how long",
    "collectives": "Collectives by rank: count, GPU time, bytes where the trace records them",
}
SHOWN_RANKS = 8  # rows of the ranks table before it scrolls (8 ranks and the lower table fit 80x24)


class RanksView(View):
    view_id = "ranks"
    title = "Ranks"
    key = "7"
    BINDINGS = bindings(VIEW_KEYS["ranks"])
    every_trace = True

    data: var[RanksReady | None] = var(None, init=False)
    lower: var[str] = var("iterations", init=False)

    def on_ranks_ready(self, m: RanksReady) -> None:
        self.data = m

    def watch_data(self, m: RanksReady) -> None:
        if m.ranks.height == 0:
            self.show(Static(m.caption, id="ranks-caption"))
            return
        caption = Static(Text(m.caption, style="bold"), id="ranks-caption")
        self.ranks_table = FrameTable(
            m.ranks.select(RANK_COLUMNS), id="ranks-table", bar_colours=BAR_COLOURS, narrow=("Wall (ns)",)
        )
        self.ranks_table.styles.height = min(m.ranks.height, SHOWN_RANKS) + 2  # header, rows, a scrollbar
        self.lower_title = Static("", id="ranks-lower-title")
        self.table = FrameTable(id="ranks-lower", narrow=("Overlapped comm (ns)", "Memory (ns)", "Step"))
        self.show(caption, self.ranks_table, self.lower_title, self.table)
        self.render_lower()
        self.focus_if_active(self.ranks_table)

    def watch_lower(self) -> None:
        if self.data is not None and self.data.ranks.height:
            self.render_lower()

    def render_lower(self) -> None:
        assert self.data is not None
        self.table.set_frame(getattr(self.data, self.lower))
        names = list(LOWER)
        following = names[(names.index(self.lower) + 1) % len(names)]
        self.lower_title.update(Text(f"{LOWER[self.lower]} · t: {following}", style="bold"))

    def action_cycle_table(self) -> None:
        names = list(LOWER)
        self.lower = names[(names.index(self.lower) + 1) % len(names)]

    def focused_table(self) -> FrameTable:
        return self.ranks_table if self.ranks_table.has_focus else self.table

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and self.data.ranks.height:
            self.focused_table().sort_by_cursor(descending)

    def shown(self) -> Shown:
        """The focused table: the ranks (with their bar) or the lower table."""
        if self.data is None or self.data.ranks.height == 0:
            return Shown(pl.DataFrame(), "ranks")
        if self.focused_table() is self.ranks_table:
            return Shown(self.ranks_table.shown(), "ranks", (BAR_TITLE,))
        return Shown(self.table.shown(), f"ranks {self.lower}")
