"""Output files of `-o`: never over an existing file without --force, never over an input,
written atomically (all files or none), and every failure named as the output's."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO, cast

from kview import atomic_write
from kview.errors import OutputError


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check(paths: list[Path], inputs: list[str], force: bool) -> None:
    """Refuse before any work is done: a missing folder, an input, an existing file."""
    for p in paths:
        parent = p.parent
        if not parent.exists():
            raise OutputError(p, f"its folder {parent} does not exist")
        if not parent.is_dir():
            raise OutputError(p, f"{parent} is not a folder")
        if any(_same_file(p, Path(i)) for i in inputs):
            raise OutputError(p, "is an input of this command; kview never writes over its input")
        if p.is_dir():
            raise OutputError(p, "is a folder")
        if p.exists() and not force:
            raise OutputError(p, "exists (give --force to overwrite it)")


def write(texts: dict[Path, str], inputs: list[str], force: bool) -> None:
    check(list(texts), inputs, force)
    try:
        atomic_write.write_all({p: t.encode("utf-8") for p, t in texts.items()})
    except OSError as e:
        raise OutputError(e.filename, f"cannot be written ({e.strerror or e}); nothing was written") from None


class _Nothing(Exception):
    """The document came out empty: no file is made."""


class _File:
    """A new file as the writers see it: every byte through os.write, so polars' writers hand
    their chunks here (a short write goes on; a full disk is Python's OSError ENOSPC)."""

    def __init__(self, fd: int) -> None:
        self.fd, self.size = fd, 0

    def write(self, data) -> int:
        atomic_write.write_fully(self.fd, data)
        n = memoryview(data).nbytes
        self.size += n
        return n

    def flush(self) -> None:
        pass


def _stream_into(tmp: Path, writer: Callable[[BinaryIO], None]) -> int:
    """`writer`'s document into the new file `tmp`, synced; its size."""
    fd = atomic_write.open_new(tmp)
    try:
        f = _File(fd)
        writer(cast(BinaryIO, f))
        os.fsync(fd)
        return f.size
    finally:
        os.close(fd)


def write_streamed(path: Path, writer: Callable[[BinaryIO], None], inputs: list[str], force: bool) -> bool:
    """One document written as `writer` makes it, into a temporary beside `path` that replaces
    it at the end (a million-row table never exists as one string). False, and no file, when
    the document is empty."""
    check([path], inputs, force)
    try:
        with atomic_write.replacing(path) as tmp:
            if _stream_into(tmp, writer) == 0:
                raise _Nothing
    except _Nothing:
        return False
    except OSError as e:
        raise OutputError(path, f"cannot be written ({e.strerror or e}); nothing was written") from None
    return True


def write_streamed_all(writers: Mapping[Path, Callable[[BinaryIO], None]], inputs: list[str], force: bool) -> None:
    """Several documents, each written as its writer makes it into a temporary beside its path;
    the temporaries replace their paths only once every one is written (all files or none)."""
    check(list(writers), inputs, force)
    dest = None
    try:
        with ExitStack() as renames:  # each `replacing` renames its temporary as the stack closes
            for dest, writer in writers.items():
                _stream_into(renames.enter_context(atomic_write.replacing(dest)), writer)
    except OSError as e:
        raise OutputError(dest, f"cannot be written ({e.strerror or e}); nothing was written") from None
