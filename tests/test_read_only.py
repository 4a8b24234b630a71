"""A user's trace is opened read-only and immutable by every reader and command: its bytes,
mtime and folder are the same afterwards, a leftover journal or WAL (an interrupted write) is
refused and never acted on, and odd file names reach SQLite escaped."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from conftest import SAMPLES
from fswatch import Untouched
from in_process import kview_here as kview  # what a command reads, writes and says: no child needed

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
OTHER = SAMPLES / "ncf_b1048576_train_nsys.sqlite"
COMMANDS = [["stats", "-r", "all"], ["kernels"], ["layers"], ["overview"], ["phases"], ["compare"], ["diff"], ["ranks"]]


def args_for(cmd, trace):
    if cmd[0] == "diff":
        return ["diff", trace, trace]
    return [cmd[0], trace, *cmd[1:]]


def _in_child(code: str) -> None:
    """Run `code` in a child that dies without closing its connection (a killed writer)."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def hot_journal(folder):
    """A trace whose writer was killed mid-transaction: pages already spilled into the trace,
    the originals in a hot `-journal` beside it (SQLite would roll them back on open)."""
    t = folder / "t.sqlite"
    shutil.copy(FWD, t)
    _in_child(f"""
        import os, sqlite3
        con = sqlite3.connect({str(t)!r})
        con.execute("PRAGMA cache_size=1")
        con.execute("BEGIN")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1")
        os._exit(0)
    """)
    assert (folder / "t.sqlite-journal").stat().st_size > 0
    return t


def wal_pending(folder):
    """A WAL-mode trace whose last commit was never checkpointed (`-wal` and `-shm` left)."""
    t = folder / "t.sqlite"
    shutil.copy(FWD, t)
    _in_child(f"""
        import os, sqlite3
        con = sqlite3.connect({str(t)!r})
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA wal_autocheckpoint=0")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1")
        con.commit()
        os._exit(0)
    """)
    assert (folder / "t.sqlite-wal").stat().st_size > 32
    return t


def wal_clean(folder):
    """A WAL-mode trace closed cleanly: no `-wal` beside it, the header says WAL."""
    t = folder / "t.sqlite"
    shutil.copy(FWD, t)
    con = sqlite3.connect(t)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal"
    con.close()
    assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite"] and t.read_bytes()[18:20] == b"\x02\x02"
    return t


