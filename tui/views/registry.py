"""The views the explorer shows, in tab order: the app builds its tabs, the keys that show them,
the help screen's list and the command palette from here, and knows no view by name.

A view is one module under tui/views/ whose View subclass says its id, title and key (and its
document, what it shows of a trace), plus one `register` call (views/__init__.py registers the
built-in ones in tab order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kview.tui.keymap import VIEW_KEYS

if TYPE_CHECKING:
    from kview.tui.views.base import View

_REGISTERED: list[type[View]] = []


def register(view: type[View]) -> type[View]:
    """Add `view` after those registered (its tab, its key, its palette entry); again: moved last.
    Keys it declares itself (`keys`) join the keymap's, so the help screen and the palette list them."""
    if not view.view_id or not view.title:
        raise ValueError(f"{view.__name__}: a view needs a view_id and a title")
    unregister(view.view_id)
    _REGISTERED.append(view)
    if view.keys:
        VIEW_KEYS[view.view_id] = list(view.keys)
    return view


def unregister(view_id: str) -> None:
    for v in _REGISTERED:
        if v.view_id == view_id and v.keys:
            VIEW_KEYS.pop(view_id, None)
    _REGISTERED[:] = [v for v in _REGISTERED if v.view_id != view_id]


def registered() -> tuple[type[View], ...]:
    """The views in tab order."""
    return tuple(_REGISTERED)


def shown_by() -> list[tuple[str, type[View]]]:
    """(key, view) in tab order: the key that shows each view (the tab says it too): the n-th
    by n, unless it names its own key."""
    return [(cls.key or str(n), cls) for n, cls in enumerate(_REGISTERED, 1)]
