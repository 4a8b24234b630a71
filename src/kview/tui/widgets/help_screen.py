"""The `?` dialog: every key of the view in front, read from the keymap."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from kview.tui.keymap import HELP_SCREEN_KEYS, bindings, help_rows

FILTER_EXAMPLES = (
    "gemm  dir:bprop  layer:layer_3  op:linear  cat:gemm  range:softmax  stream:7  dur>50us  grid>1024  -cat:memset"
)


class HelpScreen(ModalScreen):
    BINDINGS = bindings(HELP_SCREEN_KEYS)

    def __init__(self, view: str):
        super().__init__()
        self.view = view

    def compose(self) -> ComposeResult:
        t = Text(f"Keys of the {self.view} view\n\n", style="bold")
        for key, text in help_rows(self.view):
            t.append(f"{key:>18}  ", style="bold cyan")
            t.append(text + "\n")
        t.append(f"\nFilter: {FILTER_EXAMPLES}", style="dim")
        yield Vertical(Static(t, id="help-text"))
