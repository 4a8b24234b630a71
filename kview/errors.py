"""Errors that name the side that failed, each one line on stderr with exit status 2.

The input trace (TraceError), an output file (OutputError) or the command line itself, a
filter included (UsageError). Anything else is kview's own bug: `internal_error_line` says so
and asks for a report, and the traceback is shown only under KVIEW_DEBUG=1. The frame cache is
no side that can fail: its problems are warnings (kview.warning.warn_once), and kview goes on
without it.
"""

from __future__ import annotations

import os
import sys

try:  # loaded now: once memory has run out, a module may no longer load
    import resource
except ImportError:  # not on this system
    resource = None  # type: ignore[assignment]

from kview.io import memory_budget
from kview.notation import binary_bytes


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


def memory_limit() -> str:
    """The limit memory ran into, when one is set: --max-memory (KVIEW_MAX_MEMORY) or the
    process's address-space limit (ulimit -v, prlimit --as); '' when none is."""
    parts = []
    try:
        if memory_budget._limit is not None or os.environ.get(memory_budget.ENV, "").strip():
            total, why = memory_budget.budget()
            if total is not None:
                parts.append(f"{binary_bytes(total)} from {why}")
    except Exception:  # the budget's own parse errors are said where it is read
        pass
    limit = address_space_limit()
    if limit is not None:
        parts.append(f"{limit / (1 << 30):.1f} GiB of address space (ulimit -v)")
    return "; limit: " + ", ".join(parts) if parts else ""


OUT_OF_MEMORY = "kview: out of memory"  # how the line starts: the supervisor finds it by this


class OutOfMemory(KviewError):
    """Memory ran out (an allocation failed, a reader's threads could not start, the system
    ended a worker): said as memory and its limit, never as the fault of an input."""

    def __init__(self, detail: str = ""):
        super().__init__("out of memory", detail)

    def line(self) -> str:
        detail = f" ({self.problem})" if self.problem else ""
        return f"{OUT_OF_MEMORY}{detail}{memory_limit()}; free memory or raise the limit"

    def say(self) -> None:
        """The line on stderr in one write: print() writes the line end apart, and a library
        thread aborting for the same lack of memory can write between the two."""
        sys.stderr.write(self.line() + "\n")


# What a failed allocation or thread start says inside the Rust readers' errors and panics
# (connectorx, polars, pyo3): memory, not the file.
# (a thread that cannot start under an address-space limit fails with EAGAIN, a library that
# cannot be mapped with "failed to map segment")
_MEMORY_WORDS = (
    "memory allocation",
    "out of memory",
    "cannot allocate memory",
    "wouldblock",
    "resource temporarily unavailable",
    "can't spawn",
    "failed to map segment",
    "os error 11)",
    "os error 12)",
    "errno 12]",
    "terminated abruptly",  # a worker process the system killed
)


def is_out_of_memory(e: BaseException) -> bool:
    """Whether `e` (a MemoryError, a Rust reader's error or panic, a library that could not be
    loaded under an address-space limit) says memory ran out."""
    if isinstance(e, MemoryError):
        return True
    text = f"{type(e).__name__}: {e}".lower()
    if any(w in text for w in _MEMORY_WORDS):
        return True
    if address_space_limit() is None:
        return False
    # Under an address-space limit: a library kview ships with that cannot be loaded (numpy's
    # OpenBLAS failing to start its threads ends its import in a SystemError), or a reader
    # connection to a file that the stdlib already opened that cannot be made (its threads' stacks).
    return isinstance(e, (ImportError, SystemError)) or "timed out waiting for connection" in text


# Under an address-space limit a thread a library starts when it loads can fail to start:
# polars' allocator (jemalloc) then crashed (SIGSEGV, measured at `ulimit -v` 744 MB on `stats
# -r all`) and OpenBLAS (numpy's) gives up its import; a library left waiting for such a thread is
# the likely cause of the one hang seen under a limit (`stats -r all` at 384 MB, once in five runs
# of the suite, nothing said). kview needs neither's threads: jemalloc returns freed pages
# on the allocating thread instead, and kview does no linear algebra.
LIBRARY_THREADS_OFF = {"_RJEM_MALLOC_CONF": "background_thread:false", "OPENBLAS_NUM_THREADS": "1"}


def no_library_threads_under_a_limit() -> None:
    """Under an address-space limit, before polars and numpy load: none of their background
    threads (a setting the user made stays)."""
    if address_space_limit() is not None:
        for name, value in LIBRARY_THREADS_OFF.items():
            os.environ.setdefault(name, value)


def address_space_limit() -> int | None:
    """The process's address-space limit in bytes (ulimit -v, prlimit --as), None when unlimited."""
    if resource is None:
        return None
    try:
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft
