"""The frame cache is an optimization only: a full disk, a folder that cannot be made or entered,
an edit that keeps size and mtime, an entry copied from another trace, a damaged entry: each
means the same output as without the cache, one warning at most, no `.tmp` left behind."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys

import pytest

from kview.io import cache

from conftest import SAMPLES, as_a_user
from in_process import kview_here

# the cache is the subject (what a run writes, reads, refuses): each test starts with an empty one
pytestmark = pytest.mark.own_cache

FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
NCF = SAMPLES / "ncf_b1048576_train_nsys.sqlite"
JSON = SAMPLES / "lm-small_ctx256_forward_torch.json.gz"


def kview(*args, xdg=None, cwd=None, env=None, preexec=None):
    """`kview ARGS` in a child process."""
    prog = [sys.executable, "-m", "kview.cli"]
    e = {**os.environ, **(env or {})}
    if xdg is not None:
        e["XDG_CACHE_HOME"] = str(xdg)
    return subprocess.run(
        [*prog, *map(str, args)], capture_output=True, text=True, timeout=180, env=e, cwd=cwd, preexec_fn=preexec
    )


def later_run(*args, xdg):
    """A later run on the cache under `xdg`, made in the test's process as a new process starts:
    the cache's memory of this process (fingerprints, folders found unusable, folders swept) and
    the warnings already said are emptied first. What only a child shows (a folder it may not
    enter, a full disk, a relative XDG_CACHE_HOME) keeps a child (`kview`)."""
    cache._fingerprints.clear()
    cache._broken.clear()
    cache._swept.clear()
    return kview_here(*args, env={"XDG_CACHE_HOME": str(xdg)})


def without_cache(*args):
    """The answer without the cache: no cache, so no state of a process to keep apart; the
    test's own process gives it."""
    r = kview_here(*args, "--no-cache")
    assert r.returncode == 0, r.stderr
    return r.stdout


def fill(*args, xdg):
    """A first run that leaves its entries in the cache under `xdg`, made in the test's process:
    what a later run (with none of this process's memory) does with them is the subject."""
    r = kview_here(*args, env={"XDG_CACHE_HOME": str(xdg)})
    assert r.returncode == 0, r.stderr
    return r


def warnings(r) -> list[str]:
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert all(line.startswith("kview: warning: ") for line in lines), r.stderr
    return lines


def leftovers(folder) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.name.endswith(".tmp")]


STATS = ("stats", FWD, "-r", "all", "-f", "json")  # several reports: one JSON document


