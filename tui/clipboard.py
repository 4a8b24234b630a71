"""Copy text out of a terminal app over SSH: OSC 52 through Textual, pyperclip where a display
exists, and always a file. Returns what was used, since no channel can confirm delivery."""

from __future__ import annotations

import os
import time
from pathlib import Path

OSC52_LIMIT = 100_000  # terminals and tmux drop larger OSC 52 payloads silently


def copy_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "kview" / "copies"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kview", appauthor=False)) / "copies"


def copy(app, text: str, kind: str) -> tuple[list[str], Path | None]:
    """Send `text` everywhere it can go; `kind` is 'md' or 'tsv' (the file's extension)."""
    channels = []
    if len(text) <= OSC52_LIMIT:
        app.copy_to_clipboard(text)  # OSC 52; also sets app.clipboard
        channels.append("terminal (OSC 52)")
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        try:
            import pyperclip

            pyperclip.copy(text)
            channels.append("system clipboard")
        except Exception:  # no xclip/xsel/wl-copy behind the display
            pass
    path = None
    for folder in (copy_dir(), Path.cwd()):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"kview-{time.strftime('%Y%m%d-%H%M%S')}.{kind}"
            path.write_text(text)
            channels.append("file")
            break
        except OSError:
            path = None
    return channels, path
