"""Layers: forward and backward time per repeated layer range, as bars."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.output.format import SHADES, stacked_bar
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.messages import LayersReady
from kview.tui.views.base import View
from kview.tui.widgets.frame_table import FrameTable


class LayersView(View):
    view_id = "layers"
    title = "Layers"
    BINDINGS = bindings(VIEW_KEYS["layers"])

    data: var[LayersReady | None] = var(None, init=False)
    by_time: var[bool] = var(False, init=False)  # order: by layer index, or by total time

    def on_layers_ready(self, m: LayersReady) -> None:
        self.data = m

    def watch_data(self, m: LayersReady) -> None:
        if m.layers.height == 0:
            self.show(Static("No repeated layer ranges (layer_0.., Enc_0.., Embedding_0..) in this trace."))
            return
        self.status = Static("", id="layers-status")
        self.table = FrameTable(id="layers-table")
        self.show(self.status, self.table)
        self.render_layers(m.layers)
        self.focus_if_active(self.table)

    def watch_by_time(self) -> None:
        if self.data is not None and self.data.layers.height:
            self.render_layers(self.data.layers)

    def render_layers(self, df: pl.DataFrame) -> None:
        if self.by_time:
            df = df.sort("Total (ns)", descending=True)
        parts = ["Forward (ns)", "Backward (ns)"]
        width = 24 if self.app.size.width < 120 else 40
        bar = stacked_bar(parts, width=width).alias("Forward █ Backward ▓")
        subs = [c for c in df.columns if c not in ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "Kernels")]
        extra = []
        if len(subs) >= 2:  # nested ranges: the same total split by sublayer (attention / ffn ...)
            names = " ".join(f"{g} {c.removesuffix(' (ns)')}" for g, c in zip(SHADES, subs))
            extra = [stacked_bar(subs, width=width).alias(names)]
        df = df.select("Layer", bar, *extra, pl.all().exclude("Layer"))
        self.table.set_frame(df)
        self.status.update(
            Text(f"{df.height} layers · ordered by {'time' if self.by_time else 'index'} (o)", style="bold")
        )

    def action_toggle_order(self) -> None:
        self.by_time = not self.by_time
