"""The explorer leaves at once and leaves the terminal as it found it: `q` during a load does
not wait for the load, SIGTERM and SIGHUP end it the ordinary way (alternate screen left,
mouse tracking off), and nothing of it is a traceback. Driven through a pseudo-terminal, as a
user's shell runs it."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time

import pytest

from deep_nvtx import make

ALT_ON, ALT_OFF = b"\x1b[?1049h", b"\x1b[?1049l"
MOUSE_ON, MOUSE_OFF = b"\x1b[?1000h", b"\x1b[?1000l"


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory):
    """A trace whose load takes seconds: a push never popped in a loop, 20,000 deep."""
    return make(tmp_path_factory.mktemp("slow") / "slow.sqlite", 20_000)


class Terminal:
    def __init__(self, *args: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: kview on the pseudo-terminal
            os.environ.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
            os.execv(sys.executable, [sys.executable, "-m", "kview.cli", *args])
        self.screen = b""
        self.status: int | None = None

    def read(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([self.fd], [], [], 0.02)[0]:
                try:
                    data = os.read(self.fd, 1 << 16)
                except OSError:  # the child is gone
                    return
                if not data:
                    return
                self.screen += data

    def wait_for(self, text: bytes, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while text not in self.screen and time.monotonic() < end:
            self.read(0.05)
        return text in self.screen

    def exited_within(self, seconds: float) -> float | None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                took = time.monotonic() - t0
                self.read(0.2)
                return took
            self.read(0.02)
        return None

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGHUP"])
def test_leaves_at_once_during_a_load_and_restores_the_terminal(slow_trace, how):
    term = Terminal(str(slow_trace), "--no-cache")
    try:
        # the kernel summary is up and attribution (seconds, at this depth) is running
        assert term.wait_for(b"attributing", 60), term.screen[-2000:]
        if how == "q":
            os.write(term.fd, b"q")
        else:
            os.kill(term.pid, getattr(signal, how))
        took = term.exited_within(10)
        assert took is not None and took < 2.0, f"{how}: still running after {took or 10:.1f} s"
        screen = term.screen
        # the screen's tail names what went wrong (kview's one-line internal error, say)
        assert term.status == (0 if how == "q" else 128 + getattr(signal, how)), screen[-1500:]
        assert screen.rfind(ALT_OFF) > screen.rfind(ALT_ON) > -1, "left in the alternate screen"
        assert screen.rfind(MOUSE_OFF) > screen.rfind(MOUSE_ON) > -1, "mouse tracking left on"
        assert b"Traceback" not in screen
    finally:
        term.close()


def test_leaves_when_its_terminal_is_gone(slow_trace):
    """An SSH connection dropped (the terminal closed, then SIGHUP): nothing can be restored and
    writing to the terminal fails, so the explorer leaves anyway instead of waiting on it."""
    term = Terminal(str(slow_trace), "--no-cache")
    try:
        assert term.wait_for(b"attributing", 60), term.screen[-2000:]
        os.close(term.fd)
        term.fd = os.open(os.devnull, os.O_RDONLY)  # (closed by close())
        os.kill(term.pid, signal.SIGHUP)
        took = term.exited_within(10)
        assert took is not None and took < 5.0, f"still running after {took or 10:.1f} s"
        assert term.status == 128 + signal.SIGHUP
    finally:
        term.close()
