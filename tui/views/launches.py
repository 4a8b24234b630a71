"""Launches: why the GPU waited. Idle time of each stream split by cause (the host launched
late, it was waiting in a synchronization, another stream, the GPU's own gap), the longest idle
gaps with the CPU call around each, launch cost and delay by kernel and by CPU op, and each
stream's queue length, and each step's critical path with the ops on it; `t` moves between them.
The tables of `kview launches` and `kview critical-path`."""

from __future__ import annotations

from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import launches_document
from kview.tui.messages import LaunchesReady
from kview.tui.views.table_cycle import TableCycleView

TABLES = {
    "idle": "Idle time by stream and cause (host: launched late; sync: after a synchronization)",
    "gaps": "Longest idle gaps, with the CPU call around each",
    "kernels": "Launch cost (the call) and launch delay (call end to start) by kernel",
    "ops": "Launch cost and delay by the CPU op that launched",
    "queue": "Queue length by stream (ops launched, not started)",
    "critical path": "Critical path of each step: GPU, CPU and launch time on it, CPU- or GPU-bound",
    "path ops": "What the steps' critical paths spend their time in",
}


class LaunchesView(TableCycleView):
    TABLES = TABLES
    view_id = "launches"
    title = "Launches"
    document = launches_document
    fetched_late = True
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
        self.show_tables()
