"""Bad input: one line on stderr naming the file and the problem, exit 2, nothing written."""

from __future__ import annotations

import lzma
import sqlite3
import subprocess
import sys

import pytest

from conftest import FIXTURES, LM_TRACES
from in_process import kview_here

GOOD = next(p for p in LM_TRACES if "forward" in p.name)


def _make(kind: str, d):
    p = d / f"{kind}.sqlite"
    data = GOOD.read_bytes()
    if kind == "empty":
        p.write_bytes(b"")
    elif kind == "zeroed_header":
        p.write_bytes(b"\0" * 100 + data[100:])
    elif kind == "truncated":
        p.write_bytes(data[: len(data) // 3])
    elif kind == "random_bytes":
        import random

        rnd = random.Random(7)
        p.write_bytes(bytes(rnd.getrandbits(8) for _ in range(8192)))
    elif kind == "not_nsys":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE users(id INTEGER, name TEXT)")
        con.commit()
        con.close()
    elif kind == "text_file":
        p.write_text("this is not a database\n")
    elif kind == "folder":
        p.mkdir()
    elif kind == "missing":
        pass
    elif kind in ("snapshot", "snapshot_xz"):  # a CUDA memory snapshot, which `kview memory` reads
        packed = FIXTURES / "memory" / "tiny_train.memory.pickle.xz"
        p = d / ("tiny_train.memory.pickle.xz" if kind == "snapshot_xz" else "tiny_train.memory.pickle")
        p.write_bytes(packed.read_bytes() if kind == "snapshot_xz" else lzma.decompress(packed.read_bytes()))
    elif kind == "garbage_json":
        p = d / "trace.json"
        p.write_text('{"traceEvents": [ {"ph": "X", ')
    return p


CASES = {
    "empty": "is empty",
    "zeroed_header": "zeroed header",
    "truncated": "truncated",
    "random_bytes": "not a SQLite database",
    "not_nsys": "not an Nsight Systems export",
    "text_file": "not a SQLite database",
    "folder": "is a folder",
    "missing": "no such file",
    "garbage_json": "JSON",
    # not "not a SQLite database", and for the .xz not that of a copy named .sqlite in the cache
    "snapshot": "is a CUDA memory snapshot, not a trace: `kview memory` shows it",
    "snapshot_xz": "is a CUDA memory snapshot, not a trace: `kview memory` shows it",
}


# the damaged SQLite and the broken JSON (the readers in Rust and C) run as the program does;
# the other kinds in the test's process (a CPU second less each)
IN_A_CHILD = {"truncated", "garbage_json"}


@pytest.mark.parametrize("kind", list(CASES))
def test_bad_input_is_one_line_exit_2_nothing_written(kind, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    path = _make(kind, src)
    out = tmp_path / "out"
    out.mkdir()
    before = sorted(p.name for p in src.iterdir())
    argv = ["stats", str(path), "-o", str(out / "r")]
    if kind in IN_A_CHILD:  # the whole program, to its exit: nothing more on stderr than the line
        r = subprocess.run([sys.executable, "-m", "kview.cli", *argv], capture_output=True, text=True, timeout=60)
    else:
        r = kview_here(*argv)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(path) in lines[0] and CASES[kind] in lines[0]
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    assert list(out.iterdir()) == []
    assert sorted(p.name for p in src.iterdir()) == before


def test_unknown_report_is_a_usage_error(tmp_path):
    r = kview_here("stats", str(GOOD), "-r", "nope")
    assert r.returncode == 2 and "unknown report nope" in r.stderr and len(r.stderr.splitlines()) == 1


# the explorer refuses through the same checks as the commands (whose every kind runs above): by
# default a damaged SQLite and broken JSON (the readers in Rust and C) and a folder (opened as a
# run of rank files); the other kinds are nightly repeats
@pytest.mark.parametrize(
    "kind",
    [
        "truncated",
        "folder",
        "garbage_json",
        *(pytest.param(k, marks=pytest.mark.nightly) for k in ("empty", "zeroed_header", "not_nsys", "missing")),
    ],
)
def test_tui_refuses_bad_input_before_starting(kind, tmp_path):
    path = _make(kind, tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "kview.cli", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and CASES[kind] in r.stderr
    assert "\x1b[" not in r.stdout + r.stderr  # no terminal UI was started


def test_subcommands_do_not_import_textual():
    code = (
        "import sys; from kview.cli import main; "
        f"[main([c, r'{GOOD}']) for c in ('kernels', 'layers', 'phases', 'overview')]; "
        "print('LOADED', [m for m in ('textual', 'torch') if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "LOADED []" in r.stdout, r.stderr[-500:]
