"""`-o` never destroys an input: with or without --force it is refused over every file the
command reads (a trace, the snapshot beside it, a rank trace inside a folder, through a
symbolic or a hard link) and over anything that is not a regular file, except the nodes one
writes into (`/dev/null`, a FIFO, `/dev/stdout`), which are written into and never replaced.
`-o -` is stdout, `-o ''` a usage error."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kview.cli import main

from conftest import FIXTURES, SAMPLES
from in_process import kview_here

LM_FWD = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
NCF = SAMPLES / "ncf_b1048576_train_nsys.sqlite"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _refused(capsys, argv: list[str], victim: Path, words: str = "is an input") -> None:
    before = (_digest(victim), os.stat(victim).st_ino)
    code = main([*argv, "--no-cache"])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and words in err, err
    assert (_digest(victim), os.stat(victim).st_ino) == before  # the same file, the same bytes


@pytest.fixture
def run(tmp_path):
    """Two rank traces in a folder."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copy(LM_FWD, folder / "rank0.sqlite")
    shutil.copy(LM_FWD, folder / "rank1.sqlite")
    return folder


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_the_trace_itself_by_name_symlink_and_hard_link(tmp_path, capsys, force):
    trace = tmp_path / "t.sqlite"
    shutil.copy(LM_FWD, trace)
    (tmp_path / "sym.csv").symlink_to(trace)
    os.link(trace, tmp_path / "hard.csv")
    for out in ("t.sqlite", "sym.csv", "hard.csv"):
        _refused(capsys, ["kernels", str(trace), "-f", "csv", "-o", str(tmp_path / out), *force], trace)
    kineto = tmp_path / "k.json.gz"  # a torch.profiler trace, as it is read (compressed)
    shutil.copy(FIXTURES / "kineto" / "triton_example__triton_example.json.gz", kineto)
    _refused(capsys, ["kernels", str(kineto), "-f", "json", "-o", str(kineto), *force], kineto)
    # stats writes PREFIX_<report>.<ext>: one of them a hard link to the trace
    os.link(trace, tmp_path / "p_cuda_gpu_kern_sum.csv")
    _refused(
        capsys, ["stats", str(trace), "-r", "cuda_gpu_kern_sum", "-f", "csv", "-o", str(tmp_path / "p"), *force], trace
    )


@pytest.mark.parametrize("force", [[], ["--force"]])
def test_diff_and_compare_protect_every_trace(tmp_path, capsys, force):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    shutil.copy(LM_FWD, a)
    shutil.copy(NCF, b)
    _refused(capsys, ["diff", str(a), str(b), "-o", str(b), *force], b)
    _refused(capsys, ["compare", str(a), str(b), "-o", str(b), *force], b)


@pytest.mark.parametrize("command", ["ranks", "timeline", "iterations", "compare"])
def test_a_rank_trace_inside_the_folder(run, capsys, command):
    ranks = ["--ranks"] if command == "compare" else []
    table = ["--table", "ranks"] if command == "ranks" else ["--table", "iterations"] if command == "iterations" else []
    for force in ([], ["--force"]):
        victim = run / "rank1.sqlite"
        _refused(
            capsys,
            [command, str(run), *ranks, *table, "-f", "csv" if table else "md", "-o", str(victim), *force],
            victim,
        )


@pytest.fixture
def beside(tmp_path):
    """A trace and the allocator history `kview capture --memory` wrote beside it."""
    for name in ("tiny_train.sqlite", "tiny_train.memory.pickle"):
        (tmp_path / name).write_bytes(lzma.decompress((FIXTURES / "memory" / f"{name}.xz").read_bytes()))
    return tmp_path / "tiny_train.sqlite", tmp_path / "tiny_train.memory.pickle"


def test_memory_protects_the_snapshot_and_the_trace_beside_it(beside, capsys):
    trace, snap = beside
    for force in ([], ["--force"]):
        _refused(capsys, ["memory", str(trace), "-f", "md", "-o", str(snap), *force], snap)
        _refused(capsys, ["memory", str(snap), "-f", "md", "-o", str(trace), *force], trace)


