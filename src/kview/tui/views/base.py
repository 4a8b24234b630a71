"""The base of every view: a loading indicator and the loader's stage until its data arrives."""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import LoadingIndicator, Static, TabbedContent, Tree

from kview.tui.widgets.frame_table import FrameTable


class View(Vertical):
    """A tab's content. Until its message arrives it shows the loader's stage; the view's own
    `on_<message>` handler stores the message in a reactive attribute, whose watcher builds the
    widgets (`show`)."""

    view_id: ClassVar[str] = ""  # the tab's id; the key that shows it is its place in VIEWS
    title: ClassVar[str] = ""

    def compose(self) -> ComposeResult:
        yield LoadingIndicator()
        yield Static("loading…", classes="stage")

    def show_stage(self, text: str) -> None:
        """Say what the loader is doing (only while the view still waits for its data)."""
        for s in self.query(".stage").results(Static):
            s.update(f"loading: {text}…")

    def show(self, *widgets: Widget) -> None:
        """Replace the loading indicator (or what was shown) by `widgets`."""
        self.remove_children()
        self.mount(*widgets)

    def focus_content(self) -> None:
        """Give the keys to the view's table or tree (when it has one yet)."""
        widgets: list[Widget] = [*self.query(FrameTable)] or [*self.query(Tree)]
        for w in widgets:
            w.focus()
            break

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        """The table as shown, for copy and export (empty while loading)."""
        t = self.query(FrameTable)
        return (t.first().shown(), self.view_id) if t else (pl.DataFrame(), self.view_id)

    def back(self) -> bool:
        """Step back one level (escape); False when there is nothing to step back from."""
        return False

    def focus_if_active(self, widget: Widget) -> None:
        """Focus `widget` only when this view's tab is the active one (focusing a widget in a
        hidden pane would bring that pane forward)."""
        tabs = self.app.query(TabbedContent)
        if tabs and tabs.first().active == self.view_id:
            widget.focus()
