"""The Kernels view's filter line: history on up/down, completion of the term being typed, and
the reason a filter was refused on the line above it (not a toast that covers the line)."""

from __future__ import annotations

from bisect import bisect_left

from textual.suggester import Suggester
from textual.widgets import Input

from kview.tui.keymap import FILTER_KEYS, bindings


class TermSuggester(Suggester):
    """Completes the last term of the line (`dir:bprop gem` -> `dir:bprop gemm...`) from
    `words` (field:value pairs and kernel names), case-insensitively, by a sorted search."""

    def __init__(self, words: list[str]):
        super().__init__(use_cache=True, case_sensitive=True)
        pairs = sorted({(w.casefold(), w) for w in words})
        self.keys = [k for k, _ in pairs]
        self.words = [w for _, w in pairs]

    async def get_suggestion(self, value: str) -> str | None:
        start = len(value) - len(value.split(" ")[-1])
        last = value[start:]
        if not last:
            return None
        key = last.casefold()
        i = bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i].startswith(key) and self.keys[i] != key:
            return value[:start] + self.words[i]
        return None


class FilterInput(Input):
    """up/down walk the history of filters, newest first (the list is shared with the view,
    which appends to it); every opening of the line starts again from the newest."""

    BINDINGS = bindings(FILTER_KEYS)

    def __init__(self, history: list[str], **kw):
        super().__init__(**kw)
        self.history, self.pos = history, len(history)

    def open(self, value: str) -> None:
        self.pos = len(self.history)
        self.value = value
        self.cursor_position = len(value)

    def action_history(self, d: int) -> None:
        """One step back (d=-1) or forward in the history; an entry equal to what the line
        already shows is stepped over, so the first `up` always changes the line."""
        while self.history:
            pos = max(0, min(len(self.history), self.pos + d))
            if pos == self.pos:
                return
            self.pos = pos
            value = self.history[pos] if pos < len(self.history) else ""
            if value != self.value or pos in (0, len(self.history)):
                self.value = value
                self.cursor_position = len(value)
                return
