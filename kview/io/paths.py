"""The file a name on the command line names, whatever characters it starts with."""

from __future__ import annotations

import os
from pathlib import Path


def named(path: str | os.PathLike) -> Path:
    """`path` as the file it names: as it is when something by that name exists (`~x.sqlite` in
    the working folder is that file, not user x's home), else with a leading `~` or `~user`
    expanded as a shell would (a quoted `"~/run.sqlite"`), when that user has a home."""
    p = Path(path)
    if not str(p).startswith("~") or os.path.lexists(p):
        return p
    try:
        return p.expanduser()
    except RuntimeError:  # no such user: the name stays the name (and is no such file)
        return p
