"""The base of every view: it fetches its own document of the trace shown in its own thread
worker, shows a loading indicator and the document's stage until its data arrives, and says
what it shows for copy and export."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import polars as pl
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widget import Widget
from textual.widgets import LoadingIndicator, Static, TabbedContent, Tree
from textual.worker import get_current_worker

from kview.analysis.memory_timeline import Snapshot
from kview.errors import TraceError
from kview.tui.keymap import Key
from kview.tui.loading import no_trace
from kview.tui.messages import FetchFailed, ForView, SnapshotOnly, Stage, frozen_message
from kview.tui.widgets.frame_table import FrameTable

if TYPE_CHECKING:
    from kview.trace import Trace

# what a view shows of one trace: its messages (and Stages), in order; made in the view's worker
Document = Callable[[Any, bool], Iterator[Message]]


@frozen_message
class Fetched(Message):
    """A message of a view's document, made by fetch number `fetch` (an older one is dropped)."""

    fetch: int
    message: Message


@frozen_message
class FetchDone(Message):
    """View `view_id` has fetched its document of `trace` (or gave up: failed, cancelled); the
    app starts the views waiting for the one in front."""

    view_id: str
    trace: Trace | Snapshot


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


class Session(Protocol):
    """What a view may read of the app: the traces on the command line and how far they are."""

    paths: list[str]
    use_cache: bool
    current: int  # the trace the views show
    loaded: dict[int, Trace]  # the traces opened, by their place on the command line
    snapshots: set[int]  # memory snapshots opened alone
    started: set[int]  # traces whose opening has started
    run_in_processes: bool  # a large run: its traces read in worker processes
    cluster: tuple[str, str] | None  # (address, cache folder) of a Dask cluster
    summarized: object  # the run's rank_files.SummarizedRun, once summarized on the cluster

    def run_members(self) -> list[int]: ...
    def start_load(self, index: int) -> None: ...
    def show_which_trace(self) -> None: ...


