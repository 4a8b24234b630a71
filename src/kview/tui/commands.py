"""The command palette (ctrl+p): views, groupings, copies and exports, and recent filters."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import Hit, Hits, Provider

from kview.tui.views import VIEWS
from kview.tui.views.kernels import GROUPINGS
from kview.tui.widgets.export_screen import EXPORT_FORMATS

if TYPE_CHECKING:
    from kview.tui.app import KviewApp


class KviewCommands(Provider):
    async def search(self, query: str) -> Hits:
        app = cast("KviewApp", self.app)
        matcher = self.matcher(query)
        commands = [(f"View: {v.title}", partial(app.action_show_view, v.view_id)) for v in VIEWS]
        commands += [(f"Kernels: group by {g}", partial(app.group_kernels, i)) for i, (g, _) in enumerate(GROUPINGS)]
        commands += [
            ("Copy table as Markdown", partial(app.action_copy, "md")),
            ("Copy table as TSV", partial(app.action_copy, "tsv")),
        ]
        commands += [(f"Export table as {f}", partial(app.export_as, f)) for f in EXPORT_FORMATS]
        commands += [
            (f"Filter: {h}", partial(app.open_kernels_filtered, h)) for h in reversed(app.kernels.history[-10:])
        ]
        for text, callback in commands:
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback)
