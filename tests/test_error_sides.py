"""Every failure names the side that failed: the input trace, an output file, the command line,
or kview itself (a short "please report" line; the traceback only under KVIEW_DEBUG=1). `-o`
never overwrites without --force, never writes over an input, and writes atomically."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import polars as pl
import pytest

from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import SAMPLES, as_a_user
from in_process import kview_here

FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
TRAIN = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"


def kview(*args, env=None, code=None, preexec=None):
    """Run the CLI in a child; `code` runs first in that child (a failure injected at a call).
    What needs no child (a document, a refusal, a file written or not) runs in kview_here."""
    prog = (
        [sys.executable, "-m", "kview.cli"]
        if code is None
        else [
            sys.executable,
            "-c",
            textwrap.dedent(code) + "\nimport sys\nfrom kview.cli import main\nsys.exit(main())\n",
        ]
    )
    return subprocess.run(
        [*prog, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec,
    )


def one_line(r) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# -- -o ------------------------------------------------------------------------------------


def test_o_writes_every_report_and_nothing_else(tmp_path):
    r = kview_here("stats", FWD, "-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "csv", "-o", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r_cuda_api_sum.csv", "r_cuda_gpu_kern_sum.csv"]
    want = REPORTS["cuda_gpu_kern_sum"](open_trace(FWD, use_cache=False)).frame
    assert (
        pl.read_csv(tmp_path / "r_cuda_gpu_kern_sum.csv")["Total Time (ns)"].to_list()
        == want["Total Time (ns)"].to_list()
    )


def test_o_never_overwrites_without_force(tmp_path):
    old = tmp_path / "r_cuda_gpu_kern_sum.csv"
    old.write_text("my notes\n")
    r = kview_here("stats", FWD, "-r", "cuda_gpu_kern_sum,cuda_api_sum", "-f", "csv", "-o", tmp_path / "r")
    assert r.returncode == 2
    line = one_line(r)
    assert line == f"kview: output {old}: exists (give --force to overwrite it)"
    assert old.read_text() == "my notes\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [old.name]  # not even the other report
    r = kview_here("stats", FWD, "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", tmp_path / "r", "--force")
    assert r.returncode == 0, r.stderr
    assert old.read_text().startswith("Time (%),Total Time (ns)")


@pytest.mark.parametrize("how", ["same name", "hard link", "symlink"])
def test_o_never_writes_over_its_input_even_with_force(how, tmp_path):
    trace = tmp_path / "r_cuda_gpu_kern_sum.csv"  # a trace named like the report file
    out = tmp_path / "r_cuda_gpu_kern_sum.csv"
    if how == "same name":
        shutil.copy(FWD, trace)
    else:
        trace = tmp_path / "t.sqlite"
        shutil.copy(FWD, trace)
        (os.link if how == "hard link" else os.symlink)(trace, out)
    before = trace.read_bytes()
    r = kview_here("stats", trace, "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", tmp_path / "r", "--force")
    assert r.returncode == 2
    assert one_line(r) == f"kview: output {out}: is an input of this command; kview never writes over its input"
    assert trace.read_bytes() == before


def test_o_into_a_path_whose_folder_is_a_file(tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("x")
    r = kview_here("stats", FWD, "-f", "csv", "-o", f / "r")
    assert r.returncode == 2 and one_line(r).startswith(f"kview: output {f}/r_") and f"{f} is not a folder" in r.stderr
    r = kview_here("stats", FWD, "-f", "csv", "-o", tmp_path / "missing" / "r")
    assert r.returncode == 2 and f"its folder {tmp_path / 'missing'} does not exist" in one_line(r)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


FULL_DISK = """
import errno, os
real_write = os.write
def write(fd, data):  # the kernel's answer on a full disk: part of the data, then ENOSPC
    if os.readlink(f"/proc/self/fd/{fd}").startswith(os.environ["FULL_DISK_AT"]):
        if not getattr(write, "spent", False):
            write.spent = True
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_write(fd, data)
os.write = write
"""


def test_o_on_a_full_disk_leaves_nothing(tmp_path):
    r = kview(
        "stats",
        FWD,
        "-r",
        "all",
        "-f",
        "csv",
        "-o",
        tmp_path / "r",
        code=FULL_DISK,
        env={"FULL_DISK_AT": str(tmp_path)},
    )
    assert r.returncode == 2
    line = one_line(r)
    assert line.startswith(f"kview: output {tmp_path}/r_") and line.endswith(
        "cannot be written (No space left on device); nothing was written"
    )
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary


def test_o_on_a_real_full_tmpfs_leaves_nothing(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True
        ).returncode
    ):
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        r = kview_here("stats", TRAIN, "-r", "all", "-f", "csv", "-o", mnt / "r")  # ~7 MB of CSV into 256 KiB
        assert r.returncode == 2
        assert one_line(r).endswith("cannot be written (No space left on device); nothing was written")
        assert list(mnt.iterdir()) == []
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_o_into_a_read_only_folder(tmp_path):
    user = as_a_user()  # root writes into read-only folders: the child runs without that override
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        r = kview("stats", FWD, "-f", "csv", "-o", ro / "r", preexec=user)
        assert r.returncode == 2 and "cannot be written (Permission denied)" in one_line(r)
    finally:
        ro.chmod(0o755)


# -- kview's own bugs ------------------------------------------------------------------------

BUG = """
import kview.analysis.overview as o
def build(trace, *a, **k):
    raise RuntimeError("an injected bug")
