"""Memory: the allocator's bytes over time as a plot with the step's phases under it, the peak,
and one table at a time (live at the peak by call site or by size, largest allocations, bytes
per phase): the numbers `kview memory` prints, from the same core functions."""

from __future__ import annotations

import polars as pl
from rich.text import Text
from textual.reactive import var
from textual.widgets import Static

from kview.analysis import memory_timeline as mt
from kview.analysis.trace_memory import level_name
from kview.notation import exact_bytes, human_bytes, human_ms
from kview.output.memory_plot import plot
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import memory_document, snapshot_document
from kview.tui.messages import MemoryReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.frame_table import FrameTable

# (the document's section, what copy/export calls it); `t` cycles them
TABLES = (
    ("by-site", "memory by site"),
    ("by-size", "memory by size"),
    ("top", "memory top"),
    ("phases", "memory phases"),
    ("steps", "memory steps"),
)


class MemoryView(View):
    view_id = "memory"
    key = "8"  # whichever views come before it
    title = "Memory"
    document = memory_document
    snapshot_document = snapshot_document  # a memory snapshot opened alone is shown here
    BINDINGS = bindings(VIEW_KEYS["memory"])

    data: var[MemoryReady | None] = var(None, init=False)
    table_index: var[int] = var(0, init=False)

    def on_memory_ready(self, m: MemoryReady) -> None:
        self.data = m

    def watch_data(self, m: MemoryReady | None) -> None:
        if m is None:
            return
        if m.timeline is None:
            self.show(Static(m.note, classes="note"))
            return
        tl = m.timeline
        assert m.document is not None
        # the tables of `kview memory` (its document, made by the loader)
        self.tables = [m.document.section(name) for name, _ in TABLES]
        self.head = Static(self.head_text(tl), id="memory-head")
        self.plot = Static("", id="memory-plot")
        self.status = Static("", id="memory-status")
        self.table = FrameTable(id="memory-table")
        self.show(self.head, self.plot, self.status, self.table)
        self.render_plot()
        self.render_table()
        self.focus_if_active(self.table)

    @staticmethod
    def head_text(tl: mt.MemoryTimeline) -> Text:
        """The peak in two short lines (80 columns): allocated (blocks) and when, reserved; what
        was asked for, and torch's own counter when the snapshot carries it."""
        pk = tl.peak
        if tl.source != mt.SNAPSHOT:
            return MemoryView.trace_head(tl)
        head = Text()
        head.append("Peak ", style="bold")
        head.append(exact_bytes(pk["allocated"]))
        if pk["t"] is not None:
            head.append(f" at {human_ms(pk['t'] - tl.start)}")
        top = tl.series.select(pl.col("requested").max(), pl.col("reserved").max()).row(0)
        head.append(" · reserved ", style="bold")
        head.append(human_bytes(int(top[1] or 0)))
        head.append("\nrequested ", style="bold")
        head.append(human_bytes(int(top[0] or 0)))
        if (m := tl.facts.get("max_memory_allocated")) is not None:
            head.append(" · torch max_memory_allocated ", style="bold")
            head.append(f"{human_bytes(m)} ({(m / max(pk['allocated'], 1) - 1) * 100:+.2f}%)")
        return head

    @staticmethod
    def trace_head(tl: mt.MemoryTimeline) -> Text:
        """The peak of a timeline made from the trace's own events, and which events those are."""

        pk = tl.peak
        head = Text()
        head.append("Peak ", style="bold")
        head.append(f"{level_name(tl)} {exact_bytes(pk['allocated'])}")
        if pk["t"] is not None:
            head.append(f" at {human_ms(pk['t'] - tl.start)}")
        if (res := tl.series.select(pl.col("reserved").max()).item()) is not None:
            head.append(" · reserved ", style="bold")
            head.append(human_bytes(int(res)))
        head.append("\nfrom ", style="bold")
        head.append(str(tl.facts.get("source", tl.source)))
        return head

    def render_plot(self) -> None:
        """The plot as wide as the view (the terminal before it is laid out), shorter in a short
        terminal so the table keeps rows."""
        if self.data is None or self.data.timeline is None or not hasattr(self, "plot"):
            return
        tl = self.data.timeline
        width = max((self.size.width or self.app.size.width) - 2, 40)
        height = 4 if self.app.size.height < 30 else 10
        lines = plot(tl.series, tl.phases, width, height, tl.peak, compact=True, zero=tl.start, level=mt.level_word(tl))
        self.plot.update("\n".join(lines))

    def on_resize(self, _event) -> None:
        self.render_plot()

    def watch_table_index(self) -> None:
        self.render_table()

    def render_table(self) -> None:
        if self.data is None or self.data.timeline is None or not hasattr(self, "table"):
            return
        section = self.tables[self.table_index]
        self.table.set_frame(section.frame)
        self.status.update(Text(f"{section.title} · t: next table", style="bold"))

    def action_sort(self, descending: bool) -> None:
        if self.data is not None and self.data.timeline is not None:
            col = self.table.sort_by_cursor(descending)
            self.app.notify(f"sorted by {col} {'descending' if descending else 'ascending'}", timeout=2)

    def action_cycle_table(self) -> None:
        self.table_index = (self.table_index + 1) % len(TABLES)

    def shown(self) -> Shown:
        if self.data is None or self.data.timeline is None:
            return Shown(pl.DataFrame(), "memory")
        return Shown(self.table.shown(), TABLES[self.table_index][1])
