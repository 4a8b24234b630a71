"""The program `kview capture` runs, in a process group of its own, and the signals sent to
kview meanwhile: SIGINT, SIGTERM or SIGHUP reaches the whole group (the program, its workers,
nsys), kview waits for the program to end, removes its temporary folder and then ends by the
same signal, so the shell sees the status it sent and nothing runs on orphaned."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kview import atomic_write

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_S = 10.0  # how long the program has to end after the signal before it is killed


def _wait(pid: int, until: float) -> bool:
    """Reap `pid`; False when it is still running at `until`."""
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already
            return True
        if done:
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)


def _end_group(pid: int, signum: int) -> None:
    """`signum` to the program's group, then the program waited for (killed after GRACE_S)."""
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
    if not _wait(pid, time.monotonic() + GRACE_S):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        _wait(pid, float("inf"))


def run_in_group(
    cmd: list[str], *, tmp: Path | None, env: dict[str, str] | None = None, capture_output: bool = False
) -> subprocess.CompletedProcess:
    """Run `cmd` to its end in a new process group; a forwarded signal ends kview as described
    above (the temporary folder `tmp` removed). FileNotFoundError when `cmd` cannot start."""
    child: subprocess.Popen | None = None

    def on_signal(signum, _frame) -> None:
        if child is not None:
            _end_group(child.pid, signum)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

        atomic_write.remove_pending()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, on_signal) for s in FORWARDED} if main else {}
    pipe = subprocess.PIPE if capture_output else None
    try:
        # a group of its own (Python 3.10 has no process_group=: setpgid in the child instead)
        group = {"process_group": 0} if sys.version_info >= (3, 11) else {"preexec_fn": os.setpgrp}
        child = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, text=True, **group)  # type: ignore[call-overload]
        out, err = child.communicate()
        return subprocess.CompletedProcess(cmd, child.returncode, out, err)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