o.build = build
"""


def test_an_internal_error_says_so_and_asks_for_a_report(tmp_path):
    r = kview("overview", FWD, code=BUG)
    assert r.returncode == 1
    assert one_line(r) == (
        "kview overview: internal error (RuntimeError: an injected bug); this is a bug in kview, "
        "please report it with the command line (KVIEW_DEBUG=1 shows the traceback)"
    )
    assert str(FWD) not in r.stderr  # the trace is not blamed
    r = kview("overview", FWD, code=BUG, env={"KVIEW_DEBUG": "1"})
    assert r.returncode == 1 and "Traceback" in r.stderr and "an injected bug" in r.stderr


# -- NVTX tables that SQLite's max() turns into NULLs ----------------------------------------


def _variant(tmp_path, sql):
    t = tmp_path / "t.sqlite"
    shutil.copy(FWD, t)
    con = sqlite3.connect(t)
    con.executescript(sql)
    con.commit()
    con.close()
    return t


@pytest.mark.parametrize(
    "cmd", [["stats", "-r", "all"], ["kernels"], ["layers"], ["overview"], ["phases"], ["compare"]], ids=lambda c: c[0]
)
@pytest.mark.parametrize(
    "sql",
    ["DELETE FROM NVTX_EVENTS;", "UPDATE NVTX_EVENTS SET end = NULL;"],
    ids=["empty NVTX_EVENTS", "every range left open"],
)
def test_nvtx_without_ends_or_rows_opens(cmd, sql, tmp_path):
    t = _variant(tmp_path, sql)
    fmt = "json" if cmd[0] in ("stats", "overview") else "csv"  # several tables: one JSON document
    r = kview_here(cmd[0], t, *cmd[1:], "-f", fmt)
    assert r.returncode in (0, 1) and r.stderr.count("\n") <= 1, r.stderr
    assert "internal error" not in r.stderr and "cannot be read" not in r.stderr
    if cmd[0] == "layers" and r.returncode == 1:
        assert "no repeated layer ranges" in r.stderr


def test_ranges_left_open_end_at_the_last_timestamp(tmp_path):
    t = _variant(tmp_path, "UPDATE NVTX_EVENTS SET end = NULL;")
    con = sqlite3.connect(t)
    hi = con.execute("SELECT max(start) FROM NVTX_EVENTS").fetchone()[0]
    want = dict(
        con.execute(
            "SELECT coalesce(s.value, n.text), sum(? - n.start) FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType = 59 GROUP BY 1",
            (hi,),
        ).fetchall()
    )
    con.close()
    rep = REPORTS["nvtx_pushpop_sum"](open_trace(t, use_cache=False)).frame
    got = {name.split(":", 1)[1]: total for name, total in rep.select("Range", "Total Time (ns)").iter_rows()}
    assert got == want and len(got) > 3


@pytest.mark.parametrize("mark", [False, True], ids=["ranges only", "a mark after them"])
def test_the_last_timestamp_counts_every_nvtx_row(tmp_path, mark):
    """A range left open ends at the last timestamp of all of NVTX_EVENTS: where the ranges' read
    was every row it tells that timestamp, and where a mark (a row it leaves out) comes later,
    the mark's is the one."""
    sql = "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT max(rowid) FROM NVTX_EVENTS WHERE eventType = 59);"
    if mark:  # nvtxMarkA (34): a row of no range, after every other
        sql += (
            "INSERT INTO NVTX_EVENTS (start, eventType, text) "
            "SELECT max(max(start), max(end)) + 1000, 34, 'm' FROM NVTX_EVENTS;"
        )
    t = _variant(tmp_path, sql)
    con = sqlite3.connect(t)
    hi = con.execute("SELECT max(max(start), max(end)) FROM NVTX_EVENTS").fetchone()[0]
    want = dict(
        con.execute(
            "SELECT coalesce(s.value, n.text), sum(coalesce(n.end, ?) - n.start) FROM NVTX_EVENTS n "
            "LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType = 59 GROUP BY 1",
            (hi,),
        ).fetchall()
    )
    con.close()
    trace = open_trace(t, use_cache=False)
    rep = REPORTS["nvtx_pushpop_sum"](trace).frame
    assert trace.nvtx_max_timestamp == hi
    got = {name.split(":", 1)[1]: total for name, total in rep.select("Range", "Total Time (ns)").iter_rows()}
    assert got == want
