"""A command runs in a child of the `kview` process, which relays the child's stderr and reads
how it ended. What Python cannot catch is said here in one line: a Rust library that aborts
when an allocation fails (`memory allocation of N bytes failed`, SIGABRT), a C library that
exits on it (OpenBLAS, glibc's loader starting a thread), the system's out-of-memory killer
(SIGKILL). The text Rust prints for a
panic or an abort never reaches the user's terminal; kview's own lines pass as they are.

The child is forked before polars or any thread exists, so it costs a few milliseconds and no
memory of its own (copy on write)."""

from __future__ import annotations

import os
import re
import select
import signal
import sys
import time

from kview.errors import OUT_OF_MEMORY, OutOfMemory, address_space_limit, internal_error_line
from kview.output.visible import visible_lines

ENV = "KVIEW_UNSUPERVISED"  # set: the command runs in this process (and in the child itself)
FORWARDED = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))

# lines Rust (and C libraries beside it) print when they panic or abort
_STARTS = re.compile(
    r"thread '.*' (\(\d+\) )?panicked at |stack backtrace:|fatal runtime error|note: .*RUST_BACKTRACE|Fatal Python error"
)
_MEMORY = re.compile(
    r"memory allocation of \d+ bytes failed|OpenBLAS error: Memory allocation|skipping backtrace printing|"
    r"OpenBLAS blas_thread_init: pthread_create failed|"
    r"Cannot allocate memory|failed to map segment|"
    r"<jemalloc>: .*failed|"  # polars' allocator: a thread or a mapping it could not get
    # glibc's loader when a new thread gets no memory for its thread-local data (it exits 127)
    r"cannot allocate memory for thread-local data"
)


class _Relay:
    """The child's stderr, line by line, to ours. kview's own lines pass at once; Rust's panic
    and abort text is left out (from its first line up to the next line of kview's own), what it
    said about memory remembered; any other text (a Python warning, a thread's traceback) is
    held until the end, and said only when the command did not end for memory."""

    HELD_LINES = 2000

    def __init__(self) -> None:
        self.held = b""
        self.others: list[str] = []
        self.hiding = False
        self.memory = False
        self.rust = False
        self.said_memory = False  # the child said it itself, in kview's line

    def feed(self, data: bytes) -> None:
        lines = (self.held + data).split(b"\n")
        self.held = lines.pop()
        for line in lines:
            self._line(line)

    def end(self) -> None:
        if self.held:
            self._line(self.held)
            self.held = b""

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        # running out of memory can cut Python's own report short (say "Exception ignored in
        # sys.unraisablehook: ", no line end), so kview's line follows it on the same line
        self._text(text[max(text.find(OUT_OF_MEMORY), 0) :])

    def _text(self, text: str) -> None:
        if text.startswith("kview"):  # kview's own line: said at once
            # a library's abort text written by another thread before the line's end: its own line
            cut = min((m.start() for m in (_MEMORY.search(text), _STARTS.search(text)) if m), default=0)
            if cut:
                self._text(text[:cut])
                self._text(text[cut:])
                return
            self.hiding = False
            self.said_memory = self.said_memory or text.startswith(OUT_OF_MEMORY)
            _say(text)
        elif _MEMORY.search(text):
            self.memory = self.hiding = self.rust = True
        elif _STARTS.match(text):
            self.hiding = self.rust = True
        elif not self.hiding and len(self.others) < self.HELD_LINES:
            self.others.append(text)

    def say_others(self) -> None:
        """What else the command wrote (not when memory ran out: then it is the running out's noise)."""
        while self.others and not self.others[-1].strip():
            self.others.pop()
        for text in self.others:
            _say(text)


def _say(text: str) -> None:
    try:
        os.write(2, (visible_lines(text) + "\n").encode())
    except OSError:
        pass


def _memory_line(what: str) -> str:
    return OutOfMemory(what).line()


