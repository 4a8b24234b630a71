"""Ctrl-C (SIGINT) or SIGTERM in the middle of a command: the exit status says so (128 +
signal), stderr holds no traceback (none from threads being joined either), and no
half-written cache temporary is left behind. A trace behind a folder the user cannot enter is
a one-line reason, in the CLI and before the explorer starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import as_a_user
from deep_nvtx import make


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory):
    return make(tmp_path_factory.mktemp("slow") / "slow.sqlite", 20_000)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_interrupted_command_leaves_quietly(slow_trace, sig, tmp_path):
    p = subprocess.Popen(
        [sys.executable, "-m", "kview.cli", "overview", str(slow_trace), "-f", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path)},
    )
    try:
        t0 = time.monotonic()  # interrupt once kview is at work: its first cache entries are written
        while not any((tmp_path / "kview").rglob("*.parquet")) and p.poll() is None and time.monotonic() - t0 < 60:
            time.sleep(0.02)
        assert p.poll() is None, "finished before it could be interrupted"
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 128 + sig, err
    assert err == b"" and out == b"", err.decode()
    assert not [q for q in tmp_path.rglob("*") if q.name.endswith(".tmp")]


@pytest.mark.parametrize("cmd", [["stats"], []], ids=["stats", "explorer"])
def test_trace_behind_a_folder_that_cannot_be_entered(cmd, tmp_path):
    user = as_a_user()  # root enters any folder: the child runs without that override
    locked = tmp_path / "locked"
    locked.mkdir()
    trace = locked / "t.sqlite"
    trace.write_bytes(b"")
    locked.chmod(0)
    try:
        r = subprocess.run(
            [sys.executable, "-m", "kview.cli", *cmd, str(trace)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=user,
        )
    finally:
        locked.chmod(0o700)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"kview: {trace}: cannot be read (Permission denied)\n"
