"""stdout while a command runs: a write that fails (a closed descriptor, a full disk, a pipe
whose reader left) is remembered, so the command says it in one line as stdout's failure, not
as kview's bug, and the interpreter's last flush stays quiet."""

from __future__ import annotations

import errno
import os


class _Binary:
    def __init__(self, guard: StdoutGuard, raw) -> None:
        self.guard, self.raw = guard, raw

    def write(self, data) -> int:
        return self.guard.call(lambda: self.raw.write(data))

    def flush(self) -> None:
        self.guard.call(self.raw.flush)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


class StdoutGuard:
    """Stands for sys.stdout (`stream`; None when the process started with descriptor 1 closed)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.failed: OSError | None = None

    def call(self, op):
        if self.stream is None:
            self.failed = OSError(errno.EBADF, "stdout is closed")
            raise self.failed
        try:
            return op()
        except OSError as e:
            self.failed = e
            raise

    def write(self, text: str) -> int:
        return self.call(lambda: self.stream.write(text))

    def flush(self) -> None:
        if self.stream is not None:
            self.call(self.stream.flush)

    def isatty(self) -> bool:
        return self.stream is not None and self.stream.isatty()

    @property
    def buffer(self):
        """The stream's bytes, guarded; none where the stream is text only (a StringIO that a caller
        put in place of stdout): writers then take the text path, as they do without the guard."""
        if self.stream is None:
            return _Binary(self, None)
        raw = getattr(self.stream, "buffer", None)
        if raw is None:
            raise AttributeError("buffer")
        return _Binary(self, raw)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)

    def line(self) -> str:
        """The failure as the command's one line."""
        e = self.failed
        why = "it is closed" if e is not None and e.errno == errno.EBADF else (e.strerror if e else "") or str(e)
        return f"kview: stdout cannot be written ({why}); the output is incomplete"

    def silence(self) -> None:
        """After a failure: descriptor 1 points at /dev/null, so what Python still holds for it is
        flushed there at exit instead of failing again."""
        try:
            fd = os.open(os.devnull, os.O_WRONLY)
            os.dup2(fd, 1)
            os.close(fd)
        except OSError:
            pass