class View(Vertical):
    """A tab's content. A view that shows one trace fetches its `document` of the trace shown
    in its own thread worker (`fetch`); until its message arrives it shows the document's stage;
    the view's own `on_<message>` handler stores the message in a reactive attribute, whose
    watcher builds the widgets (`show`). `reset` goes back to waiting (another trace is about
    to be shown, and fetched). A view of every trace (Compare, Ranks) makes its tables in its
    own workers once every trace is in (`all_traces_in`).

    The class is the view's registration (views/registry.py): its id, title and key; the app
    calls the hooks below and knows nothing else of a view."""

    view_id: ClassVar[str] = ""  # the tab's id
    key: ClassVar[str] = ""  # the key that shows it ("": its place among the views; registry.shown_by)
    title: ClassVar[str] = ""
    shown_first: ClassVar[bool] = False  # the tab in front when the app starts
    # a view's keys beyond the keymap's (keymap.VIEW_KEYS, by view id): registering it adds them
    # there; its BINDINGS are `keymap.bindings(keys)`
    keys: ClassVar[tuple[Key, ...]] = ()
    data_vars: ClassVar[tuple[str, ...]] = ("data",)  # the reactive attributes holding messages
    every_trace: ClassVar[bool] = False  # True: shows all open traces at once (not switched)
    shown_at: float | None = None  # perf_counter() when its first table was built (the first view's: ready)
    # (trace, use_cache) -> its messages: the view fetches them itself, in its own thread worker, for
    # the trace shown once it is open (None: the view shows every trace, from its own workers)
    document: ClassVar[Document | None] = None
    # (snapshot, use_cache) -> its messages for a memory snapshot opened alone (None: the view
    # says the file is no trace; the app shows the view that has one)
    snapshot_document: ClassVar[Document | None] = None
    # True: on a large trace its document's tables come from the worker after the range tables
    # (kview.tui.prepare.BATCHES["documents"]): it fetches after the views of those, which show meanwhile
    fetched_late: ClassVar[bool] = False
    # True: it shows the range tables (BATCHES["ranges"]) and what it makes of them, held from
    # then on (the NVTX tree: 0.25 GB on dense_x25): it fetches after every other view, once the
    # worker's last batch is made, so the explorer does not hold them through it; shown before
    # its turn, it fetches at once
    fetched_last: ClassVar[bool] = False
    _fetches = 0  # fetches started: a message of an older one (another trace) is dropped
    # what the view shows, made while its tab was hidden, mounted when it comes forward: each
    # view mounted behind the one in front laid the whole screen out again and drew it (tens
    # of ms each, on the UI thread every view's loader waits for), for widgets nobody saw yet
    _unshown: tuple[Widget, ...] | None = None

    @property
    def session(self) -> Session:
        return cast(Session, self.app)

    # -- hooks the app calls ------------------------------------------------------------
    def session_started(self) -> None:
        """The app is up and every trace's load has started (or waits to be shown)."""

    def all_traces_in(self) -> None:
        """Every trace on the command line is in: loaded, failed, or a memory snapshot."""

    def forget_trace(self) -> None:
        """Another trace is about to be shown (before `reset`, when the view is next shown)."""

    def came_forward(self) -> None:
        """The view's tab came forward."""

    def request(self, m: ForView) -> None:
        """A request addressed to this view (a ForView message); the app showed the view."""

    def trace_note(self) -> str:
        """What the header adds after "all N traces" while this view shows every trace."""
        return ""

    def fetch(self, trace: Trace | Snapshot) -> None:
        """Fetch the view's document of `trace` in its own thread worker (the one of the trace
        shown before is cancelled), each message posted back to this view as it comes; then
        tell the app (FetchDone), and what failed (FetchFailed: damage found in the file)."""
        document = self.document_of(trace)
        if document is None:
            return
        self._fetches += 1
        fetch, use_cache, app = self._fetches, self.session.use_cache, self.app

        def run() -> None:
            worker = get_current_worker()
            try:
                for message in document(trace, use_cache):
                    if worker.is_cancelled:
                        return
                    self.post_message(Fetched(fetch, message))
            except Exception as e:  # the file's damage, found while reading it: the app says so
                why = e.problem if isinstance(e, TraceError) else f"cannot be read ({type(e).__name__}: {e})"
                app.post_message(FetchFailed(trace, why))
            finally:
                app.post_message(FetchDone(self.view_id, trace))

        self.run_worker(run, thread=True, group=f"document-{self.view_id}", exclusive=True, exit_on_error=False)

    def document_of(self, trace: Trace | Snapshot) -> Document | None:
        """The document the view fetches of `trace` (a memory snapshot: what the file is,
        unless the view shows snapshots)."""
        cls = type(self)
        if not isinstance(trace, Snapshot):
            return cls.document
        if cls.snapshot_document is not None:
            return cls.snapshot_document
        if cls.document is None:
            return None
        shown_in = next((type(v).title for v in self.app.query(View) if type(v).snapshot_document), "")
        return lambda snap, _use_cache: no_trace(snap, shown_in)

    def on_fetched(self, m: Fetched) -> None:
        m.stop()
        if m.fetch != self._fetches:
            return
        if isinstance(m.message, Stage):
            self.show_stage(m.message.text)
        else:
            getattr(self, m.message.handler_name)(m.message)

    def palette(self) -> list[tuple[str, Callable[[], object]]]:
        """The view's own entries of the command palette, beyond its keys."""
        return []

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
        if not self.in_front():
            self._unshown = widgets
            return
        self._unshown = None
        self.remove_children()
        self.mount(Vertical(*widgets, classes="shown"))

    def brought_forward(self) -> None:
        """The view's tab is in front (the app calls it as it shows the view, before anything
        else reaches the view): what it made while hidden is mounted."""
        if self._unshown is not None:
            self.show(*self._unshown)
            # the keys go to its table or tree once they are mounted (now there is none)
            self.call_after_refresh(lambda: self.focus_content() if self.in_front() else None)

    def in_front(self) -> bool:
        """Whether this view's tab is the active one (or there are no tabs)."""
        tabs = self.app.query(TabbedContent)
        return not tabs or tabs.first().active == self.view_id

    def reset(self) -> None:
        """Forget the data shown and wait for the next trace's (no watcher runs)."""
        for name in self.data_vars:
            if (attribute := getattr(type(self), name, None)) is not None:
                self.set_reactive(attribute, None)
        self.show(LoadingIndicator(), Static("loading…", classes="stage"))

    def on_snapshot_only(self, m: SnapshotOnly) -> None:
        """The file shown is no trace (a memory snapshot): say so instead of waiting."""
        self.show(Static(m.note, classes="note"))

    def focus_content(self) -> None:
        """Give the keys to the view's table or tree (when it has one yet), or to the view itself
        where it can take the focus. With nothing to focus, no widget keeps the focus: a focused
        widget in a hidden pane would bring its tab forward again."""
        widgets: list[Widget] = [*self.query(FrameTable)] or [*self.query(Tree)] or ([self] if self.can_focus else [])
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
