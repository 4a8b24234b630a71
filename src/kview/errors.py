"""Errors that name the side that failed, each one line on stderr with exit status 2.

The input trace (TraceError), an output file (OutputError) or the command line itself, a
filter included (UsageError). Anything else is kview's own bug: `internal_error_line` says so
and asks for a report, and the traceback is shown only under KVIEW_DEBUG=1. The frame cache is
no side that can fail: its problems are warnings (`warn_once`), and kview goes on without it.
"""

from __future__ import annotations

import os
import sys


def shown(path) -> str:
    """A path as one printable line: control characters (a newline in a file name) escaped."""
    s = str(path)
    return s if s.isprintable() else s.encode("unicode_escape").decode("ascii")


class KviewError(Exception):
    """What failed (`what`) and why (`problem`), printed as `kview: WHAT: PROBLEM`."""

    def __init__(self, what: str, problem: str):
        self.what = what
        self.problem = problem
        super().__init__(f"{what}: {problem}")

    def line(self) -> str:
        return f"kview: {self.what}: {self.problem}"


class TraceError(KviewError):
    """An input trace that cannot be read: names the file and the problem."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        super().__init__(shown(path), problem)


class OutputError(KviewError):
    """An output file that cannot be written (exists, is an input, full disk, no folder)."""

    def __init__(self, path, problem: str):
        self.path = str(path)
        super().__init__(f"output {shown(path)}", problem)


class UsageError(KviewError, ValueError):
    """The command line: an unknown report, a bad pattern, a range the trace does not have."""

    def __init__(self, problem: str, what: str = ""):
        KviewError.__init__(self, what, problem)

    def line(self) -> str:
        return f"kview: {self.what + ': ' if self.what else ''}{self.problem}"


def debugging() -> bool:
    return os.environ.get("KVIEW_DEBUG", "") not in ("", "0")


def internal_error_line(command: str, e: BaseException) -> str:
    msg = str(e).splitlines()[0][:200] if str(e) else ""
    return (
        f"kview {command}: internal error ({type(e).__name__}{': ' + msg if msg else ''}); this is a bug in "
        f"kview, please report it with the command line (KVIEW_DEBUG=1 shows the traceback)"
    )


_warned: set[str] = set()


def warn_once(text: str) -> None:
    """One stderr line per distinct warning per process (`kview: warning: ...`). A UI that
    owns the terminal installs its own sink with `set_warning_sink`."""
    if text in _warned:
        return
    _warned.add(text)
    _sink(text)


def _stderr(text: str) -> None:
    try:
        print(f"kview: warning: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


_sink = _stderr


def set_warning_sink(sink) -> None:
    global _sink
    _sink = sink or _stderr