def test_nodes_that_are_no_file_are_refused(tmp_path, capsys):
    trace = tmp_path / "t.sqlite"
    shutil.copy(LM_FWD, trace)
    sock_path = tmp_path / "s.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(sock_path))
    try:
        (tmp_path / "to_socket").symlink_to(sock_path)
        for out in (sock_path, tmp_path / "to_socket"):
            code = main(["kernels", str(trace), "-f", "csv", "-o", str(out), "--force", "--no-cache"])
            err = capsys.readouterr().err
            assert code == 2 and "a socket" in err and len(err.splitlines()) == 1, err
            assert stat.S_ISSOCK(os.stat(out).st_mode)
    finally:
        sock.close()
    folder = tmp_path / "folder"
    folder.mkdir()
    assert main(["kernels", str(trace), "-o", str(folder), "--force", "--no-cache"]) == 2
    assert "a folder" in capsys.readouterr().err and folder.is_dir()


# As root a regression would replace the machine's own /dev/null or /dev/stdout: there the
# tests name them through links of their own (the same rule: the node a link leads to)
AS_ROOT = os.geteuid() == 0


def test_dev_null_and_a_link_to_it_are_written_into(tmp_path, capsys):
    trace = tmp_path / "t.sqlite"
    shutil.copy(LM_FWD, trace)
    link = tmp_path / "null.csv"
    link.symlink_to(os.devnull)
    direct = [] if AS_ROOT else [(os.devnull, []), (os.devnull, ["--force"])]
    for out, force in [*direct, (str(link), []), (str(link), ["--force"])]:
        assert main(["kernels", str(trace), "-f", "csv", "-o", out, *force, "--no-cache"]) == 0, capsys.readouterr()
        capsys.readouterr()
        assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    assert link.is_symlink() and os.readlink(link) == os.devnull


def test_a_fifo_is_written_into(tmp_path, capsys):
    trace = tmp_path / "t.sqlite"
    shutil.copy(LM_FWD, trace)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    code = main(["kernels", str(trace), "-f", "csv", "-o", str(fifo), "--force", "--no-cache"])
    reader.join(timeout=120)
    assert code == 0, capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO, not a file in its place
    assert main(["kernels", str(trace), "-f", "csv", "--no-cache"]) == 0
    assert got[0].decode() == capsys.readouterr().out  # the document, whole, through the pipe


def _kview(args: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kview.cli", *args], capture_output=True, **kw)


def test_dev_stdout_and_dash_are_stdout_and_empty_is_a_usage_error(tmp_path):
    trace = tmp_path / "t.sqlite"
    shutil.copy(LM_FWD, trace)
    plain = kview_here("kernels", trace, "-f", "csv", "--no-cache")  # the document, from the test's process
    assert plain.returncode == 0 and plain.stdout
    document = plain.stdout.encode()
    stdout = tmp_path / "stdout"  # as /dev/stdout is: a link to this process's descriptor 1
    stdout.symlink_to("/proc/self/fd/1")
    names = [str(stdout), "-"] + ([] if AS_ROOT else ["/dev/stdout", "/proc/self/fd/1"])
    for out in names:
        r = _kview(["kernels", str(trace), "-f", "csv", "-o", out, "--force", "--no-cache"], cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert r.stdout == document, out
    # stdout redirected to a file: the link writes into that file, and stays a link
    target = tmp_path / "redirected.csv"
    for out in names[:1] + names[2:3]:
        with open(target, "wb") as f:
            r = subprocess.run(
                [sys.executable, "-m", "kview.cli", "kernels", str(trace), "-f", "csv", "-o", out, "--no-cache"],
                stdout=f,
                stderr=subprocess.PIPE,
            )
        assert r.returncode == 0, r.stderr
        assert target.read_bytes() == document and Path(out).is_symlink()
    assert not (tmp_path / "-").exists()
    r = kview_here("kernels", trace, "-o", "", "--no-cache")
    assert r.returncode == 2 and r.stdout == "" and len(r.stderr.splitlines()) == 1, r.stderr
