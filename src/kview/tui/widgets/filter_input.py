"""The Kernels view's filter line."""

from __future__ import annotations

from textual.widgets import Input

from kview.tui.keymap import FILTER_KEYS, bindings


class FilterInput(Input):
    """The filter line: up/down walk the history of filters (the list is shared with the view,
    which appends to it)."""

    BINDINGS = bindings(FILTER_KEYS)

    def __init__(self, history: list[str], **kw):
        super().__init__(**kw)
        self.history, self.pos = history, len(history)

    def action_history(self, d: int) -> None:
        if self.history:
            self.pos = max(0, min(len(self.history), self.pos + d))
            self.value = self.history[self.pos] if self.pos < len(self.history) else ""
            self.cursor_position = len(self.value)
