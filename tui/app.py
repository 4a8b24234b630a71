"""`kview TRACE [TRACE ...]`: the Textual explorer over the core.

The first frame is drawn at once; each trace is opened in a thread worker, which posts
`TraceOpened` (messages.py) with the trace's place on the command line and nothing more. Each
view that shows one trace then fetches its own document of the trace shown in its own thread
worker (View.fetch): the view in front first, the others once it has its document (on two
cores the first table must not wait for seven others; they then come in the background, so a
view is ready when shown). `T` switches the views to another trace: each view is reset and
fetches again (cheap once the trace's store holds the tables). Once every trace is open and
the first view has its document, each view that shows every trace (Compare, Ranks, the run's
Timeline) makes its tables in its own workers.

The app knows no view by name: it builds its tabs, their keys, the help screen's list and the
command palette from the registered views (views/registry.py) and calls their hooks (View).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

import polars as pl
from textual import on, work
from textual.app import App, ComposeResult
from textual.await_complete import AwaitComplete
from textual.command import CommandPalette
from textual.widgets import Header, TabbedContent, TabPane

from kview import atomic_write
from kview.analysis import ranks as rk
from kview.analysis.memory_timeline import Snapshot
from kview.io.snapshot_pickle import is_snapshot_file
from kview.output import render
from kview.output.visible import visible_lines
from kview.trace import Trace
from kview.tui.clipboard import copy, copy_dir
from kview.tui.commands import KviewCommands, SafeCommandPalette
from kview.tui.export import EXPORT_FORMATS, destination, without_bars
from kview.tui.keymap import GLOBAL_KEYS, bindings
from kview.tui.loading import open_one
from kview.tui.messages import FetchFailed, ForView, LoadFailed, TraceOpened
from kview.tui.views import registered, shown_by
from kview.tui.views.base import FetchDone, View
from kview.tui.visible_filter import VisibleFilter
from kview.tui.widgets.filter_input import FilterInput
from kview.tui.widgets.frame_table import UNITS, FrameTable
from kview.tui.widgets.help_screen import HelpScreen
from kview.tui.widgets.keys_footer import KeysFooter
from kview.tui.widgets.pick_screen import PickScreen


class ViewTabs(TabbedContent):
    """The views' tabs, switched only by the keys (and clicks on a tab): a widget focused in a
    hidden view (a table rebuilt for another trace) must not bring that view forward."""

    def _on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        event.prevent_default()  # TabbedContent's own handler would show that pane
        event.stop()


class KviewApp(App):
    TITLE = "kview"
    COMMANDS = App.COMMANDS | {KviewCommands}
    BINDINGS = bindings(GLOBAL_KEYS)  # and each view's key (made in __init__: views may register later)
    CSS_PATH = "kview.tcss"

    def action_command_palette(self) -> None:
        if self.use_command_palette and not CommandPalette.is_open(self):
            self.push_screen(SafeCommandPalette(id="--command-palette"))

    def pop_screen(self) -> AwaitComplete:
        """Pop the screen in front, unless it is the last one: a dialog (the command palette too)
        answered by the first of keys that arrive in one read (`ctrl+p enter enter`) is
        dismissed again by the next, and the app must not end over it."""
        if len(self.screen_stack) <= 1:
            return AwaitComplete(asyncio.sleep(0))
        return super().pop_screen()

    def __init__(
        self,
        paths: list[str],
        use_cache: bool = True,
        note: str | None = None,
        traces: list[Trace | Snapshot] | None = None,
        cluster: tuple[str, str] | None = None,
    ):
        super().__init__()
        # each view is shown by its key (registry.shown_by: the n-th by n, Ranks by 7)
        for key, cls in shown_by():
            self.bind(key, f"show_view('{cls.view_id}')", description=cls.title, show=False)
        # every line drawn passes it: no control character from a trace reaches the terminal
        self._filters.append(VisibleFilter())
        self.paths = paths
        self.traces = traces  # opened by the CLI, one per path (else each worker opens its path)
        self.use_cache = use_cache
        self.note = note
        self.views: dict[str, View] = {}  # by view id, made in compose
        self.loaded: dict[int, Trace] = {}  # the traces opened, by their place on the command line
        self.failed: set[int] = set()
        self.snapshots: set[int] = set()  # memory snapshots opened alone: in, nothing to compare
        self.opened: dict[int, Trace | Snapshot] = {}  # every file opened (a trace or a snapshot)
        self.started: set[int] = set()  # traces whose opening has started
        # a run of several large traces: the Ranks view's come from worker processes, as
        # `kview ranks` reads them, and a trace other than the first loads when it is shown
        self.run_in_processes = False
        # (address, cache folder): the run is summarized rank file by rank file on this Dask
        # cluster (`kview RUN/ --cluster`), Ranks and Compare of ranks from the summaries
        self.cluster = cluster
        self.summarized: object = None  # the run's rank_files.SummarizedRun, once summarized
        self.current = 0  # the trace the views show
        # the views that fetch once the one in front has its document (of the trace shown)
        self.waiting: list[View] = []
        self.front: View | None = None  # the view fetching first
        self.fetching: set[str] = set()  # the views whose documents of it are still coming
        self.first_in = False  # the first view had its first document: the rest may start
        self.t0 = time.perf_counter()
        self._executor: _Unjoined | None = None  # the thread workers' (made on mount)
        views = registered()
        self.first_view = next((v.view_id for v in views if v.shown_first), views[0].view_id)

    @property
    def ready_at(self) -> float | None:
        """perf_counter() when the first view's first table was built (None before)."""
        return self.views[self.first_view].shown_at if self.first_view in self.views else None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with ViewTabs(initial=self.first_view, id="tabs"):
            for key, cls in shown_by():
                with TabPane(f"{key} {cls.title}", id=cls.view_id):
                    view = self.views[cls.view_id] = cls(id=f"view-{cls.view_id}")
                    yield view
        yield KeysFooter(compact=True)

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        # Quitting never waits for a load: the thread workers run on an executor whose shutdown
        # does not join them (run() then leaves without the interpreter joining them either).
        self._executor = _Unjoined(thread_name_prefix="kview-load")
        loop.set_default_executor(self._executor)
        # SIGTERM/SIGHUP/SIGINT end the app the ordinary way, so the terminal is restored
        # (alternate screen left, mouse tracking off) before the process exits.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.leave_on_signal, 128 + sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests)
                pass
        self.show_which_trace()
        if self.note:
            self.notify(self.note, title="kview", timeout=8)
        members = self.run_members()
        self.run_in_processes = self.large_run(members)
        for i in range(len(self.paths)):
            if i == 0 or i not in members or not self.run_in_processes:
                self.start_load(i)
        for view in self.views.values():
            view.session_started()

    def leave_on_signal(self, code: int) -> None:
        """End the ordinary way; should that hang (a dropped SSH connection: Textual waits to
        write to a terminal that is gone), leave anyway a moment later."""
        timer = threading.Timer(LEAVE_WITHIN_S, _leave_now, (code,))
        timer.daemon = True
        timer.start()
        self.exit(None, code)

    def run_members(self) -> list[int]:
        """The places of the traces (not memory snapshots) on the command line."""

        if self.traces:
            return [i for i, t in enumerate(self.traces) if isinstance(t, Trace)]
        return [i for i, p in enumerate(self.paths) if not is_snapshot_file(p)]

    def large_run(self, members: list[int]) -> bool:
        """Several traces this large in all are read as `kview ranks` reads them (worker
        processes filling the frame cache), not every view of every trace in this process."""

        if self.cluster is not None and len(members) > 1:
            return True
        if not self.use_cache or len(members) < 2:
            return False
        try:
            return rk.run_bytes([Path(self.paths[i]) for i in members]) >= rk.PARALLEL_BYTES
        except OSError:
            return False

    def start_load(self, index: int) -> None:
        if index not in self.started:
            self.started.add(index)
            if index == self.current and not self.traces:
                for v in self.one_trace_views():
                    v.show_stage(f"opening {self.trace_name(index)}")
            self.open_file(index, self.paths[index])

    # -- opening (a thread worker; post_message is thread-safe) -------------------------------
    @work(thread=True, exit_on_error=False)
    def open_file(self, index: int, path: str) -> None:
        """Open trace `index` (the CLI may have opened it already) and say so; the views fetch
        their documents of it themselves."""
        try:
            self.post_message(TraceOpened(index, open_one(self.traces[index] if self.traces else path, self.use_cache)))
        except Exception as e:  # the CLI validated the file; damage found while opening is reported
            from kview.errors import TraceError

            why = e.problem if isinstance(e, TraceError) else f"cannot be read ({type(e).__name__}: {e})"
            self.post_message(LoadFailed(index, f"kview: {path}: {why}".splitlines()[0]))

    @property
    def working(self) -> int:
        """Thread workers still running: the loads' and the views' (a cache entry may be half written)."""
        return self._executor.running if self._executor is not None else 0

    def view(self, vid: str) -> View:
        return self.views[vid]

    def one_trace_views(self) -> list[View]:
        """The views that show the trace in front (not every trace at once)."""
        return [v for v in self.views.values() if not v.every_trace]

    @on(TraceOpened)
    def _trace_opened(self, m: TraceOpened) -> None:
        self.opened[m.index] = m.trace
        if isinstance(m.trace, Trace):
            self.loaded[m.index] = m.trace
        else:  # a memory snapshot alone: the view that shows one comes forward
            self.snapshots.add(m.index)
            if m.index == self.current:
                shows = next((vid for vid, v in self.views.items() if type(v).snapshot_document), None)
                if shows is not None:
                    self.action_show_view(shows)
        if m.index == self.current:
            self.fetch_views(m.trace)
        self._compare_when_all_in()

    def fetch_views(self, trace: Trace | Snapshot) -> None:
        """Each view that shows one trace fetches its document of `trace`: the one in front now,
        the others once it has its document (FetchDone)."""
        views = [v for v in self.one_trace_views() if v.document_of(trace) is not None]
        front = self.active_view()
        self.front = front if front in views else None
        self.waiting = sorted(
            (v for v in views if v is not self.front), key=lambda v: (type(v).fetched_last, type(v).fetched_late)
        )
        self.fetching = {v.view_id for v in views}
        if self.front is not None:
            self.front.fetch(trace)
        else:  # the view in front shows every trace: none to wait for
            self._front_done(trace)

    def _front_done(self, trace: Trace | Snapshot) -> None:
        """The view in front has its document: the others fetch theirs, and (the first time)
        the views of every trace may start."""
        self.front = None
        self._fetch_next(trace)
        if not self.first_in:
            self.first_in = True
            self._compare_when_all_in()

    def _fetch_next(self, trace: Trace | Snapshot) -> None:
        """The next view waiting its turn fetches its document. One at a time: on a large trace
        each makes tables of GBs, and made at once their peaks added up (every view of dense_x25
        at once: 6.3 GB in the explorer); a view shown before its turn fetches at once."""
        if self.waiting:
            self.waiting.pop(0).fetch(trace)

    @on(FetchDone)
    def _fetch_done(self, m: FetchDone) -> None:
        if m.trace is not self.opened.get(self.current):  # a trace shown before
            return
        self.fetching.discard(m.view_id)
        if self.front is not None and m.view_id == self.front.view_id:
            self._front_done(m.trace)
        elif self.front is None:
            self._fetch_next(m.trace)
        if not self.fetching and not self.waiting:
            # What the views hold lives as long as the session: out of the garbage collector's
            # sight, a full collection no longer walks it in the middle of a keystroke (80 ms
            # on a 45k-kernel trace's explorer; a held key's redraws are 1-10 ms).
            gc.freeze()

    @on(FetchFailed)
    def _fetch_failed(self, m: FetchFailed) -> None:
        """A view's document could not be made: the file's damage, found while reading it."""
        index = next((i for i, t in self.opened.items() if t is m.trace), None)
        if index is not None and index not in self.failed:
            self.post_message(LoadFailed(index, f"kview: {self.paths[index]}: {m.why}".splitlines()[0]))

    def on_unmount(self) -> None:
        gc.unfreeze()  # the session's objects are garbage like any other again

    @on(LoadFailed)
    def _load_failed(self, m: LoadFailed) -> None:
        if m.index == 0:  # nothing to show: leave with the reason, as the CLI does for bad input
            self.exit(return_code=2, message=m.error)
            return
        if m.index in self.failed:
            return
        self.notify(m.error, title="could not load", severity="error", timeout=30)
        self.failed.add(m.index)
        self.loaded.pop(m.index, None)
        self._compare_when_all_in()

    def _compare_when_all_in(self) -> None:
        """Once every trace is open or has failed (those that failed are left out, and so are
        memory snapshots: no trace to compare) and the first view has its document (the first
        table waits for none of this), the views that show every trace make their tables."""
        if not self.first_in or len(self.loaded) + len(self.failed) + len(self.snapshots) < len(self.paths):
            return
        for view in self.views.values():
            view.all_traces_in()

    @on(ForView)
    def _for_view(self, m: ForView) -> None:
        """A request for one view: show it, and hand it the request."""
        self.action_show_view(m.view)
        self.views[m.view].request(m)

    # -- which trace the views show -------------------------------------------------------
    def trace_name(self, index: int) -> str:
        return Path(self.paths[index]).name

    def show_which_trace(self) -> None:
        """The header says which trace the view in front shows."""
        tabs = self.query(TabbedContent)
        active = tabs.first().active if tabs else self.first_view
        n = len(self.paths)
        if active in self.views and self.views[active].every_trace and n > 1:
            self.sub_title = f"all {n} traces"
            if note := self.views[active].trace_note():  # e.g. how files that share no clock were lined up
                self.sub_title += f" · {note}"
        elif n > 1:
            # the place first: a long file name is cut at the end of the header, not the place
            self.sub_title = f"trace {self.current + 1}/{n} (T): {self.trace_name(self.current)}"
        else:
            self.sub_title = self.trace_name(self.current)

    def switch_trace(self, index: int) -> None:
        """Show trace `index` in every view that shows one trace; the view in front is rebuilt
        now, the others when they are next shown."""
        if index == self.current or not 0 <= index < len(self.paths):
            return
        if index in self.failed:
            self.notify(f"{self.trace_name(index)} could not be loaded", severity="error")
            return
        self.current = index
        for view in self.views.values():
            view.forget_trace()
        for view in self.one_trace_views():
            view.reset()
        self.waiting, self.front, self.fetching = [], None, set()
        if index in self.opened:  # else once it is open (a large run's traces open when shown)
            self.fetch_views(self.opened[index])
        self.start_load(index)
        self.show_which_trace()
        self.notify(f"showing {self.trace_name(index)}", timeout=2)

    def action_pick_trace(self) -> None:
        names = [
            f"{i + 1}  {self.trace_name(i)}"
            + (
                "  (could not be loaded)"
                if i in self.failed
                else "  (memory snapshot)"
                if i in self.snapshots
                else ""
                if i in self.loaded
                else "  (loading)"
                if i in self.started
                else "  (loads when shown)"
            )
            for i in range(len(self.paths))
        ]
        self.push_screen(PickScreen("Show which trace", names, self.current), self._picked_trace)

    def _picked_trace(self, index: int | None) -> None:
        if index is not None:
            self.switch_trace(index)

    def action_next_trace(self, step: int) -> None:
        self.switch_trace((self.current + step) % len(self.paths))

    def check_action(self, action: str, parameters) -> bool | None:
        # typing into a text line must not trigger single-letter keys (a hidden one takes none)
        focused = self.focused
        if (
            isinstance(focused, FilterInput)
            and focused.display
            and action in ("copy", "export", "help", "quit", "show_view", "pick_trace", "next_trace", "cycle_unit")
        ):
            return False
        if action in ("pick_trace", "next_trace"):  # shown (and run) only with several traces
            return len(self.paths) > 1
        return True

    # -- actions ----------------------------------------------------------------
    def active_view(self) -> View:
        return self.views[self.query_one(TabbedContent).active]

    def action_show_view(self, vid: str) -> None:
        self.query_one(TabbedContent).active = vid
        self.views[vid].brought_forward()
        self.views[vid].focus_content()
        self.show_which_trace()

    @on(TabbedContent.TabActivated)
    def _tab_activated(self, _event: TabbedContent.TabActivated) -> None:
        vid = self.query_one(TabbedContent).active
        view = self.views[vid]
        view.brought_forward()
        view.came_forward()
        if view in self.waiting:  # shown before its turn: it fetches now
            self.waiting.remove(view)
            if self.current in self.opened:
                view.fetch(self.opened[self.current])
        self.show_which_trace()

    def show_view_then(self, vid: str, then: Callable[[], object]) -> None:
        """Show view `vid`, then run one of its palette entries."""
        self.action_show_view(vid)
        then()

    def action_cycle_unit(self) -> None:
        units = list(UNITS)
        FrameTable.unit = units[(units.index(FrameTable.unit) + 1) % len(units)]
        for t in self.query(FrameTable):
            t.relayout()
        self.notify(f"durations in {FrameTable.unit}", timeout=2)

    def action_copy(self, kind: str) -> None:
        shown = self.active_view().shown()
        frame = shown.frame if kind == "md" else without_bars(shown)
        if frame.height == 0:
            self.notify("nothing to copy yet", severity="warning")
            return
        text = _document(shown, frame, kind)
        channels, path = copy(self, text, kind)
        where = f" → {path}" if path else ""
        size = "" if "terminal (OSC 52)" in channels else " (too large for the terminal clipboard)"
        self.notify(
            f"copied {shown.what} ({frame.height:,} rows) as {'Markdown' if kind == 'md' else 'TSV'} via "
            f"{', '.join(channels) or 'nothing'}{size}{where}",
            title="copy",
            timeout=6,
        )

    def action_export(self) -> None:
        shown = self.active_view().shown()
        if shown.frame.height == 0:
            self.notify("nothing to export yet", severity="warning")
            return
        stem = f"{Path(self.paths[self.current]).stem}_{shown.what}"
        targets = [destination(stem, fmt) for fmt in EXPORT_FORMATS]
        options = [f"{i}  {fmt:<4}  → {path}" for i, (fmt, path) in enumerate(zip(EXPORT_FORMATS, targets), 1)]
        title = f"Export {shown.what} ({shown.frame.height:,} rows)"
        self.push_screen(
            PickScreen(title, options), lambda i: self.export_as(EXPORT_FORMATS[i]) if i is not None else None
        )

    def export_as(self, fmt: str | None) -> None:
        """Write what is shown as `fmt` into the working directory (a new name when a file of
        that name exists: nothing is overwritten), or the copies folder when it is read-only."""
        if not fmt:
            return
        shown = self.active_view().shown()
        frame = shown.frame if fmt == "md" else without_bars(shown)
        text = _document(shown, frame, fmt)
        stem = f"{Path(self.paths[self.current]).stem}_{shown.what}"
        out = destination(stem, fmt)
        try:
            with open(out, "x") as f:
                f.write(text)
        except OSError:
            copy_dir().mkdir(parents=True, exist_ok=True)
            out = destination(stem, fmt, copy_dir())
            with open(out, "x") as f:
                f.write(text)
        self.notify(f"exported {shown.what} ({frame.height:,} rows) to {out}", title="export", timeout=8)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.query_one(TabbedContent).active, len(self.paths) > 1))

    def action_step_back(self) -> None:
        self.active_view().back()

    async def run_view_action(self, vid: str, action: str, table: bool = False) -> None:
        """Run `action` of view `vid` (or of its table), showing the view first (the palette)."""
        self.action_show_view(vid)
        view = self.views[vid]
        target = view.query(FrameTable).first() if table and view.query(FrameTable) else view
        await self.run_action(action, target)


