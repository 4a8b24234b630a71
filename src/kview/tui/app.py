"""`kview TRACE [TRACE ...]`: the Textual explorer over the core.

The first frame is drawn at once; traces load in a thread worker that posts typed messages
stage by stage, so the kernel summary appears while attribution still runs.
"""
from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import Hit, Hits, Provider
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, OptionList, Static, TabbedContent, TabPane

from kview.output import render

from kview.tui.clipboard import copy
from kview.tui.keymap import GLOBAL_KEYS, help_rows
from kview.tui.loading import TraceData, load
from kview.tui.views import GROUPINGS, CompareView, KernelsView, LayersView, NvtxView, OverviewView

VIEWS = [("overview", "1 Overview", OverviewView), ("kernels", "2 Kernels", KernelsView), ("nvtx", "3 NVTX", NvtxView),
         ("layers", "4 Layers", LayersView), ("compare", "5 Compare", CompareView)]


class Progress(Message):
    def __init__(self, index: int, stage: str, text: str, data: TraceData | None):
        super().__init__()
        self.index, self.stage, self.text, self.data = index, stage, text, data


class Failed(Message):
    def __init__(self, index: int, error: str):
        super().__init__()
        self.index, self.error = index, error


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]
    DEFAULT_CSS = "HelpScreen { align: center middle; } HelpScreen > Vertical { width: 80; height: auto; " \
                  "max-height: 90%; border: round cyan; background: $surface; padding: 0 1; }"

    def __init__(self, view: str):
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        t = Text(f"Keys of the {self.view} view\n\n", style="bold")
        for key, text in help_rows(self.view):
            t.append(f"{key:>18}  ", style="bold cyan")
            t.append(text + "\n")
        t.append("\nFilter: gemm  dir:bprop  layer:layer_3  op:linear  cat:gemm  range:softmax  "
                 "stream:7  dur>50us  grid>1024  -cat:memset", style="dim")
        yield Vertical(Static(t, id="help-text"))


class ExportScreen(ModalScreen[str]):
    BINDINGS = [Binding("escape", "dismiss('')", "Cancel")]
    DEFAULT_CSS = "ExportScreen { align: center middle; } ExportScreen > OptionList { width: 40; height: 8; " \
                  "border: round cyan; }"

    def compose(self) -> ComposeResult:
        yield OptionList("md", "csv", "tsv", "json", id="export-formats")

    @on(OptionList.OptionSelected)
    def _chosen(self, event) -> None:
        self.dismiss(str(event.option.prompt))


class KviewCommands(Provider):
    """Views, groupings, copies and exports, and recent filters in the command palette."""

    async def search(self, query: str) -> Hits:
        app: KviewApp = self.app
        matcher = self.matcher(query)
        commands = [(f"View: {label[2:]}", partial(app.action_show_view, vid)) for vid, label, _ in VIEWS]
        commands += [(f"Kernels: group by {g}", partial(app.group_kernels, i)) for i, (g, _) in enumerate(GROUPINGS)]
        commands += [("Copy table as Markdown", partial(app.action_copy, "md")),
                     ("Copy table as TSV", partial(app.action_copy, "tsv"))]
        commands += [(f"Export table as {f}", partial(app.export_as, f)) for f in ("md", "csv", "tsv", "json")]
        kv = app.view("kernels")
        commands += [(f"Filter: {h}", partial(app.open_kernels_filtered, h)) for h in reversed(kv.history[-10:])]
        for text, callback in commands:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback)


class KviewApp(App):
    TITLE = "kview"
    COMMANDS = App.COMMANDS | {KviewCommands}
    BINDINGS = [Binding(k, a, d, show=k in ("question_mark", "q", "y", "slash")) for k, a, d in GLOBAL_KEYS
                if a != "command_palette"]
    CSS = """
    #kernels-status, #layers-status { height: 1; padding: 0 1; }
    #kernels-detail, #nvtx-detail { height: 3; border-top: solid $primary-darken-2; padding: 0 1; }
    #filter { dock: bottom; }
    TabPane { padding: 0; }
    """

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
            for vid, label, cls in VIEWS:
                with TabPane(label, id=vid):
                    yield cls(id=f"view-{vid}")
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
        for vid, _, _ in VIEWS:
            v = self.view(vid)
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
