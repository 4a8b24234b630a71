"""Efficiency: achieved against the GPU's peak. MFU and bandwidth by step, layer, category and
kernel (with each kernel's place on the roofline), the FP32 GEMMs that could use tensor cores,
and the GPU's peaks; `t` moves between them. The tables of `kview efficiency`."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import EfficiencyReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable

TABLES = {
    "steps": "By step: MFU over the step's wall time",
    "layers": "By layer: MFU and bandwidth over the layer's GPU time",
    "categories": "By category: MFU and bandwidth over the category's GPU time",
    "kernels": "By kernel: precision, peak, MFU, bandwidth, roofline",
    "tensor-cores": "FP32 GEMMs that ran on CUDA cores of a GPU with TF32 tensor cores",
    "gpus": "The GPUs of this trace and their peaks (dense, vendor datasheets)",
}


class EfficiencyView(View):
    view_id = "efficiency"
    title = "Efficiency"
    key = "9"
    BINDINGS = bindings(VIEW_KEYS["efficiency"])

    data: var[EfficiencyReady | None] = var(None, init=False)
    table_name: var[str] = var("steps", init=False)

    def on_efficiency_ready(self, m: EfficiencyReady) -> None:
        self.data = m

    def watch_data(self, m: EfficiencyReady) -> None:
        if m.tables["gpus"].height == 0:
            self.show(Static("No GPU work in this trace: nothing to measure against a peak.", id="efficiency-gpu"))
            return
        self.gpu = Static(Text(m.caption), id="efficiency-gpu")
        self.caption = Static("", id="efficiency-caption")
        self.table = FrameTable(id="efficiency-table")
        self.show(self.gpu, self.caption, self.table)
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
            return Shown(pl.DataFrame(), "efficiency")
        return Shown(self.table.shown(), f"efficiency {self.table_name}")
