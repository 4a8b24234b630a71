"""Layers: forward and backward time per repeated layer range, as bars."""
from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.widgets import Static

from kview.analysis.layers import stacked_bars
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.views.base import View
from kview.tui.widgets.frame_table import FrameTable


class LayersView(View):
    view_id = "layers"
    title = "Layers"
    BINDINGS = bindings(VIEW_KEYS["layers"])

    def __init__(self, **kw):
        super().__init__(**kw)
        self.by_time = False

    def build(self) -> None:
        df = self.data.layers
        if df is None or df.height == 0:
            self.mount(Static("No repeated layer ranges (layer_0.., Enc_0.., Embedding_0..) in this trace."))
            return
        self.status = Static("", id="layers-status")
        self.table = FrameTable(id="layers-table")
        self.mount(self.status, self.table)
        self.render_layers()
        self.focus_if_active(self.table)

    def render_layers(self) -> None:
        df = self.data.layers
        if self.by_time:
            df = df.sort("Total (ns)", descending=True)
        parts = ["Forward (ns)", "Backward (ns)"]
        width = 24 if self.app.size.width < 120 else 40
        bar = stacked_bars(df, parts, width=width).alias("Forward █ Backward ▓")
        subs = [c for c in df.columns if c not in ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "Kernels")]
        extra = []
        if len(subs) >= 2:  # nested ranges: the same total split by sublayer (attention / ffn ...)
            names = " ".join(f"{g} {c.removesuffix(' (ns)')}" for g, c in zip("█▓▒░", subs))
            extra = [stacked_bars(df, subs, width=width).alias(names)]
        df = df.select("Layer", bar, *extra, pl.all().exclude("Layer"))
        self.table.set_frame(df)
        self.status.update(Text(f"{df.height} layers · ordered by {'time' if self.by_time else 'index'} (o)",
                                style="bold"))

    def action_toggle_order(self) -> None:
        self.by_time = not self.by_time
        self.render_layers()
