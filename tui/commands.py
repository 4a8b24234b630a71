"""The command palette (ctrl+p): every kview action by name, read from the keymap (so the
palette, the footer and the help screen name the same actions), plus the views, the open
traces, the groupings, the export formats and the recent filters."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, Protocol, cast

from textual.command import CommandList, CommandPalette, DiscoveryHit, Hit, Hits, Provider

from kview.tui.export import EXPORT_FORMATS
from kview.tui.keymap import GLOBAL_KEYS, TABLE_KEYS, TABLE_VIEWS, VIEW_KEYS
from kview.tui.views import registered
from kview.tui.views.base import View


class Host(Protocol):
    """What the palette runs on the app (the app imports this module, not the other way)."""

    paths: list[str]
    views: dict[str, View]

    def action_show_view(self, vid: str) -> None: ...
    def trace_name(self, index: int) -> str: ...
    def switch_trace(self, index: int) -> None: ...
    def run_action(self, action: str, default_namespace: Any = None) -> Any: ...
    def run_view_action(self, vid: str, action: str, table: bool = False) -> Any: ...
    def active_view(self) -> View: ...
    def show_view_then(self, vid: str, then: Callable[[], object]) -> None: ...
    def export_as(self, fmt: str | None) -> None: ...


# table keys that only move the cursor: not worth a palette entry
MOVES = ("cursor", "page", "jump", "column", "select")


def commands(app: Host) -> list[tuple[str, object]]:
    views = registered()
    out: list[tuple[str, object]] = [(f"View: {v.title}", partial(app.action_show_view, v.view_id)) for v in views]
    if len(app.paths) > 1:
        out += [(f"Trace: show {app.trace_name(i)}", partial(app.switch_trace, i)) for i in range(len(app.paths))]
    out += [
        (k.help, partial(app.run_action, k.action))
        for k in GLOBAL_KEYS
        if k.action and not (k.action.startswith(("pick_trace", "next_trace")) and len(app.paths) < 2)
    ]
    titles = {v.view_id: v.title for v in views}
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
    for vid, view in app.views.items():  # a view's own entries (Kernels: its groupings, recent filters)
        out += [(text, partial(app.show_view_then, vid, then)) for text, then in view.palette()]
    out += [(f"Export what is shown as {f}", partial(app.export_as, f)) for f in EXPORT_FORMATS]
    return out


class KviewCommands(Provider):
    async def search(self, query: str) -> Hits:
        app = cast(Host, self.app)
        matcher = self.matcher(query)
        for text, callback in commands(app):
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(text), callback)  # type: ignore[arg-type]

    async def discover(self) -> Hits:
        """Every command, before anything is typed."""
        app = cast(Host, self.app)
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
