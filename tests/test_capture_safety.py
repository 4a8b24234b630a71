"""`kview capture` safety, on the CPU: the output name is literal (no globbing), a signal to
kview reaches the program's whole process group, kview waits for it, removes its temporary
folder and ends by that signal; a Python without torch is one line, exit 2."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# skipped without torch, which is not imported here: the captures run in children (importing it
# costs each worker that collects this file about 2.5 CPU s)
pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")

PROGRAM = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    folder = json.loads(os.environ["KVIEW_CAPTURE"])["dir"]
    with open(sys.argv[1] + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "worker": worker.pid, "dir": folder}, f)
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    time.sleep(600)
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _until(test, seconds: float) -> bool:
    """Poll `test` until it holds or `seconds` pass (no fixed sleep)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if test():
            return True
        time.sleep(0.1)
    return test()


# one handler forwards the three (capture/process_group.py FORWARDED): Ctrl-C's by default, the
# other two in the nightly set
@pytest.mark.parametrize(
    "sig",
    [signal.SIGINT, *(pytest.param(s, marks=pytest.mark.nightly) for s in (signal.SIGTERM, signal.SIGHUP))],
    ids=lambda s: s.name,
)
def test_a_signal_ends_the_program_group_and_leaves_nothing(sig, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    info = tmp_path / "info.json"
    out = tmp_path / "t.sqlite"
    kview = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kview.cli",
            "capture",
            "--backend",
            "torch",
            "-o",
            str(out),
            "--",
            "python",
            str(prog),
            str(info),
        ],
        env=_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert _until(info.exists, 240), kview.stderr.read().decode() if kview.poll() is not None else "no program"
        seen = json.loads(info.read_text())
        assert Path(seen["dir"]).name.startswith("kview-capture-") and Path(seen["dir"]).is_dir()
        kview.send_signal(sig)
        kview.wait(timeout=120)
    finally:
        if kview.poll() is None:
            kview.kill()
    assert kview.returncode == -sig  # ended by the very signal
    assert not _alive(seen["pid"]) and _until(lambda: not _alive(seen["worker"]), 30)  # the whole group
    assert not Path(seen["dir"]).exists()  # the temporary folder removed
    assert not out.exists()


def test_the_output_name_is_literal(tmp_path):
    """`run[1].sqlite` exists: refused without --force (a glob would have looked for run1.sqlite)."""
    from kview.capture.command import check_outputs, parse
    from kview.errors import OutputError

    existing = tmp_path / "run[1].sqlite"
    existing.write_bytes(b"precious")
    (tmp_path / "run1.sqlite").write_bytes(b"other")
    prog = tmp_path / "p.py"
    prog.write_text("print(1)\n")
    with pytest.raises(OutputError, match=r"run\[1\]\.sqlite: exists"):
        check_outputs(existing, parse(["python", str(prog)]), keep_json=False, force=False)
    # no such file literally: a name that would match another as a pattern is free
    check_outputs(tmp_path / "run[2].sqlite", parse(["python", str(prog)]), keep_json=False, force=False)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kview.cli",
            "capture",
            "--backend",
            "torch",
            "-o",
            str(existing),
            "--",
            "python",
            str(prog),
        ],
        env=_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "exists (give --force" in r.stderr, r.stderr
    assert existing.read_bytes() == b"precious"


def test_a_python_without_torch_is_one_line(tmp_path):
    """The program's Python cannot import torch: one line naming that Python, exit 2, the
    program not run (not a traceback blaming it)."""
    hide = tmp_path / "no_torch"
    (hide / "torch").mkdir(parents=True)
    (hide / "torch" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n"
    )
    prog = tmp_path / "p.py"
    prog.write_text("open('ran', 'w').write('yes')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(hide), *filter(None, [env.get("PYTHONPATH")])])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "kview.cli",
            "capture",
            "--backend",
            "torch",
            "-o",
            str(tmp_path / "t.sqlite"),
            "--",
            "python",
            str(prog),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if not line.startswith("kview capture: running")]
    assert len(lines) == 1 and lines[0].startswith("kview capture: torch is not installed in"), r.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "t.sqlite").exists()
