"""Overview: what the trace is, how busy the GPU was, where the time went, and the findings.

Each part is a section that takes the keyboard focus (tab moves between them, the arrows and
PgUp/PgDn scroll), so every part is reachable at 80x24; `y` copies the focused section and
`/` finds text in any of them (n/N: next and previous match).
"""

from __future__ import annotations

import re

import polars as pl
from rich.table import Table
from rich.text import Text
from textual import on
from textual.containers import VerticalScroll
from textual.geometry import Region
from textual.reactive import var
from textual.widgets import Input, Static

from kview.notation import fmt_cell, shown_kernel_names
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import overview_document
from kview.tui.messages import OverviewReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.filter_input import FilterInput
from kview.tui.widgets.frame_table import CATEGORY_COLOURS

NAME_WIDTH = 70  # the widest a column of a section gets
TRACE = "Trace"  # the facts: a grid without header
# lines of a titled rich Table above its first row: title, top rule, header, header rule
ROWS_FROM = 4


class Section(Static, can_focus=True):
    """One part of the overview: its title, its rows (for copy and search) and how it looks."""

    def __init__(
        self,
        title: str,
        frame: pl.DataFrame,
        colour: str | None = None,
        table: bool = True,
        on_screen: pl.DataFrame | None = None,
    ):
        super().__init__()
        self.title, self.frame, self.colour, self.table = title, frame, colour, table
        # what the screen shows (names shortened); `frame`, with full names, is what y copies
        self.on_screen = frame if on_screen is None else on_screen
        self.marked: int | None = None  # the row a search found
        self.update(self.render_section())

    def render_section(self) -> Table | Text:
        if not self.table:  # a list: the findings
            t = Text(self.title + "\n", style="bold")
            for i, line in enumerate(self.frame[self.frame.columns[0]].to_list()):
                t.append("• " + line + "\n", style="reverse" if i == self.marked else "")
            return t
        grid = self.title == TRACE
        table = (
            Table.grid(padding=(0, 2))
            if grid
            else Table(title=self.title, title_justify="left", title_style="bold", expand=False)
        )
        if not grid:
            for c, dt in self.on_screen.schema.items():
                table.add_column(
                    c,
                    justify="right" if dt.is_numeric() else "left",
                    overflow="ellipsis",
                    max_width=NAME_WIDTH,
                    no_wrap=True,
                )
        for i, row in enumerate(self.on_screen.iter_rows(named=True)):
            style = CATEGORY_COLOURS.get(str(row.get(self.colour))) if self.colour else None
            if i == self.marked:
                style = f"{style or ''} reverse".strip()
            cells = [fmt_cell(v) for v in row.values()]
            if grid:
                table.add_row(Text(cells[0], style="bold"), cells[1], style=style)
            else:
                table.add_row(*cells, style=style)
        return table

    def mark(self, row: int | None) -> None:
        self.marked = row
        self.update(self.render_section())

    def row_offset(self, row: int) -> int:
        """Lines from the section's top to `row`."""
        return row + 1 if not self.table else row if self.title == TRACE else row + ROWS_FROM

    def matches(self, pattern: re.Pattern[str]) -> list[int]:
        """Rows holding `pattern` in any cell (the title counts as row 0's)."""
        text = self.frame.select(
            pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in self.frame.columns], separator="  ").alias(
                "t"
            )
        )["t"].to_list()
        rows = [i for i, line in enumerate(text) if pattern.search(line)]
        return rows or ([0] if pattern.search(self.title) and self.frame.height else [])


class OverviewView(View):
    view_id = "overview"
    title = "Overview"
    document = overview_document
    fetched_late = True
    BINDINGS = bindings(VIEW_KEYS["overview"])

    data: var[OverviewReady | None] = var(None, init=False)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.history: list[str] = []
        self.found: list[tuple[Section, int]] = []
        self.at = 0

    def on_overview_ready(self, m: OverviewReady) -> None:
        self.data = m

    def watch_data(self, m: OverviewReady) -> None:
        # the document `kview overview` prints, section by section; empty ones are left out
        parts = []
        for sec in m.document.sections:
            frame = sec.frame
            if sec.name == "trace":
                parts.append(Section(sec.title, frame))
            elif sec.bullets:
                parts.append(Section(sec.title, frame, table=False))
            elif frame.height:
                colour = "Category" if "Category" in frame.columns else None
                name = next((c for c in ("Kernel", "Next kernel") if c in frame.columns), None)
                parts.append(
                    Section(
                        sec.title,
                        frame,
                        colour,
                        on_screen=shown_kernel_names(frame, name, NAME_WIDTH) if name else None,
                    )
                )
        self.sections = parts
        self.search_line = FilterInput(self.history, placeholder="search the overview (a word or a regex)", id="search")
        self.search_line.display = False
        self.show(VerticalScroll(*parts, id="overview-scroll"), self.search_line)
        # once mounted, and only if the Overview is still in front (a focused section in a hidden
        # pane would bring the Overview forward again)
        self.call_after_refresh(lambda: self.focus_content() if self.is_active() else None)

    def is_active(self) -> bool:
        tabs = self.app.query("#tabs")
        return bool(tabs) and getattr(tabs.first(), "active", None) == self.view_id

    def focus_content(self) -> None:
        """The first section (or the one last focused) takes the keys: arrows scroll, tab moves on."""
        sections = self.query(Section)
        if sections and not any(s.has_focus for s in sections):
            sections.first().focus()

    def focused_section(self) -> Section | None:
        sections = [s for s in self.query(Section) if s.has_focus]
        return sections[0] if sections else (self.query(Section).first() if self.query(Section) else None)

    def shown(self) -> Shown:
        """The focused section (Time by category, Top kernels, ...), named."""
        s = self.focused_section()
        if s is None:
            return Shown(pl.DataFrame(), "overview")
        return Shown(s.frame, f"overview {s.title.lower()}")

    # -- search ------------------------------------------------------------------------------
    def action_search(self) -> None:
        if self.data is None:
            return
        self.search_line.display = True
        self.search_line.open("")
        self.search_line.focus()

    @on(Input.Submitted, "#search")
    def _searched(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        self.search_line.display = False
        if not text:
            return
        if not self.history or self.history[-1] != text:
            self.history.append(text)
        try:
            pattern = re.compile(text, re.IGNORECASE)
        except re.error:
            pattern = re.compile(re.escape(text), re.IGNORECASE)
        self.found = [(s, r) for s in self.sections for r in s.matches(pattern)]
        self.at = 0
        if not self.found:
            self.app.notify(f"no {text!r} in the overview", severity="warning", timeout=3)
            self.focus_content()
            return
        self.go_to_match()

    def action_search_next(self, step: int) -> None:
        if self.found:
            self.at = (self.at + step) % len(self.found)
            self.go_to_match()

    def go_to_match(self) -> None:
        section, row = self.found[self.at]
        for s in self.sections:
            if s.marked is not None and s is not section:
                s.mark(None)
        section.mark(row)
        section.focus(scroll_visible=False)
        scroll = self.query_one("#overview-scroll", VerticalScroll)
        y = section.virtual_region.y + section.row_offset(row)
        scroll.scroll_to_region(Region(0, y, 1, 1), animate=False, center=True)
        self.app.notify(f"match {self.at + 1} of {len(self.found)} in {section.title} (n/N: next/previous)", timeout=3)

    def back(self) -> bool:
        if self.data is None:
            return False
        if self.search_line.display:
            self.search_line.display = False
            self.focus_content()
            return True
        if any(s.marked is not None for s in self.sections):
            for s in self.sections:
                s.mark(None)
            self.found = []
            return True
        return False
