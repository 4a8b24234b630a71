"""`kview TRACE [TRACE ...]`: the Textual explorer over the core.

The first frame is drawn at once; traces load in a thread worker that posts typed messages
stage by stage, so the kernel summary appears while attribution still runs.
"""
from __future__ import annotations

import time
from pathlib import Path

from textual import on, work
from textual.app import App, ComposeResult
from textual.message import Message
from textual.widgets import Footer, Header, TabbedContent, TabPane

from kview.output import render
from kview.tui.clipboard import copy
from kview.tui.commands import KviewCommands
from kview.tui.keymap import GLOBAL_KEYS, bindings
from kview.tui.loading import TraceData, load
from kview.tui.views import VIEWS
from kview.tui.widgets.export_screen import ExportScreen
from kview.tui.widgets.help_screen import HelpScreen


class Progress(Message):
    def __init__(self, index: int, stage: str, text: str, data: TraceData | None):
        super().__init__()
        self.index, self.stage, self.text, self.data = index, stage, text, data


class Failed(Message):
    def __init__(self, index: int, error: str):
        super().__init__()
        self.index, self.error = index, error


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
        self.loaded: dict[int, TraceData] = {}
        self.t0 = time.perf_counter()
        self.ready_at: float | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with TabbedContent(initial="kernels", id="tabs"):
            for n, cls in enumerate(VIEWS, 1):
                with TabPane(f"{n} {cls.title}", id=cls.view_id):
                    yield cls(id=f"view-{cls.view_id}")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = " · ".join(Path(p).name for p in self.paths)
        if self.note:
            self.notify(self.note, title="kview", timeout=8)
        for i, p in enumerate(self.paths):
            self.load_trace(i, p)

    @work(thread=True, exit_on_error=False)
    def load_trace(self, index: int, path: str) -> None:
        def progress(stage, text, data):
            self.post_message(Progress(index, str(stage), text, data))

        try:
            load(path, self.use_cache, progress)
        except Exception as e:  # the CLI validated the file; damage found while loading is reported
            from kview.errors import TraceError

            why = e.problem if isinstance(e, TraceError) else f"cannot be read ({type(e).__name__}: {e})"
            self.post_message(Failed(index, f"kview: {path}: {why}".splitlines()[0]))

    def view(self, vid: str):
        return self.query_one(f"#view-{vid}")

    @on(Progress)
    def _progress(self, m: Progress) -> None:
        if m.index != 0:
            if m.text == "done":
                self.loaded[m.index] = m.data
                if len(self.loaded) == len(self.paths):
                    self.view("compare").set_data(self.loaded[0], [self.loaded[i] for i in sorted(self.loaded) if i])
            return
        for cls in VIEWS:
            v = self.view(cls.view_id)
            if v.data is None:
                v.set_stage(m.text)
        d = m.data
        if m.stage == "2" and d is not None:  # kernel summary ready: show the Kernels view now
            self.view("kernels").set_data(d)
            self.ready_at = time.perf_counter()
        elif m.stage == "3" and d is not None:  # attribution ready
            kv = self.view("kernels")
            kv.data = d
            kv.refresh_table()
        elif m.stage == "4":
            self.view("overview").set_data(d)
        elif m.stage == "5":
            self.view("nvtx").set_data(d)
        elif m.stage == "6":
            self.view("layers").set_data(d)
            self.loaded[0] = d
            if len(self.loaded) == len(self.paths):
                self.view("compare").set_data(d, [self.loaded[i] for i in sorted(self.loaded) if i])

    @on(Failed)
    def _failed(self, m: Failed) -> None:
        if m.index == 0:  # nothing to show: leave with the reason, as the CLI does for bad input
            self.exit(return_code=2, message=m.error)
        else:
            self.notify(m.error, title="could not load", severity="error", timeout=30)

    # -- actions ----------------------------------------------------------------
    def active_view(self):
        return self.view(self.query_one(TabbedContent).active)

    def action_show_view(self, vid: str) -> None:
        self.query_one(TabbedContent).active = vid
        v = self.view(vid)
        for w in (v.query("FrameTable") or v.query("Tree")):
            w.focus()
            break

    def open_kernels_filtered(self, text: str) -> None:
        self.action_show_view("kernels")
        kv = self.view("kernels")
        if kv.data is not None and kv.set_filter(text):
            kv.mode = "rows" if kv.data.table is not None else kv.mode
            kv.refresh_table()

    def group_kernels(self, index: int) -> None:
        self.action_show_view("kernels")
        kv = self.view("kernels")
        if kv.data is not None:
            kv.grouping = index - 1
            kv.action_cycle_grouping()

    def action_copy(self, kind: str) -> None:
        frame, name = self.active_view().table_for_copy()
        if frame.height == 0:
            self.notify("nothing to copy yet", severity="warning")
            return
        text = render.to_markdown(frame) if kind == "md" else render.to_tsv(frame)
        channels, path = copy(self, text, kind)
        where = f" → {path}" if path else ""
        size = "" if "terminal (OSC 52)" in channels else " (too large for the terminal clipboard)"
        self.notify(f"copied {frame.height:,} rows as {'Markdown' if kind == 'md' else 'TSV'} via "
                    f"{', '.join(channels) or 'nothing'}{size}{where}", title="copy", timeout=6)

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

    def action_back(self) -> None:
        self.active_view().back()

    def check_action(self, action: str, parameters) -> bool | None:
        # typing into the filter must not trigger single-letter keys
        focused = self.focused
        if focused is not None and focused.id == "filter" and action in ("copy", "export", "help", "quit", "show_view"):
            return False
        return True


def run(paths: list[str], use_cache: bool = True, note: str | None = None) -> int:
    app = KviewApp(paths, use_cache=use_cache, note=note)
    app.run()
    return app.return_code or 0
