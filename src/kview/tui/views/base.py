"""The base of every view: a loading indicator and the loader's stage until data arrives."""
from __future__ import annotations

from typing import ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import LoadingIndicator, Static

from kview.tui.widgets.frame_table import FrameTable


class View(Vertical):
    """Base: a loading indicator until data arrives, then `build()`."""

    view_id: ClassVar[str] = ""   # the tab's id; the key that shows it is its place in VIEWS
    title: ClassVar[str] = ""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.data = None
        self.extra = []

    def compose(self) -> ComposeResult:
        yield LoadingIndicator()
        yield Static("loading…", classes="stage")

    def set_stage(self, text: str) -> None:
        for s in self.query(".stage"):
            s.update(f"loading: {text}…")

    def set_data(self, data, extra=()) -> None:
        self.data, self.extra = data, list(extra)
        self.remove_children()
        self.build()

    def build(self) -> None:  # pragma: no cover - overridden
        pass

    def table_for_copy(self) -> tuple[pl.DataFrame, str]:
        t = self.query(FrameTable)
        return (t.first().shown(), self.view_id) if t else (pl.DataFrame(), self.view_id)

    def back(self) -> bool:
        return False

    def focus_if_active(self, widget) -> None:
        """Focus `widget` only when this view's tab is the active one (focusing a widget in a
        hidden pane would bring that pane forward)."""
        try:
            from textual.widgets import TabbedContent

            if self.app.query_one(TabbedContent).active == self.view_id:
                widget.focus()
        except Exception:
            pass
