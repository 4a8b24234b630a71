"""What happened to a folder while a command ran: its files' bytes, mtimes and names before
and after, plus every write-side inotify event (a file created, deleted, renamed, opened for
writing, or its attributes changed) so a `-wal` that is created and removed again, or a
trace opened O_RDWR and closed unchanged, is caught too. Works for root, unlike permissions."""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
from pathlib import Path

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
WRITE_EVENTS = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
NAMES = {
    IN_MODIFY: "modified",
    IN_ATTRIB: "attributes changed",
    IN_CLOSE_WRITE: "opened for writing",
    IN_MOVED_FROM: "moved away",
    IN_MOVED_TO: "moved in",
    IN_CREATE: "created",
    IN_DELETE: "deleted",
}


def snapshot(folder: Path) -> dict[str, tuple[str, int]]:
    """name -> (sha256 of the bytes, mtime in ns) for every file in `folder`."""
    out = {}
    for p in sorted(folder.iterdir()):
        if p.is_file():
            out[p.name] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        else:
            out[p.name] = ("<folder>", p.stat().st_mtime_ns)
    return out


class Watch:
    """inotify on one folder; `writes()` lists the write-side events seen since it started."""

    def __init__(self, folder: Path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if self.libc.inotify_add_watch(self.fd, os.fsencode(folder), WRITE_EVENTS) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch")

    def writes(self) -> list[str]:
        buf = b""
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            buf += chunk
        out, i = [], 0
        while i + 16 <= len(buf):
            _wd, mask, _cookie, size = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16 : i + 16 + size].rstrip(b"\0").decode(errors="replace")
            i += 16 + size
            out += [f"{name}: {text}" for bit, text in NAMES.items() if mask & bit]
        return out

    def close(self) -> None:
        os.close(self.fd)


class Untouched:
    """`with Untouched(folder) as u: ...` then `u.check()`: nothing in `folder` changed."""

    def __init__(self, folder: Path):
        self.folder = folder

    def __enter__(self):
        self.before = snapshot(self.folder)
        try:
            self.watch = Watch(self.folder)
        except OSError:
            self.watch = None
        return self

    def __exit__(self, *exc):
        self.after = snapshot(self.folder)
        self.events = self.watch.writes() if self.watch else []
        if self.watch:
            self.watch.close()
        return False

    def check(self) -> None:
        assert self.after == self.before, f"folder changed: {self.before} -> {self.after}"
        assert self.events == [], f"write-side events in the trace's folder: {self.events}"
