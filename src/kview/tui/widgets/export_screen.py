"""The `e` dialog: pick the format of the exported file."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.screen import ModalScreen
from textual.widgets import OptionList

from kview.tui.keymap import EXPORT_SCREEN_KEYS, bindings

EXPORT_FORMATS = ("md", "csv", "tsv", "json")


class ExportScreen(ModalScreen[str]):
    BINDINGS = bindings(EXPORT_SCREEN_KEYS)

    def compose(self) -> ComposeResult:
        yield OptionList(*EXPORT_FORMATS, id="export-formats")

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(str(event.option.prompt))
