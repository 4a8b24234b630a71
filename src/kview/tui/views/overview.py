"""Overview: what the trace is, how busy the GPU was, where the time went, and the findings."""

from __future__ import annotations

import polars as pl
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.reactive import var
from textual.widgets import Static

from kview.output.format import short_names
from kview.tui.messages import OverviewReady
from kview.tui.views.base import View
from kview.tui.widgets.frame_table import CATEGORY_COLOURS


class OverviewView(View):
    view_id = "overview"
    title = "Overview"

    data: var[OverviewReady | None] = var(None, init=False)

    def on_overview_ready(self, m: OverviewReady) -> None:
        self.data = m

    def watch_data(self, m: OverviewReady) -> None:
        o = m.overview
        facts = Table.grid(padding=(0, 2))
        for k, v in o.facts:
            facts.add_row(Text(k, style="bold"), v)
        parts = [Static(facts)]
        if o.busy.height:
            parts.append(Static(self._table("GPU busy", o.busy)))
        if o.gaps.height:
            parts.append(
                Static(self._table("Largest idle gaps", o.gaps.with_columns(short_names(o.gaps["Next kernel"]))))
            )
        if o.categories.height:
            parts.append(Static(self._table("Time by category", o.categories, colour="Category")))
        if o.phases.height:
            parts.append(Static(self._table("Time by phase", o.phases)))
        if o.top_kernels.height:
            parts.append(
                Static(
                    self._table(
                        "Top kernels",
                        o.top_kernels.with_columns(short_names(o.top_kernels["Kernel"])),
                        colour="Category",
                    )
                )
            )
        if o.cpu_ops.height:  # a trace without GPU kernels: where its CPU time went
            parts.append(Static(self._table("Top CPU ops (self time)", o.cpu_ops)))
        findings = Text("Findings\n", style="bold")
        for f in o.findings:
            findings.append("• " + f + "\n")
        parts.append(Static(findings))
        self.show(VerticalScroll(*parts))

    @staticmethod
    def _table(title, df: pl.DataFrame, colour: str | None = None) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", expand=False)
        for c, dt in df.schema.items():
            t.add_column(
                c, justify="right" if dt.is_numeric() else "left", overflow="ellipsis", max_width=60, no_wrap=True
            )
        for row in df.iter_rows(named=True):
            style = CATEGORY_COLOURS.get(str(row.get(colour))) if colour else None
            t.add_row(
                *[("" if v is None else f"{v:,}" if isinstance(v, int) else str(v)) for v in row.values()], style=style
            )
        return t

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        return (self.data.overview.categories if self.data else pl.DataFrame()), self.view_id
