"""Layers: forward and backward time per repeated layer range, as bars.

The bars are as wide as the terminal leaves room for (never cut), forward and backward in
their direction colours (green, yellow) with the legend in the status line, and a second bar
splitting the same total by sublayer (attention / ffn ...) when the layers have them.
"""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.notation import SHADES, stacked_bar
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import layers_document
from kview.tui.messages import LayersReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import DIRECTION_COLOURS, FrameTable

BAR = "Fwd █ Bwd ▓"
SUB_BAR = "Sublayers"
BAR_COLOURS = {
    BAR: {SHADES[0]: DIRECTION_COLOURS["fprop"], SHADES[1]: DIRECTION_COLOURS["bprop"]},
    SUB_BAR: dict(zip(SHADES, ("cyan", "magenta", "bright_blue", "bright_red"))),
}
BASE = ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "GPU ops")


class LayersView(View):
    view_id = "layers"
    title = "Layers"
    document = layers_document
    fetched_late = True
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
        if m.note:  # the legend, then the line saying why Backward is empty
            self.status.styles.height = "auto"
        self.table = FrameTable(id="layers-table", bar_colours=BAR_COLOURS)
        self.show(self.status, self.table)
        self.call_after_refresh(self.render_layers)
        self.focus_if_active(self.table)

    def watch_by_time(self) -> None:
        self.render_layers()

    def on_resize(self, _event) -> None:
        self.render_layers()

    def sublayers(self, df: pl.DataFrame) -> list[str]:
        return [c for c in df.columns if c not in BASE]

    def render_layers(self) -> None:
        if self.data is None or self.data.layers.height == 0 or not hasattr(self, "table"):
            return
        df = self.data.layers
        if self.by_time:
            df = df.sort("Total (ns)", descending=True)
        subs = self.sublayers(df)
        n_bars = 2 if len(subs) >= 2 else 1
        # the numbers first, to see how much room the bars have (never cut)
        self.table.set_frame(df)
        used = sum(w + 2 for w in self.table.widths)
        room = (self.table.size.width or self.app.size.width) - 1 - used - 2 * n_bars
        width = max(8, min(40, room // n_bars))
        bars = [stacked_bar(["Forward (ns)", "Backward (ns)"], width=width).alias(BAR)]
        if n_bars == 2:  # nested ranges: the same total split by sublayer
            bars.append(stacked_bar(subs, width=width).alias(SUB_BAR))
        sort = self.table.sort_state
        self.table.set_frame(df.select("Layer", *bars, pl.all().exclude("Layer")))
        if sort is not None and sort[0] in self.table.frame.columns:
            col = self.table.columns.index(sort[0]) if sort[0] in self.table.columns else None
            if col is not None:
                self.table.cursor_col = col
                self.table.sort_by_cursor(sort[1])
        legend = Text(f"{df.height} layers · ordered by {'time' if self.by_time else 'index'} (o) · ", style="bold")
        legend.append("█ forward", style=f"bold {DIRECTION_COLOURS['fprop']}")
        legend.append(" ")
        legend.append("▓ backward", style=f"bold {DIRECTION_COLOURS['bprop']}")
        if n_bars == 2:
            legend.append("  ·  sublayers: ", style="bold")
            for glyph, c in zip(SHADES, subs):
                legend.append(f"{glyph} {c.removesuffix(' (ns)')} ", style=f"bold {BAR_COLOURS[SUB_BAR][glyph]}")
        if self.data.note:
            legend.append(f"\n{self.data.note}", style="bold yellow")
        self.status.update(legend)

    def action_toggle_order(self) -> None:
        self.table.sort_state = None
        self.by_time = not self.by_time

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and self.data.layers.height:
            col = self.table.sort_by_cursor(descending)
            self.app.notify(f"sorted by {col} {'descending' if descending else 'ascending'}", timeout=2)

    def shown(self) -> Shown:
        if self.data is None or self.data.layers.height == 0:
            return Shown(pl.DataFrame(), "layers")
        return Shown(self.table.shown(), "layers", (BAR, SUB_BAR))