def _document(shown, frame: pl.DataFrame, fmt: str) -> str:
    """What `y`/`Y` copy and `e` exports of `shown` in `fmt`: one text for both, so a copy is
    the export of the same view. A picture (the Timeline) is its text in Markdown, as
    `kview timeline -f md` writes it; its numbers in the other formats."""
    if fmt == "md" and shown.picture is not None:
        return render.code_block(visible_lines(shown.picture))
    return render.render(frame, fmt)


LEAVE_WITHIN_S = 2.0  # after a signal, the ordinary exit's time to restore the terminal


def _leave_now(code: int) -> None:
    """Leave as run() does, without the terminal: temporaries removed, atexit handlers run (a
    run's worker processes end)."""
    import atexit

    atomic_write.remove_pending()
    atexit._run_exitfuncs()
    os._exit(code)


class _Unjoined(ThreadPoolExecutor):
    """The event loop's executor for thread workers: asyncio.run() ends by shutting it down,
    which must not wait for a load that is still running. It counts the workers running."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.running = 0
        self._lock = threading.Lock()

    def submit(self, fn, /, *args, **kwargs):
        def counted():
            with self._lock:
                self.running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self._lock:
                    self.running -= 1

        return super().submit(counted)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


def size_from_the_terminal(stream: TextIO | None) -> None:
    """Let the explorer take its size from the terminal `stream` is (Textual reads COLUMNS and
    LINES before asking the terminal, and again on every resize): a pair left in the environment
    (a shell's export, a test runner's 80x24) would fix its size whatever the window's, and no
    resize would change it. Kept where the terminal cannot say its size."""
    try:
        columns, lines = os.get_terminal_size(stream.fileno()) if stream is not None else (0, 0)
    except (AttributeError, ValueError, OSError):
        return
    if columns > 0 and lines > 0:
        os.environ.pop("COLUMNS", None)
        os.environ.pop("LINES", None)


def run(
    paths: list[str],
    use_cache: bool = True,
    note: str | None = None,
    traces: list[Trace | Snapshot] | None = None,
    cluster: tuple[str, str] | None = None,
) -> int:
    """Run the explorer, then leave at once: a load still running in a thread is not joined,
    and the interpreter's teardown (freeing every frame of the trace, seconds on a large one)
    is skipped; the atexit handlers still run and the output is flushed."""
    import atexit

    size_from_the_terminal(sys.__stdout__)
    app = KviewApp(paths, use_cache=use_cache, note=note, traces=traces, cluster=cluster)
    app.run()  # the terminal is restored when this returns
    code = app.return_code or 0
    if app.working:
        atomic_write.remove_pending()  # a cache entry a worker was writing
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
