"""Efficiency: achieved against the GPU's peak. MFU and bandwidth by step, layer, category and
kernel (with each kernel's place on the roofline), the FP32 GEMMs that could use tensor cores,
and the GPU's peaks; `t` moves between them. The tables of `kview efficiency`."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import efficiency_document
from kview.tui.messages import EfficiencyReady
from kview.tui.views.table_cycle import TableCycleView

TABLES = {
    "steps": "By step: MFU over the step's wall time",
    "layers": "By layer: MFU and bandwidth over the layer's GPU time",
    "categories": "By category: MFU and bandwidth over the category's GPU time",
    "kernels": "By kernel: precision, peak, MFU, bandwidth, roofline",
    "tensor-cores": "FP32 GEMMs that ran on CUDA cores of a GPU with TF32 tensor cores",
    "gpus": "The GPUs of this trace and their peaks (dense, vendor datasheets)",
}


class EfficiencyView(TableCycleView):
    TABLES = TABLES
    view_id = "efficiency"
    title = "Efficiency"
    document = efficiency_document
    fetched_late = True
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
        self.show_tables(self.gpu)
