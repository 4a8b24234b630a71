"""The explorer leaves at once and leaves the terminal as it found it: `q` during a load does
not wait for the load, SIGTERM and SIGHUP end it the ordinary way (alternate screen left,
mouse tracking off), and nothing of it is a traceback. Driven through a pseudo-terminal, as a
user's shell runs it, with attribution held forever (the load is provably still running when
the key or the signal comes: an explorer that waited for it would never leave)."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import SAMPLES

ALT_ON, ALT_OFF = b"\x1b[?1049h", b"\x1b[?1049l"
MOUSE_ON, MOUSE_OFF = b"\x1b[?1000h", b"\x1b[?1000l"

LM = str(SAMPLES / "lm-small_ctx256_train_nsys.sqlite")
# kview's command line, with attribution made to say it started (a file) and then never end
HELD = """
import runpy, sys, threading
import kview.analysis.attribution as attribution
started = sys.argv.pop(1)
def held(trace, shapes=True):
    open(started, "w").close()
    threading.Event().wait()
attribution._attributed = held
sys.argv[0] = "kview"
runpy.run_module("kview.cli", run_name="__main__")
"""
HANG_S = 60  # only a guard against a hang: an explorer that waits for the held load never leaves


class Terminal:
    def __init__(self, held: Path, *args: str):
        self.held = held
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: kview on the pseudo-terminal
            os.environ.update(TERM="xterm-256color", COLUMNS="100", LINES="30")
            os.execv(sys.executable, [sys.executable, "-c", HELD, str(held), *args])
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

    def load_held(self) -> bool:
        """Wait until attribution started, and is held (the load provably still running)."""
        end = time.monotonic() + HANG_S
        while not self.held.exists() and time.monotonic() < end:
            self.read(0.05)
        return self.held.exists()

    def exited(self) -> bool:
        """Wait for the explorer to leave (within HANG_S: a guard, not a measure)."""
        end = time.monotonic() + HANG_S
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                self.read(0.2)
                return True
            self.read(0.02)
        return False

    def close(self) -> None:
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)


@pytest.mark.parametrize("how", ["q", "SIGTERM", "SIGHUP"])
def test_leaves_during_a_load_and_restores_the_terminal(tmp_path, how):
    term = Terminal(tmp_path / "held", LM, "--no-cache")
    try:
        # the kernel summary is up and attribution is held: the load never ends
        assert term.load_held() and term.wait_for(b"attributing", HANG_S), term.screen[-2000:]
        if how == "q":
            os.write(term.fd, b"q")
        else:
            os.kill(term.pid, getattr(signal, how))
        assert term.exited(), f"{how}: still running with the load held"
        screen = term.screen
        # the screen's tail names what went wrong (kview's one-line internal error, say)
        assert term.status == (0 if how == "q" else 128 + getattr(signal, how)), screen[-1500:]
        assert screen.rfind(ALT_OFF) > screen.rfind(ALT_ON) > -1, "left in the alternate screen"
        assert screen.rfind(MOUSE_OFF) > screen.rfind(MOUSE_ON) > -1, "mouse tracking left on"
        assert b"Traceback" not in screen
    finally:
        term.close()


def test_leaves_when_its_terminal_is_gone(tmp_path):
    """An SSH connection dropped (the terminal closed, then SIGHUP): nothing can be restored and
    writing to the terminal fails, so the explorer leaves anyway instead of waiting on it."""
    term = Terminal(tmp_path / "held", LM, "--no-cache")
    try:
        assert term.load_held() and term.wait_for(b"attributing", HANG_S), term.screen[-2000:]
        os.close(term.fd)
        term.fd = os.open(os.devnull, os.O_RDONLY)  # (closed by close())
        os.kill(term.pid, signal.SIGHUP)
        assert term.exited(), "still running with the load held"
        assert term.status == 128 + signal.SIGHUP
    finally:
        term.close()


def test_the_explorer_sizes_itself_from_the_terminal_not_the_environment(monkeypatch):
    """COLUMNS and LINES left in the environment (pytest-xdist's workers carry 80x24) would fix
    the explorer's size whatever the window's: where the terminal says its size they go; where
    it cannot (a pseudo-terminal never sized: 0x0) they stay."""
    import fcntl
    import struct
    import termios

    from kview.tui.app import size_from_the_terminal

    main_fd, tty_fd = os.openpty()
    try:
        with os.fdopen(tty_fd, "w", closefd=False) as tty:
            for columns, lines, kept in ((0, 0, True), (160, 45, False)):
                monkeypatch.setenv("COLUMNS", "80")
                monkeypatch.setenv("LINES", "24")
                fcntl.ioctl(tty_fd, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
                size_from_the_terminal(tty)
                assert ("COLUMNS" in os.environ, "LINES" in os.environ) == (kept, kept)
                if not kept:
                    assert os.get_terminal_size(tty_fd) == (160, 45)
    finally:
        os.close(tty_fd)
        os.close(main_fd)
