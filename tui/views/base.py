"""The base of every view: a loading indicator and the loader's stage until its data arrives,
and what it shows for copy and export."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import polars as pl
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import LoadingIndicator, Static, TabbedContent, Tree

from kview.tui.messages import SnapshotOnly
from kview.tui.widgets.frame_table import FrameTable


@dataclass(frozen=True)
class Shown:
    """What a view shows, for copy and export: the table, what it is in words (the
    notification and the file name say it), and its bar columns (glyphs, left out of data
    formats: CSV, TSV and JSON get numbers only)."""

    frame: pl.DataFrame
    what: str
    bars: tuple[str, ...] = ()
    # a view that is a picture (the Timeline): its text, which `y` and a Markdown export carry
    # as `kview timeline -f md` writes it; `Y` and the data formats carry `frame`, the numbers
    picture: str | None = None


class View(Vertical):
    """A tab's content. Until its message arrives it shows the loader's stage; the view's own
    `on_<message>` handler stores the message in a reactive attribute, whose watcher builds the
    widgets (`show`). `reset` goes back to waiting (another trace is about to be shown)."""

    view_id: ClassVar[str] = ""  # the tab's id
    key: ClassVar[str] = ""  # the key that shows it ("": its place in VIEWS; views.shown_by)
    title: ClassVar[str] = ""
    data_vars: ClassVar[tuple[str, ...]] = ("data",)  # the reactive attributes holding messages
    every_trace: ClassVar[bool] = False  # True: shows all open traces at once (not switched)

    def compose(self) -> ComposeResult:
        yield LoadingIndicator()
        yield Static("loading…", classes="stage")

    def show_stage(self, text: str) -> None:
        """Say what the loader is doing (only while the view still waits for its data)."""
        for s in self.query(".stage").results(Static):
            s.update(f"loading: {text}…")

    def show(self, *widgets: Widget) -> None:
        """Replace the loading indicator (or what was shown) by `widgets`. They go in a fresh
        container: the old one leaves at the next refresh, and ids need only be unique among
        siblings, so a view can be rebuilt (another trace, another comparison) at once. A view
        no longer in the app (it is leaving: a load's message that came after a signal) shows
        nothing: mounting there would fail and turn a clean exit into an error."""
        if not self.is_attached:
            return
        self.remove_children()
        self.mount(Vertical(*widgets, classes="shown"))

    def reset(self) -> None:
        """Forget the data shown and wait for the next trace's (no watcher runs)."""
        for name in self.data_vars:
            self.set_reactive(getattr(type(self), name), None)
        self.show(LoadingIndicator(), Static("loading…", classes="stage"))

    def on_snapshot_only(self, m: SnapshotOnly) -> None:
        """The file shown is no trace (a memory snapshot): say so instead of waiting."""
        self.show(Static(m.note, classes="note"))

    def focus_content(self) -> None:
        """Give the keys to the view's table or tree (when it has one yet). With nothing to
        focus, no widget keeps the focus: a focused widget in a hidden pane would bring its tab
        forward again."""
        widgets: list[Widget] = [*self.query(FrameTable)] or [*self.query(Tree)]
        for w in widgets:
            self.focus_if_active(w)
            break
        else:
            self.screen.set_focus(None)

    def shown(self) -> Shown:
        """What is shown, for copy and export (empty while loading)."""
        t = self.query(FrameTable)
        return Shown(t.first().shown(), self.title.lower()) if t else Shown(pl.DataFrame(), self.title.lower())

    def back(self) -> bool:
        """Step back one level (escape); False when there is nothing to step back from."""
        return False

    def focus_if_active(self, widget: Widget) -> None:
        """Focus `widget` only when this view's tab is the active one (focusing a widget in a
        hidden pane would bring that pane forward); a widget being mounted is focused once it is
        (a rebuilt table keeps the keys)."""
        tabs = self.app.query(TabbedContent)
        if tabs and tabs.first().active == self.view_id:
            if widget.is_mounted:
                widget.focus()
            else:  # runs once the widget's own message queue does, i.e. once it is mounted
                widget.call_after_refresh(self.focus_if_active, widget)