class _Stuck:
    """Whether the child is stuck at its address-space limit. CPython (3.11 to 3.14) never gets
    out when, while an exception unwinds to a handler, it cannot get memory for one int: its
    eval loop retries forever, each round a failed mmap (seen under `ulimit -v` 256 MB, `kview
    kernels`: 2 runs in 150 spun at 100% CPU until killed, nothing said). Stuck: for STUCK_S
    seconds its address space at the limit (no new mapping fits: every allocation beyond what
    it holds fails) while it keeps a core busy. A program that can still work there ends soon,
    by finishing or by its own out-of-memory error; one that waits uses no CPU."""

    STUCK_S = 20.0
    SLACK = 2 << 20  # within this of the limit: no Python arena (1 MiB) can be mapped
    BUSY = 0.05  # of a core, at least, over those seconds (a spinning child gets little on a loaded machine)
    TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __init__(self, pid: int, limit: int):
        self.pid, self.limit = pid, limit
        self.since: tuple[float, int] | None = None  # (when it was first seen at the limit, its CPU ticks then)

    def check(self) -> bool:
        got = self._sample()
        if got is None or got[0] < self.limit - self.SLACK:
            self.since = None
            return False
        now = time.monotonic()
        if self.since is None:
            self.since = (now, got[1])
            return False
        seconds, cpu = now - self.since[0], (got[1] - self.since[1]) / self.TICKS
        return seconds >= self.STUCK_S and cpu >= self.BUSY * seconds

    def _sample(self) -> tuple[int, int] | None:
        """(address space in bytes, user + kernel CPU ticks) of the child (proc(5): fields 23, 14, 15)."""
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()  # after the name: field 3 on
            return int(fields[20]), int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            return None


def run_supervised(command: str) -> int | None:
    """Fork: in the child None (go on and run the command), in the parent the child's exit
    status once it ended, with one line of its own where the child could not say why."""
    if os.environ.get(ENV) or not hasattr(os, "fork"):
        return None
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:  # no memory even for that: the command runs here
        return None
    if pid == 0:
        os.environ[ENV] = "1"
        os.close(r)
        os.dup2(w, 2)
        os.close(w)
        return None
    os.close(w)

    def forward(signum, _frame) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in FORWARDED:
        signal.signal(s, forward)
    relay = _Relay()
    limit = address_space_limit()
    watch = _Stuck(pid, limit) if limit is not None and os.path.exists(f"/proc/{pid}/stat") else None
    stuck = False
    while True:
        if watch is not None and not select.select([r], [], [], 1.0)[0]:
            if watch.check():
                stuck = True
                os.kill(pid, signal.SIGKILL)
                break  # not waiting for the end of its output: a process it started may hold it
            continue
        try:
            data = os.read(r, 65536)
        except InterruptedError:
            continue
        if not data:
            break
        relay.feed(data)
    relay.end()
    os.close(r)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if stuck:
        if not relay.said_memory:
            print(_memory_line(""), file=sys.stderr)
        return 2
    if os.WIFEXITED(status):
        code = os.WEXITSTATUS(status)
        if relay.memory and code not in (0, 2):  # a C library gave up on an allocation and exited
            print(_memory_line(""), file=sys.stderr)
            return 2
        if not relay.said_memory:
            relay.say_others()
        return code
    sig = os.WTERMSIG(status)
    if sig in FORWARDED:  # ended by the signal sent to kview: so does kview
        relay.say_others()
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        return 128 + sig
    if relay.said_memory:  # its line said memory ran out; what it hit after that (a crash
        return 2  # of a library left without memory while exiting) is the same cause
    if sig == signal.SIGKILL:
        print(_memory_line("the system ended kview, most likely for memory (SIGKILL)"), file=sys.stderr)
        return 2
    if relay.memory or (sig == signal.SIGABRT and address_space_limit() is not None):
        print(_memory_line("an allocation failed"), file=sys.stderr)
        return 2
    relay.say_others()
    name = signal.Signals(sig).name
    why = f"a Rust library stopped kview with {name}" if relay.rust else f"kview ended on {name}"
    print(internal_error_line(command, RuntimeError(why)), file=sys.stderr)
    return 1
