"""The footer: the keys of the widget in focus, as Textual's footer shows them."""

from __future__ import annotations

from textual.widgets import Footer


class KeysFooter(Footer):
    """Textual's footer builds its key widgets again (every one unmounted, mounted and styled)
    each time the screen's bindings may have changed: twice on a view switch, and after keys
    that change none. This one does so only when the keys it shows differ (the same widgets
    would come out), a sixth of the CPU of a view switch."""

    _shown: tuple | None = None  # the bindings the key widgets were last built from

    def _keys_shown(self) -> tuple:
        return tuple(
            (b.key, b.key_display, b.description, b.action, b.show, b.group, b.tooltip, enabled, tooltip)
            for _node, b, enabled, tooltip in self.screen.active_bindings.values()
        )

    async def recompose(self) -> None:
        shown = self._keys_shown() if self._bindings_ready else None
        if shown is not None and shown == self._shown:
            return
        self._shown = shown
        await super().recompose()
