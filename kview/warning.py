"""Warnings: one stderr line per distinct warning per process (`kview: warning: ...`), for what
is no side that can fail (the frame cache, a memory budget that cannot be read): kview says it
and goes on."""

from __future__ import annotations

import sys

_warned: set[str] = set()


def warn_once(text: str) -> None:
    """One stderr line per distinct warning per process (`kview: warning: ...`)."""
    if text in _warned:
        return
    _warned.add(text)
    _sink(text)


def _sink(text: str) -> None:
    try:
        print(f"kview: warning: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
