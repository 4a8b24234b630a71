"""The `?` dialog: every key of the view in front, read from the keymap; it scrolls, so it is
whole at 80x24 too."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kview.tui.keymap import HELP_SCREEN_KEYS, bindings, help_rows
from kview.tui.views import shown_by

FILTER_EXAMPLES = (
    "gemm  dir:bprop  layer:layer_3  op:linear  cat:gemm  range:softmax  stream:7  dur>50us  "
    "dur > 1ms  grid>1024  -cat:memset"
)


class HelpScreen(ModalScreen):
    BINDINGS = bindings(HELP_SCREEN_KEYS)

    def __init__(self, view: str, several_traces: bool = False):
        super().__init__()
        self.view, self.several_traces = view, several_traces

    def compose(self) -> ComposeResult:
        t = Text(f"Keys of the {self.view} view   (↑ ↓ PgUp PgDn scroll · esc closes)\n\n", style="bold")

        t.append(f"{' '.join(key for key, _ in shown_by()):>22}  ", style="bold cyan")
        t.append(", ".join(v.title for _, v in shown_by()) + "\n")
        for key, text in help_rows(self.view, self.several_traces):
            t.append(f"{key:>22}  ", style="bold cyan")
            t.append(text + "\n")
        if self.view == "kernels":
            t.append(f"\nFilter: {FILTER_EXAMPLES}", style="dim")
        with VerticalScroll(id="help-scroll"):
            yield Static(t, id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-scroll").focus()
