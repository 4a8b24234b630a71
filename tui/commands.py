"""The command palette (ctrl+p): every kview action by name, read from the keymap (so the
palette, the footer and the help screen name the same actions), plus the views, the open
traces, the groupings, the export formats and the recent filters."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from textual.command import CommandList, CommandPalette, DiscoveryHit, Hit, Hits, Provider

from kview.tui.keymap import GLOBAL_KEYS, TABLE_KEYS, TABLE_VIEWS, VIEW_KEYS
from kview.tui.views import VIEWS
from kview.tui.views.kernels import GROUPINGS

if TYPE_CHECKING:
    from kview.tui.app import KviewApp

# table keys that only move the cursor: not worth a palette entry
MOVES = ("cursor", "page", "jump", "column", "select")


def commands(app: KviewApp) -> list[tuple[str, object]]:
    from kview.tui.export import EXPORT_FORMATS

    out: list[tuple[str, object]] = [(f"View: {v.title}", partial(app.action_show_view, v.view_id)) for v in VIEWS]
    if len(app.paths) > 1:
        out += [(f"Trace: show {app.trace_name(i)}", partial(app.switch_trace, i)) for i in range(len(app.paths))]
    out += [
        (k.help, partial(app.run_action, k.action))
        for k in GLOBAL_KEYS
        if k.action and not (k.action.startswith(("pick_trace", "next_trace")) and len(app.paths) < 2)
    ]
    titles = {v.view_id: v.title for v in VIEWS}
    for vid, keys in VIEW_KEYS.items():
        if vid in titles:
            out += [(f"{titles[vid]}: {k.help}", partial(app.run_view_action, vid, k.action)) for k in keys if k.action]
    active = app.active_view().view_id
    if active in TABLE_VIEWS:
        out += [
            (f"{titles[active]} table: {k.help}", partial(app.run_view_action, active, k.action, True))
            for k in TABLE_KEYS
            if k.action and not k.action.startswith(MOVES)
        ]
    out += [(f"Kernels: group by {g}", partial(app.group_kernels, i)) for i, (g, _) in enumerate(GROUPINGS)]
    out += [(f"Export what is shown as {f}", partial(app.export_as, f)) for f in EXPORT_FORMATS]
    out += [(f"Filter: {h}", partial(app.open_kernels_filtered, h)) for h in reversed(app.kernels.history[-10:])]
    return out


class KviewCommands(Provider):
    async def search(self, query: str) -> Hits:
        app = cast("KviewApp", self.app)
        matcher = self.matcher(query)
        for text, callback in commands(app):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback)  # type: ignore[arg-type]

    async def discover(self) -> Hits:
        """Every command, before anything is typed."""
        app = cast("KviewApp", self.app)
        for text, callback in commands(app):
            yield DiscoveryHit(text, callback)  # type: ignore[arg-type]


class SafeCommandPalette(CommandPalette):
    """Textual's command palette, with page keys that do nothing while its list has no lines yet
    (Textual's OptionList looks up the line of option 0 there: `ctrl+p pageup` ended the app)."""

    def _action_command_list(self, action: str) -> None:
        commands = self.query_one(CommandList)
        if action.startswith("page_") and (not commands.option_count or commands.size.height == 0):
            return
        try:
            super()._action_command_list(action)
        except KeyError:  # the list is between two fillings: its lines are not laid out
            pass
