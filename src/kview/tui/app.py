"""`kview TRACE [TRACE ...]`: the Textual explorer over the core.

The first frame is drawn at once; each trace loads in a thread worker that posts one typed
message per thing that became ready (messages.py) straight to the view that shows it, so the
kernel summary appears while attribution still runs. Once every trace is in, a second worker
makes the Compare table.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

from textual import on, work
from textual.app import App, ComposeResult
from textual.widgets import Footer, Header, TabbedContent, TabPane

from kview.output import render
from kview.tui.clipboard import copy
from kview.tui.commands import KviewCommands
from kview.tui.keymap import GLOBAL_KEYS, bindings
from kview.tui.loading import compare, load
from kview.tui.messages import CompareReady, LoadFailed, OpenKernels, Stage, TraceLoaded, ViewMessage
from kview.tui.views import VIEWS
from kview.tui.views.base import View
from kview.tui.views.kernels import KernelsView
from kview.tui.widgets.export_screen import ExportScreen
from kview.tui.widgets.help_screen import HelpScreen


class KviewApp(App):
    TITLE = "kview"
    COMMANDS = App.COMMANDS | {KviewCommands}
    BINDINGS = bindings(GLOBAL_KEYS)
    CSS_PATH = "kview.tcss"

    def __init__(self, paths: list[str], use_cache: bool = True, note: str | None = None):
        super().__init__()
        self.paths = paths
        self.use_cache = use_cache
        self.note = note
        self.views: dict[str, View] = {}  # by view id, made in compose
        self.loaded: dict[int, TraceLoaded] = {}  # by the trace's place on the command line
        self.failed: set[int] = set()
        self.t0 = time.perf_counter()
        self.working = 0  # loads and comparisons still running
        self._working_lock = threading.Lock()

    @property
    def kernels(self) -> KernelsView:
        return cast(KernelsView, self.views["kernels"])

    @property
    def ready_at(self) -> float | None:
        """perf_counter() when the first kernel table was built (None before)."""
        return self.kernels.shown_at if "kernels" in self.views else None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with TabbedContent(initial="kernels", id="tabs"):
            for n, cls in enumerate(VIEWS, 1):
                with TabPane(f"{n} {cls.title}", id=cls.view_id):
                    view = self.views[cls.view_id] = cls(id=f"view-{cls.view_id}")
                    yield view
        yield Footer()

    def on_mount(self) -> None:
        loop = asyncio.get_running_loop()
        # Quitting never waits for a load: the thread workers run on an executor whose shutdown
        # does not join them (run() then leaves without the interpreter joining them either).
        loop.set_default_executor(_Unjoined(thread_name_prefix="kview-load"))
        # SIGTERM/SIGHUP/SIGINT end the app the ordinary way, so the terminal is restored
        # (alternate screen left, mouse tracking off) before the process exits.
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.exit, None, 128 + sig)
            except (NotImplementedError, RuntimeError, ValueError):  # not the main thread (tests)
                pass
        self.sub_title = " · ".join(Path(p).name for p in self.paths)
        if self.note:
            self.notify(self.note, title="kview", timeout=8)
        for i, p in enumerate(self.paths):
            self.load_trace(i, p)

    # -- loading (thread workers; post_message is thread-safe) -------------------------------
    @work(thread=True, exit_on_error=False)
    def load_trace(self, index: int, path: str) -> None:
        """Post each message of `load` as it comes: a view's message to that view (only the
        first trace's: the views show the first trace), the rest to the app."""
        self._busy(1)
        try:
            for message in load(path, self.use_cache, index):
                if isinstance(message, ViewMessage):
                    if index == 0:
                        self.views[message.view].post_message(message)
                elif index == 0 or isinstance(message, TraceLoaded):
                    self.post_message(message)
        except Exception as e:  # the CLI validated the file; damage found while loading is reported
            from kview.errors import TraceError

            why = e.problem if isinstance(e, TraceError) else f"cannot be read ({type(e).__name__}: {e})"
            self.post_message(LoadFailed(index, f"kview: {path}: {why}".splitlines()[0]))
        finally:
            self._busy(-1)

    @work(thread=True, exit_on_error=False)
    def compare_traces(self, first: TraceLoaded, others: list[TraceLoaded]) -> None:
        self._busy(1)
        try:
            message = compare(first, others)
        except Exception as e:  # a table that cannot be made must not end the session
            message = CompareReady(None, f"cannot compare: {type(e).__name__}: {e}".splitlines()[0])
        finally:
            self._busy(-1)
        self.views["compare"].post_message(message)

    def _busy(self, n: int) -> None:
        with self._working_lock:
            self.working += n

    def view(self, vid: str) -> View:
        return self.views[vid]

    @on(Stage)
    def _stage(self, m: Stage) -> None:
        for v in self.views.values():
            v.show_stage(m.text)

    @on(TraceLoaded)
    def _trace_loaded(self, m: TraceLoaded) -> None:
        self.loaded[m.index] = m
        self._compare_when_all_in()

    @on(LoadFailed)
    def _load_failed(self, m: LoadFailed) -> None:
        if m.index == 0:  # nothing to show: leave with the reason, as the CLI does for bad input
            self.exit(return_code=2, message=m.error)
            return
        self.notify(m.error, title="could not load", severity="error", timeout=30)
        self.failed.add(m.index)
        self._compare_when_all_in()

    def _compare_when_all_in(self) -> None:
        """Compare once every trace is loaded or has failed (those that failed are left out)."""
        if 0 in self.loaded and len(self.loaded) + len(self.failed) == len(self.paths):
            self.views["compare"].show_stage("comparing")
            self.compare_traces(self.loaded[0], [self.loaded[i] for i in sorted(self.loaded) if i])

    @on(OpenKernels)
    def _open_kernels(self, m: OpenKernels) -> None:
        if m.scope is not None:
            self.action_show_view("kernels")
            self.kernels.show_scope(m.scope)
        else:
            self.open_kernels_filtered(m.filter_text)

    # -- actions ----------------------------------------------------------------
    def active_view(self) -> View:
        return self.views[self.query_one(TabbedContent).active]

    def action_show_view(self, vid: str) -> None:
        self.query_one(TabbedContent).active = vid
        self.views[vid].focus_content()

    def open_kernels_filtered(self, text: str) -> None:
        self.action_show_view("kernels")
        self.kernels.show_filtered(text)

    def group_kernels(self, index: int) -> None:
        self.action_show_view("kernels")
        self.kernels.group_by(index)

    def action_copy(self, kind: str) -> None:
        frame, name = self.active_view().table_for_copy()
        if frame.height == 0:
            self.notify("nothing to copy yet", severity="warning")
            return
        text = render.to_markdown(frame) if kind == "md" else render.to_tsv(frame)
        channels, path = copy(self, text, kind)
        where = f" → {path}" if path else ""
        size = "" if "terminal (OSC 52)" in channels else " (too large for the terminal clipboard)"
        self.notify(
            f"copied {frame.height:,} rows as {'Markdown' if kind == 'md' else 'TSV'} via "
            f"{', '.join(channels) or 'nothing'}{size}{where}",
            title="copy",
            timeout=6,
        )

    def action_export(self) -> None:
        self.push_screen(ExportScreen(), self.export_as)

    def export_as(self, fmt: str | None) -> None:
        if not fmt:
            return
        frame, name = self.active_view().table_for_copy()
        text = render.render(frame, fmt)
        out = Path.cwd() / f"{Path(self.paths[0]).stem}_{name}.{render.EXTENSIONS[fmt]}"
        try:
            out.write_text(text)
        except OSError:
            from kview.tui.clipboard import copy_dir

            copy_dir().mkdir(parents=True, exist_ok=True)
            out = copy_dir() / out.name
            out.write_text(text)
        self.notify(f"exported {frame.height:,} rows to {out}", title="export", timeout=6)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.query_one(TabbedContent).active))

    def action_step_back(self) -> None:
        self.active_view().back()

    def check_action(self, action: str, parameters) -> bool | None:
        # typing into the filter must not trigger single-letter keys
        focused = self.focused
        if focused is not None and focused.id == "filter" and action in ("copy", "export", "help", "quit", "show_view"):
            return False
        return True


class _Unjoined(ThreadPoolExecutor):
    """The event loop's executor for thread workers: asyncio.run() ends by shutting it down,
    which must not wait for a load that is still running."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


def run(paths: list[str], use_cache: bool = True, note: str | None = None) -> int:
    """Run the explorer, then leave at once: a load still running in a thread is not joined,
    and the interpreter's teardown (freeing every frame of the trace, seconds on a large one)
    is skipped; the atexit handlers still run and the output is flushed."""
    import atexit

    app = KviewApp(paths, use_cache=use_cache, note=note)
    app.run()  # the terminal is restored when this returns
    code = app.return_code or 0
    if app.working:
        from kview import atomic_write

        atomic_write.remove_pending()  # a cache entry a load was writing
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
