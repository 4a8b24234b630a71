"""Hostile traces for the readers: a view (an infinite recursive CTE) where nsys writes a table,
long SQLite work under Ctrl-C and SIGTERM, JSON nested 100k deep, ids of 100k digits, NULL and
empty ids, and JSON in UTF-8 with a byte-order mark or in UTF-16. Each ends in an answer (equal
to a plain count over the file) or one line and exit 2, never a hang or an internal error."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from kview.cli import main
from kview.io.kineto_reader import _int

from conftest import SAMPLES

NSYS = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
TORCH = SAMPLES / "lm-small_ctx256_forward_torch.json.gz"
RECURSIVE = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)"


def _kview(*args, timeout=120) -> subprocess.CompletedProcess:
    """kview in a child: a hang is a failed test, not a stuck suite."""
    return subprocess.run(
        [sys.executable, "-m", "kview.cli", *map(str, args), "--no-cache"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _in_process(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*map(str, args), "--no-cache"])
    return rc, out.getvalue(), err.getvalue()


def _one_line(rc, err, path):
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and path.name in lines[0] and "internal error" not in err, err


@pytest.fixture(scope="module")
def view_trace(tmp_path_factory):
    """The kernel table replaced by a view over an endless recursive CTE, with its columns."""
    p = tmp_path_factory.mktemp("view") / "t.sqlite"
    shutil.copy(NSYS, p)
    con = sqlite3.connect(p)
    cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    select = ", ".join(f'n AS "{c}"' for c in cols)
    con.execute(f"CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS {RECURSIVE} SELECT {select} FROM r")
    con.commit()
    con.close()
    return p


@pytest.mark.parametrize("command", ["kernels", "overview", "stats", "timeline"])
def test_a_view_in_place_of_a_table_is_refused(view_trace, command):
    r = _kview(command, view_trace)
    _one_line(r.returncode, r.stderr, view_trace)
    assert "CUPTI_ACTIVITY_KIND_KERNEL as a view, not a table" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_long_sqlite_work_answers_signals(tmp_path, sig):
    """An endless query on the reader's connection, under kview's own signal handlers: the signal
    ends the process with its status (SQLite alone would run on and leave the handler waiting)."""
    child = textwrap.dedent(
        f"""
        import signal, sys
        from kview.cli import _exit_on_signal
        from kview.io.sqlite_source import SqliteSource
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, _exit_on_signal)
        src = SqliteSource(sys.argv[1])
        print("ready", flush=True)
        src.scalar("{RECURSIVE} SELECT count(*) FROM r")
        """
    )
    p = subprocess.Popen([sys.executable, "-c", child, str(NSYS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert p.stdout is not None and p.stdout.readline() == b"ready\n"
        p.send_signal(sig)
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 128 + sig, err
    assert err == b""


def test_the_readers_connection_serves_several_threads_at_once():
    """The explorer's views read one trace from several threads. On one SQLite connection, a
    thread stepping a query (SQLite's lock held) calls the signal handler's hook, which wants
    the GIL, while another thread holding the GIL reads its rows' columns, which wants SQLite's
    lock: without one thread at a time on the connection the process hung, every time here."""
    child = textwrap.dedent(
        """
        import sys, threading
        from kview.io.sqlite_source import SqliteSource
        src = SqliteSource(sys.argv[1])
        def work():
            for _ in range(50):
                src.rows("SELECT min(rowid), max(rowid), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
                src.rows("SELECT start, end FROM CUPTI_ACTIVITY_KIND_RUNTIME LIMIT 20000")
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(src.scalar("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"))
        """
    )
    r = subprocess.run([sys.executable, "-c", child, str(NSYS)], capture_output=True, text=True, timeout=60)
    with sqlite3.connect(f"file:{NSYS}?mode=ro&immutable=1", uri=True) as con:
        kernels = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert r.returncode == 0 and r.stdout.split() == [str(kernels)], r.stderr


def _json_path(tmp_path, text: str, name="t.json"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("nest", ["[", '{"a":'])
def test_json_nested_100k_deep_is_one_line(tmp_path, nest):
    close = "]" if nest == "[" else "}"
    p = _json_path(
        tmp_path,
        '{"traceEvents": [{"ph": "X", "args": ' + nest * 100_000 + "1" * (nest != "[") + close * 100_000 + "}]}",
    )
    rc, out, err = _in_process("kernels", p)
    _one_line(rc, err, p)
    assert "nests deeper than" in err


def test_nested_input_dims_are_bounded(tmp_path):
    """Input Dims nested 900 deep (within the decoder's limit): the op's text is bounded, the trace reads."""
    dims = "[" * 900 + "]" * 900
    ev = '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5, "args": {"Input Dims": %s}}'
    p = _json_path(tmp_path, '{"traceEvents": [' + ev % dims + "]}")
    r = _kview("overview", p, "-f", "json")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "pid",
    [
        '"' + "7" * 100_000 + 'x"',
        '"' + "7" * 100_000 + '"',
        "7" * 100_000,
        "7" * 4000,
        '"stream ' + "1" * 100_000 + '"',
    ],
    ids=["digits-then-letter", "digit-string", "number-100k", "number-4k", "stream-digits"],
)
def test_ids_of_100k_digits_are_read_in_linear_time(tmp_path, pid):
    """A pid of 100k digits: the id regex rescanned the run from each of its positions (hours);
    now an id over 64 bits is no id, and the trace reads (or is one line)."""
    ev = '{"ph": "X", "cat": "kernel", "name": "k", "pid": %s, "tid": 1, "ts": 1, "dur": 2, "args": {"stream": 7}}'
    p = _json_path(tmp_path, '{"traceEvents": [' + ev % pid + "]}")
    r = _kview("kernels", p, "-f", "csv", timeout=60)
    assert r.returncode in (0, 2), r.stderr
    if r.returncode == 2:
        _one_line(r.returncode, r.stderr, p)
    else:
        assert len(r.stdout.strip().splitlines()) == 2  # the header and the one kernel


def test_int_reads_ids_as_kineto_writes_them():
    assert [_int(v) for v in (7, "7", "stream 7", "-3", "a-3", "x", "", None, 2**70, "9" * 25, True)] == [
        7,
        7,
        7,
        -3,
        -3,
        None,
        None,
        None,
        None,
        None,
        None,
    ]


def _count(path, table) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        return con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.mark.parametrize(
    "table,column",
    [
        ("NVTX_EVENTS", "globalTid"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
    ],
)
@pytest.mark.parametrize("value", [None, ""], ids=["null", "empty"])
def test_null_or_empty_ids_in_sqlite(tmp_path, table, column, value):
    p = tmp_path / "t.sqlite"
    shutil.copy(NSYS, p)
    with sqlite3.connect(p) as con:
        con.execute(
            f'UPDATE "{table}" SET "{column}" = ? WHERE rowid IN (SELECT rowid FROM "{table}" LIMIT 3)', (value,)
        )
    for command in (
        ["kernels", "-f", "csv"],
        ["overview", "-f", "json"],
        ["timeline"],
        ["stats", "-r", "all", "-f", "json"],
    ):
        rc, out, err = _in_process(command[0], p, *command[1:])
        if rc == 2:
            _one_line(rc, err, p)
            continue
        assert rc == 0, err
        if command[0] == "kernels":  # every GPU op still a row: the kernels and the memsets the file holds
            rows = list(csv.DictReader(io.StringIO(out)))
            assert sum(r["Category"] != "memset" for r in rows) == _count(p, "CUPTI_ACTIVITY_KIND_KERNEL")
            assert len(rows) == _count(p, "CUPTI_ACTIVITY_KIND_KERNEL") + _count(p, "CUPTI_ACTIVITY_KIND_MEMSET")


@pytest.mark.parametrize("value", [None, ""], ids=["null", "empty"])
@pytest.mark.parametrize("field", ["pid", "tid"])
def test_null_or_empty_ids_in_json(tmp_path, value, field):
    doc = json.loads(gzip.decompress(TORCH.read_bytes()))
    hit = 0
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and hit < 40:
            e[field] = value
            hit += 1
    kernels = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel")
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    for command in (["kernels", "-f", "csv"], ["overview", "-f", "json"], ["timeline"], ["layers"]):
        rc, out, err = _in_process(command[0], p, *command[1:])
        assert rc == 0, err
        if command[0] == "kernels":  # every kernel still a row
            rows = list(csv.DictReader(io.StringIO(out)))
            assert sum(r["Category"] != "memset" for r in rows) == kernels


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be"])
def test_json_with_a_bom_or_in_utf16_reads_as_utf8(tmp_path, encoding):
    text = gzip.decompress(TORCH.read_bytes()).decode("utf-8")
    plain = _json_path(tmp_path, text, "plain.json")
    other = tmp_path / "other.json"
    other.write_bytes(text.encode(encoding))
    a = _in_process("stats", plain, "-r", "cuda_gpu_kern_sum,nvtx_sum", "-f", "json")
    b = _in_process("stats", other, "-r", "cuda_gpu_kern_sum,nvtx_sum", "-f", "json")
    assert a[0] == b[0] == 0, b[2]
    assert a[1] == b[1] and a[1].count("\n") > 10
