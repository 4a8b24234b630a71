"""Files that appear whole or not at all: written to a temporary beside the destination, then
renamed over it (atomic within one file system). A failed write (a full disk, a vanished
folder) removes its temporary, and `remove_pending` clears the ones in flight when a signal
ends the process, so no `.tmp` is ever left behind."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

_pending: set[str] = set()


def temp_beside(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.kview-{os.getpid()}.tmp")


@contextmanager
def replacing(dest: Path):
    """Yields a temporary path beside `dest`; when the block succeeds it replaces `dest`, and
    whatever happens it no longer exists afterwards."""
    tmp = temp_beside(dest)
    _pending.add(str(tmp))
    try:
        yield tmp
        os.replace(tmp, dest)
    finally:
        _pending.discard(str(tmp))
        try:
            os.unlink(tmp)
        except OSError:
            pass


def open_new(path: Path) -> int:
    """A descriptor of the new file `path`, open for writing."""
    try:  # a temporary of a killed run with a recycled pid; O_EXCL then never follows a link
        os.unlink(path)
    except OSError:
        pass
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)


def write_fully(fd: int, data) -> None:
    """All of `data` (bytes-like) to `fd`: a short write goes on; a full disk raises OSError (ENOSPC)."""
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def write_bytes(path: Path, data: bytes) -> None:
    """Write all of `data` to a new file `path` (a short write, e.g. ENOSPC, raises OSError)."""
    fd = open_new(path)
    try:
        write_fully(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(files: dict[Path, bytes]) -> None:
    """Write every file, or none: all temporaries first, then the renames. An OSError names
    the destination it failed on (`e.filename`)."""
    temps: list[tuple[Path, Path]] = []
    dest = None
    try:
        for dest, data in files.items():
            tmp = temp_beside(dest)
            _pending.add(str(tmp))
            temps.append((tmp, dest))
            write_bytes(tmp, data)
        for tmp, dest in temps:
            os.replace(tmp, dest)
    except OSError as e:
        e.filename = str(dest)
        raise
    finally:
        for tmp, _ in temps:
            _pending.discard(str(tmp))
            try:
                os.unlink(tmp)
            except OSError:
                pass


def remove_pending() -> None:
    """Remove the temporaries being written right now (called from a signal handler)."""
    for p in list(_pending):
        try:
            os.unlink(p)
        except OSError:
            pass
