"""The explorer's last line of defence: every line any widget draws passes this filter, so a
control character that reached a widget (a kernel name in a caption, a file name in a
notification) is drawn as `\\x1b` (kview.output.visible), never sent to the terminal.

Widgets show names through `visible` already, so their layout counts the visible form; a line
the filter has to change keeps its width (cut at its end)."""

from __future__ import annotations

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from kview.output.visible import visible


class VisibleFilter(LineFilter):
    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(visible(s.text) is s.text for s in segments if not s.control):
            return segments
        width = Segment.get_line_length(segments)
        shown = [s if s.control else Segment(visible(s.text), s.style, s.control) for s in segments]
        return Segment.adjust_line_length(shown, width)
