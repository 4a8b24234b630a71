"""Launches: why the GPU waited. Idle time of each stream split by cause (the host launched
late, it was waiting in a synchronization, another stream, the GPU's own gap), the longest idle
gaps with the CPU call around each, launch cost and delay by kernel and by CPU op, and each
stream's queue length, and each step's critical path with the ops on it; `t` moves between them.
The tables of `kview launches` and `kview critical-path`."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import LaunchesReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable

TABLES = {
    "idle": "Idle time by stream and cause (host: launched late; sync: after a synchronization)",
    "gaps": "Longest idle gaps, with the CPU call around each",
    "kernels": "Launch cost (the call) and launch delay (call end to start) by kernel",
    "ops": "Launch cost and delay by the CPU op that launched",
    "queue": "Queue length by stream (ops launched, not started)",
    "critical path": "Critical path of each step: GPU, CPU and launch time on it, CPU- or GPU-bound",
    "path ops": "What the steps' critical paths spend their time in",
}


class LaunchesView(View):
    view_id = "launches"
    title = "Launches"
    key = "0"
    BINDINGS = bindings(VIEW_KEYS["launches"])

    data: var[LaunchesReady | None] = var(None, init=False)
    table_name: var[str] = var("idle", init=False)

    def on_launches_ready(self, m: LaunchesReady) -> None:
        self.data = m

    def watch_data(self, m: LaunchesReady) -> None:
        if all(f.height == 0 for f in m.tables.values()):
            self.show(Static("No GPU ops launched in this trace: nothing to analyse.", id="launches-caption"))
            return
        self.caption = Static("", id="launches-caption")
        self.table = FrameTable(id="launches-table")
        self.show(self.caption, self.table)
        self.render_table()
        self.focus_if_active(self.table)

    def watch_table_name(self) -> None:
        if self.data is not None and hasattr(self, "table"):
            self.render_table()

    def render_table(self) -> None:
        assert self.data is not None
        self.table.set_frame(self.data.tables[self.table_name])
        names = list(TABLES)
        following = names[(names.index(self.table_name) + 1) % len(names)]
        self.caption.update(Text(f"{TABLES[self.table_name]} · t: {following}", style="bold"))

    def action_cycle_table(self) -> None:
        names = list(TABLES)
        self.table_name = names[(names.index(self.table_name) + 1) % len(names)]

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and hasattr(self, "table"):
            self.table.sort_by_cursor(descending)

    def shown(self) -> Shown:
        if self.data is None or not hasattr(self, "table"):
            return Shown(pl.DataFrame(), "launches")
        return Shown(self.table.shown(), f"launches {self.table_name}")