def test_full_disk_cache_injected_at_the_write_call(tmp_path, monkeypatch):
    import polars as pl

    real = pl.DataFrame.write_parquet

    def write_parquet(self, file, **kw):  # half a file, then what polars raises on ENOSPC
        real(self, file, **kw)
        os.truncate(file, os.path.getsize(file) // 2)
        raise pl.exceptions.ComputeError("parquet: No space left on device (os error 28)")

    monkeypatch.setattr(pl.DataFrame, "write_parquet", write_parquet)
    r = later_run(*STATS, xdg=tmp_path)
    monkeypatch.undo()
    assert r.returncode == 0, r.stderr
    assert r.stdout == without_cache(*STATS)
    (w,) = warnings(r)  # once, though every frame failed to be stored
    assert f"the cache under {tmp_path / 'kview'} cannot be used" in w and "No space left on device" in w
    assert leftovers(tmp_path) == [] and list(tmp_path.rglob("*.parquet")) == []


def test_full_disk_cache_on_a_real_tiny_tmpfs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(mnt)], capture_output=True).returncode
    ):
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        r = kview(*STATS, xdg=mnt)
        assert r.returncode == 0, r.stderr
        assert r.stdout == without_cache(*STATS)
        (w,) = warnings(r)
        assert "cannot be used" in w and "No space left on device" in w
        assert leftovers(mnt) == []
        again = kview(*STATS, xdg=mnt)  # what did fit is served, and is right
        assert again.returncode == 0 and again.stdout == r.stdout
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.parametrize("how", ["file where the folder should be", "path component is a file"])
def test_cache_folder_that_cannot_be_made(how, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    xdg = tmp_path if how.startswith("file where") else blocker / "sub"
    if how.startswith("file where"):
        blocker.rename(tmp_path / "kview")
        blocker = tmp_path / "kview"
    r = later_run(*STATS, xdg=xdg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == without_cache(*STATS)
    (w,) = warnings(r)
    assert "cannot be used" in w
    assert blocker.read_text() == "not a folder"


def test_cache_folder_that_cannot_be_entered(tmp_path):
    user = as_a_user()  # root enters any folder: the child runs without that override
    (tmp_path / "kview").mkdir()
    (tmp_path / "kview").chmod(0)
    try:
        r = kview(*STATS, xdg=tmp_path, preexec=user)
        assert r.returncode == 0 and r.stdout == without_cache(*STATS)
        assert len(warnings(r)) == 1
    finally:
        (tmp_path / "kview").chmod(0o755)


def test_relative_xdg_cache_home_is_ignored(tmp_path):
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    r = kview("stats", FWD, "-f", "json", xdg="relative/cache", cwd=work, env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    assert list(work.iterdir()) == []
    assert list((home / ".cache" / "kview" / "frames").glob("*/*.parquet"))


def _edit_in_place(t, sql):
    """Change the trace through SQLite, then put size and mtime back as they were."""
    st = t.stat()
    con = sqlite3.connect(t)
    con.executescript(sql)
    con.close()
    assert t.stat().st_size == st.st_size
    os.utime(t, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (t.stat().st_size, t.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def test_same_size_same_mtime_edit_is_detected(tmp_path):
    t = tmp_path / "t.sqlite"
    shutil.copy(FWD, t)
    xdg = tmp_path / "xdg"
    # -f json: a small trace's kernel summary as a table or CSV is answered from SQLite, past the cache
    args = ("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "json")
    before = fill(*args, xdg=xdg)
    content = cache.content_fingerprint(t, t.stat().st_size)
    _edit_in_place(t, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1000;")
    assert cache.content_fingerprint(t, t.stat().st_size) != content  # not only ctime tells
    after = later_run(*args, xdg=xdg)
    assert after.returncode == 0 and after.stderr == ""
    assert after.stdout == without_cache(*args) != before.stdout


def test_same_size_same_mtime_deletion_does_not_mix_old_and_new_columns(tmp_path):
    t = tmp_path / "t.sqlite"
    shutil.copy(FWD, t)
    xdg = tmp_path / "xdg"
    fill("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "json", xdg=xdg)  # caches some columns
    _edit_in_place(t, "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 3 = 0;")
    r = later_run("kernels", t, "-f", "csv", xdg=xdg)  # needs those columns and others never cached
    assert r.returncode == 0, r.stderr
    assert r.stdout == without_cache("kernels", t, "-f", "csv")


@pytest.mark.parametrize("how", ["files copied in", "folder renamed"])
def test_entry_from_another_trace_is_never_served(how, tmp_path):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(FWD, a)
    shutil.copy(NCF, b)
    xdg = tmp_path / "xdg"
    args = ("stats", b, "-r", "cuda_gpu_kern_sum,nvtx_sum", "-f", "json")
    for t in (a, b):
        fill("stats", t, "-r", "cuda_gpu_kern_sum,nvtx_sum", xdg=xdg)
    frames = xdg / "kview" / "frames"
    entry = {(d / "source").read_text(): d for d in frames.iterdir()}
    ea, eb = entry[str(a)], entry[str(b)]
    if how == "files copied in":
        for f in ea.glob("*.parquet"):
            shutil.copy(f, eb / f.name)
    else:
        shutil.rmtree(eb)
        ea.rename(eb)
    r = later_run(*args, xdg=xdg)
    assert r.returncode == 0, r.stderr
    assert r.stdout == without_cache(*args)
    (w,) = warnings(r)
    assert "belongs to another trace" in w


def test_damaged_entry_is_rebuilt_with_one_warning(tmp_path):
    xdg = tmp_path / "xdg"
    args = ("stats", FWD, "-r", "cuda_gpu_kern_sum", "-f", "json")
    fill(*args, xdg=xdg)
    for f in (xdg / "kview" / "frames").glob("*/kernels.*.parquet"):
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    r = later_run(*args, xdg=xdg)
    assert r.returncode == 0 and r.stdout == without_cache(*args)
    (w,) = warnings(r)
    assert "damaged cache entry" in w
    assert later_run(*args, xdg=xdg).stderr == ""  # rewritten whole


def test_json_trace_cache_is_keyed_by_content(tmp_path):
    xdg = tmp_path / "xdg"
    t = tmp_path / "t.json.gz"
    shutil.copy(JSON, t)
    args = ("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "csv")
    first = fill(*args, xdg=xdg)
    st = t.stat()
    shutil.copy(SAMPLES / "lm-small_ctx256_train_torch.json.gz", t)
    os.utime(t, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = later_run(*args, xdg=xdg)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout == without_cache(*args) != first.stdout


def test_temporaries_of_killed_runs_are_removed_and_none_are_left(tmp_path):
    xdg = tmp_path / "xdg"
    args = ("stats", FWD, "-r", "cuda_gpu_kern_sum", "-f", "json")
    fill(*args, xdg=xdg)
    (entry,) = (xdg / "kview" / "frames").iterdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = entry / f".kernels.start.parquet.kview-{dead}.tmp"
    stale.write_bytes(b"half a file")
    assert later_run("stats", FWD, "-r", "nvtx_sum", xdg=xdg).returncode == 0  # stores new frames
    assert leftovers(xdg) == []


@pytest.mark.parametrize("what", ["folder", "fifo", "link to /dev/zero", "dangling link", "file as entry folder"])
def test_a_non_file_in_place_of_a_cache_file_costs_that_entry_only(what, tmp_path):
    """A folder (or FIFO, or link) where a cache file should be: one warning, the same answer,
    and the next run uses the cache again without a word (it no longer turns the cache off)."""
    xdg = tmp_path / "xdg"
    t = tmp_path / "t.sqlite"
    shutil.copy(FWD, t)
    args = ("stats", t, "-r", "cuda_gpu_kern_sum", "-f", "json")
    fill(*args, xdg=xdg)
    (entry,) = (xdg / "kview" / "frames").iterdir()
    target = entry / "report.cuda_gpu_kern_sum.parquet"
    if what == "file as entry folder":
        shutil.rmtree(entry)
        entry.write_text("x")
    else:
        target.unlink()
        if what == "folder":
            (target / "inner").mkdir(parents=True)
        elif what == "fifo":
            os.mkfifo(target)
        elif what == "link to /dev/zero":
            target.symlink_to("/dev/zero")
        else:
            target.symlink_to(tmp_path / "nowhere")
    r = later_run(*args, xdg=xdg)
    assert r.returncode == 0 and r.stdout == without_cache(*args)
    assert len(warnings(r)) <= 1
    assert "cannot be used" not in r.stderr
    again = later_run(*args, xdg=xdg)
    assert again.returncode == 0 and again.stdout == r.stdout and again.stderr == ""
    assert target.is_file() and not target.is_symlink()


def test_a_file_that_does_not_verify_is_dropped_and_rebuilt(tmp_path):
    """A flip inside the Parquet bytes that Parquet itself would read as other numbers: the
    checksum catches it before a byte is decoded."""
    xdg = tmp_path / "xdg"
    args = ("stats", FWD, "-r", "cuda_gpu_kern_sum", "-f", "json")
    fill(*args, xdg=xdg)
    (f,) = (xdg / "kview" / "frames").glob("*/report.cuda_gpu_kern_sum.parquet")
    data = bytearray(f.read_bytes())
    data[len(data) // 3] ^= 0x01
    f.write_bytes(bytes(data))
    r = later_run(*args, xdg=xdg)
    assert r.returncode == 0 and r.stdout == without_cache(*args)
    (w,) = warnings(r)
    assert "damaged cache entry" in w
    assert later_run(*args, xdg=xdg).stderr == ""
