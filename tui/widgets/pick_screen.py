"""A dialog that asks for one of a few choices, under a title (which trace, which format)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static

from kview.tui.keymap import PICK_SCREEN_KEYS, bindings


class PickScreen(ModalScreen[int | None]):
    """Returns the index of the option chosen (None on escape)."""

    BINDINGS = bindings(PICK_SCREEN_KEYS)

    def __init__(self, title: str, options: list[str], initial: int | None = None):
        super().__init__()
        self.title_text, self.options, self.initial = title, options, initial
        self.chosen = False

    def compose(self) -> ComposeResult:
        with Vertical(id="pick"):
            yield Static(self.title_text, id="pick-title")
            yield OptionList(*self.options, id="pick-options")
            yield Static("1-9 or enter: choose · esc: cancel", id="pick-hint")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self.initial is not None:
            options.highlighted = self.initial
        options.focus()

    def _finish(self, index: int | None) -> None:
        """Dismiss once: keys that arrive in one read (`e enter enter`) reach this screen after
        its first answer, and a second dismiss would pop the screen beneath it."""
        if self.chosen or self.app.screen is not self:
            return
        self.chosen = True
        self.dismiss(index)

    @on(OptionList.OptionSelected)
    def _chosen(self, event: OptionList.OptionSelected) -> None:
        self._finish(event.option_index)

    def action_cancel(self) -> None:  # escape: nothing chosen
        self._finish(None)

    def action_choose(self, index: int) -> None:  # a digit: that option, if there is one
        if index < len(self.options):
            self._finish(index)