@pytest.mark.parametrize("make,side", [(hot_journal, "t.sqlite-journal"), (wal_pending, "t.sqlite-wal")])
@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c[0])
def test_interrupted_write_is_refused_and_left_alone(make, side, cmd, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    t = make(folder)
    with Untouched(folder) as u:
        r = kview(*args_for(cmd, t))
    u.check()
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert str(t) in lines[0] and side in lines[0] and "an interrupted write" in lines[0]
    assert "open a copy, or run `sqlite3 t.sqlite .recover`" in lines[0]


@pytest.mark.parametrize("make,side", [(hot_journal, "t.sqlite-journal"), (wal_pending, "t.sqlite-wal")])
def test_tui_refuses_an_interrupted_write_before_starting(make, side, tmp_path):
    t = make(tmp_path)
    with Untouched(tmp_path) as u:
        r = subprocess.run(
            [sys.executable, "-m", "kview.cli", str(t)],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    u.check()
    assert r.returncode == 2 and side in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "\x1b[" not in r.stdout + r.stderr


def test_every_reader_is_immutable_even_where_sqlite_would_roll_back(tmp_path):
    """Below the commands' refusal: the readers themselves never roll back or checkpoint."""
    from kview.io.sqlite_source import SqliteSource

    for make in (hot_journal, wal_pending):
        folder = tmp_path / make.__name__
        folder.mkdir()
        t = make(folder)
        src = SqliteSource.__new__(SqliteSource)  # past the refusal, to exercise both connections
        from kview.io.sqlite_source import connectorx_url, sqlite_uri

        src.path, src._url = t, connectorx_url(t)
        with Untouched(folder) as u:
            src.con = sqlite3.connect(sqlite_uri(t), uri=True)
            n_std = src.con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
            n_cx = src.query("SELECT count(*) AS n FROM CUPTI_ACTIVITY_KIND_KERNEL")["n"][0]
            src.con.close()
        u.check()
        assert n_std == n_cx > 0


def _commands_leave_folder_untouched(folder, t, env=None, commands=COMMANDS):
    for cmd in commands:
        with Untouched(folder) as u:
            r = kview(*args_for(cmd, t), env=env)
        u.check()
        assert r.returncode == 0, (cmd, r.stderr)
        assert r.stdout.count("\n") >= 3


def test_clean_wal_trace_opens_and_nothing_appears_beside_it(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    t = wal_clean(folder)
    want = kview("stats", FWD, "-f", "json", "--no-cache").stdout  # several reports: one JSON document
    assert kview("stats", t, "-f", "json", "--no-cache").stdout == want
    _commands_leave_folder_untouched(folder, t)  # no -wal/-shm created, even for a moment


@pytest.fixture
def read_only_folder(tmp_path):
    """A folder on a read-only mount (chmod does not stop root; a read-only mount does). Skips
    where mounting is not allowed."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_clean_wal_trace_opens_in_a_read_only_folder(read_only_folder):
    t = wal_clean(read_only_folder)
    assert subprocess.run(["mount", "-o", "remount,ro", str(read_only_folder)], capture_output=True).returncode == 0
    with pytest.raises(OSError):
        (read_only_folder / "probe").write_text("x")
    # the folder cannot change: what is asked here is that the commands run (the test above runs
    # every command and watches the folder); one report, one attributed table, the overview
    _commands_leave_folder_untouched(read_only_folder, t, commands=[["stats", "-r", "all"], ["kernels"], ["overview"]])


NAMES = {
    "percent20": "e%20f.sqlite",
    "question": "a?b.sqlite",
    "hash": "c#d.sqlite",
    "newline": "new\nline.sqlite",
    "space": "sp ace.sqlite",
    "percent3F": "x%3Fy.sqlite",
}


@pytest.mark.parametrize("name", list(NAMES.values()), ids=list(NAMES))
def test_odd_names_open_that_file_and_create_nothing(name, tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    t = folder / name
    shutil.copy(FWD, t)
    # decoys where a wrongly decoded or truncated name would land
    for decoy in {"e f.sqlite", "a", "c", "new", "newline.sqlite", "x?y.sqlite"} - {name}:
        shutil.copy(OTHER, folder / decoy)
    want = kview("stats", FWD, "-r", "cuda_gpu_kern_sum", "-f", "csv", "--no-cache")
    with Untouched(folder) as u:
        got = kview("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "csv")
    u.check()
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


async def test_tui_leaves_the_trace_and_its_folder_untouched(tmp_path):
    pytest.importorskip("textual")
    from kview.tui.app import KviewApp

    folder = tmp_path / "traces"
    folder.mkdir()
    t = wal_clean(folder)
    with Untouched(folder) as u:
        app = KviewApp([str(t)], use_cache=True)
        async with app.run_test(size=(120, 40)) as pilot:
            for _ in range(600):
                await pilot.pause(0.05)
                if app.loaded:
                    break
            assert app.loaded, "trace never finished loading"
            await pilot.press("3", "4", "1")
    u.check()


def test_large_tables_read_in_parallel_through_the_escaped_uri(tmp_path):
    """Tables past PARTITION_ROWS are read as several rowid ranges at once, through the same
    read-only URI (a name with `?` and `%20` included)."""
    from kview.io.sqlite_source import PARTITION_ROWS

    from deep_nvtx import make

    folder = tmp_path / "traces"
    folder.mkdir()
    t = make(folder / "big?%20.sqlite", PARTITION_ROWS + 1000, leak=False)
    with Untouched(folder) as u:
        r = kview("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "csv", "--no-cache")
    u.check()
    assert r.returncode == 0, r.stderr
    con = sqlite3.connect(t)
    n, total = con.execute("SELECT count(*), sum(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    con.close()
    lines = r.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("Time (%)"))
    row = dict(zip(lines[head].split(","), lines[head + 1].split(",")))
    assert (int(row["Total Time (ns)"]), int(row["Instances"])) == (total, n)


@pytest.mark.parametrize("trace", [SAMPLES / "lm-small_ctx256_train_nsys.sqlite", FWD])
def test_parallel_reads_keep_rowid_order(trace, monkeypatch):
    """A table read as several rowid ranges at once (their batches arrive in the order the
    threads finish) gives the rows in rowid order, as one plain read does: the runtime calls
    (with and without a condition) and the NVTX rows, on a real trace."""
    import polars as pl
    from polars.testing import assert_frame_equal

    from kview.io import nsys_reader, sqlite_source

    src = sqlite_source.SqliteSource(trace)
    table, cols = "CUPTI_ACTIVITY_KIND_RUNTIME", ["rowid", "start", "end", "globalTid", "correlationId"]
    rows = src.scalar(f"SELECT count(*) FROM {table}")
    con = sqlite3.connect(f"file:{trace}?mode=ro", uri=True)
    for where in (None, "correlationId % 3 = 0"):
        sql = f"SELECT rowid, start, end, globalTid, correlationId FROM {table}" + (f" WHERE {where}" if where else "")
        want = pl.DataFrame(con.execute(sql + " ORDER BY rowid").fetchall(), schema=cols, orient="row")
        monkeypatch.setattr(sqlite_source, "PARTITION_ROWS", rows // 10)
        monkeypatch.setattr(sqlite_source, "read_threads", lambda: 7)
        got = src.read_rows_in_order(table, cols, where)
        assert got.height > 100
        assert_frame_equal(got, want, check_dtypes=False)
    con.close()
    whole = nsys_reader.nvtx_events(src, part_rows=1 << 30, threads=1)
    assert whole.height > 1000
    assert_frame_equal(nsys_reader.nvtx_events(src, part_rows=whole.height // 9, threads=4), whole)
