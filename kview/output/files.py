"""Output files of `-o`: never over an existing file without --force, never over any file the
command reads (by device and inode, so through links too), never in place of a node that is not
a regular file (a device or a FIFO is written into), written atomically (all files or none),
and every failure named as the output's."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import BinaryIO, cast

from kview import atomic_write
from kview.errors import OutputError


def _through_proc(p: Path) -> bool:
    """Whether `p` is, or links to, a descriptor of this process (`/dev/stdout`, `/dev/fd/3`,
    `/proc/self/fd/1`): writing to it writes into what the descriptor is open on."""
    s = os.path.abspath(p)
    for _ in range(40):  # the kernel's own limit on a chain of links
        if s.startswith(("/proc/", "/dev/fd/")):
            return True
        try:
            link = os.readlink(s)
        except OSError:
            return False
        s = os.path.normpath(os.path.join(os.path.dirname(s), link))
    return False


def _kind(mode: int) -> str:
    return next(
        (
            name
            for test, name in (
                (stat.S_ISDIR, "a folder"),
                (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"),
                (stat.S_ISCHR, "a character device"),
                (stat.S_ISFIFO, "a FIFO"),
            )
            if test(mode)
        ),
        "not a regular file",
    )


def _into(p: Path) -> bool:
    """Whether `-o p` writes into an existing node rather than a new file in its place: a
    character device or a FIFO (`/dev/null`, a terminal, a pipe), or a descriptor of this
    process (`/dev/stdout` redirected to a file). Such a node is never replaced."""
    try:
        mode = os.stat(p).st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or (stat.S_ISREG(mode) and _through_proc(p))


def _target(p: Path) -> Path:
    """Where a new file for `-o p` goes: through a link to a regular file, that file (the link
    stays a link)."""
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def input_ids(inputs: list[str]) -> set[tuple[int, int]]:
    """(device, inode) of every input that exists: the same file under another name, through a
    symbolic or a hard link, is still the input."""
    out = set()
    for i in inputs:
        try:
            st = os.stat(i)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return out


def check(paths: list[Path], inputs: list[str], force: bool) -> None:
    """Refuse before any work is done: an input of the command (compared by device and inode),
    a node that is not a regular file (but a device or a FIFO, written into), a missing folder,
    an existing file without --force."""
    ids = input_ids(inputs)
    for p in paths:
        try:
            _check_one(p, ids, force)
        except OSError as e:  # a name too long, a folder on the way that cannot be entered
            raise OutputError(p, f"cannot be written ({e.strerror or e}); nothing was written") from None


def _check_one(p: Path, ids: set[tuple[int, int]], force: bool) -> None:
    """One output path, as `check` says (an OSError on the way is the caller's to name)."""
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):  # a folder on the way that is a file: said below
        st = None
    if st is not None and (st.st_dev, st.st_ino) in ids:
        raise OutputError(p, "is an input of this command; kview never writes over its input")
    if _into(p):
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(p, f"is {_kind(st.st_mode)}, not a file kview can write")
    target = _target(p)
    parent = target.parent
    if not parent.exists():
        raise OutputError(p, f"its folder {parent} does not exist")
    if not parent.is_dir():
        raise OutputError(p, f"{parent} is not a folder")
    if (st is not None or p.is_symlink()) and not force:
        raise OutputError(p, "exists (give --force to overwrite it)")


def _open_into(p: Path) -> int:
    """A descriptor writing into the node `p` (appending: a file a shell opened for `>>` keeps
    what it holds)."""
    return os.open(p, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))


def _write_text(text: str, out: BinaryIO) -> None:
    out.write(text.encode("utf-8"))


def write(texts: dict[Path, str], inputs: list[str], force: bool) -> None:
    check(list(texts), inputs, force)
    into = {p: t for p, t in texts.items() if _into(p)}
    try:
        for p, t in into.items():
            _stream_into_node(p, partial(_write_text, t))
        atomic_write.write_all({_target(p): t.encode("utf-8") for p, t in texts.items() if p not in into})
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


def _stream_into_node(p: Path, writer: Callable[[BinaryIO], None]) -> int:
    """`writer`'s document into the existing node `p` (a device, a FIFO, a redirected stdout)."""
    try:
        fd = _open_into(p)
    except OSError as e:
        e.filename = str(p)
        raise
    try:
        f = _File(fd)
        writer(cast(BinaryIO, f))
        return f.size
    finally:
        os.close(fd)


def write_streamed(path: Path, writer: Callable[[BinaryIO], None], inputs: list[str], force: bool) -> bool:
    """One document written as `writer` makes it, into a temporary beside `path` that replaces
    it at the end (a million-row table never exists as one string). False, and no file, when
    the document is empty. A device or FIFO is written into as the document is made."""
    check([path], inputs, force)
    if _into(path):
        try:
            return _stream_into_node(path, writer) > 0
        except OSError as e:
            raise OutputError(path, f"cannot be written ({e.strerror or e})") from None
    try:
        with atomic_write.replacing(_target(path)) as tmp:
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
                if _into(dest):
                    _stream_into_node(dest, writer)
                else:
                    _stream_into(renames.enter_context(atomic_write.replacing(_target(dest))), writer)
    except OSError as e:
        raise OutputError(dest, f"cannot be written ({e.strerror or e}); nothing was written") from None
