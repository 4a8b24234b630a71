"""A trace opened through a symbolic link is checked where SQLite keeps its journal (beside the
file the link leads to), and names that start with `~`, `-` or a space, or hold a line break,
open as the file they name."""

from __future__ import annotations

import gzip
import lzma
import shutil

import pytest
from test_read_only import hot_journal, wal_pending

from kview.cli import main

from conftest import FIXTURES, SAMPLES

NCF = SAMPLES / "ncf_b1048576_train_nsys.sqlite"


@pytest.mark.parametrize("make,side", [(hot_journal, "t.sqlite-journal"), (wal_pending, "t.sqlite-wal")])
def test_a_journal_beside_a_links_target_is_seen(make, side, tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    t = make(real)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for link, target in ((elsewhere / "link.sqlite", t), (elsewhere / "relative.sqlite", "../real/t.sqlite")):
        link.symlink_to(target)
        before = t.read_bytes()
        code = main(["kernels", str(link), "-f", "csv", "--no-cache"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", err
        assert len(err.splitlines()) == 1 and side in err and "an interrupted write" in err, err
        assert t.read_bytes() == before


@pytest.mark.parametrize("name", ["~x.sqlite", "~root", " x.sqlite", "x .sqlite", "n\nx.sqlite", "-x.sqlite"])
def test_odd_names_open_as_the_file_they_name(name, tmp_path, capsys, monkeypatch):
    assert main(["kernels", str(NCF), "-f", "csv", "--no-cache"]) == 0
    expected = capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    shutil.copy(NCF, tmp_path / name)
    # `--` ends the options, as for any command: then a name may start with `-`
    code = main(["kernels", "-f", "csv", "--no-cache", "--", name])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == expected


def test_a_tilde_named_kineto_trace_and_snapshot(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = FIXTURES / "kineto" / "triton_example__triton_example.json.gz"
    (tmp_path / "~k.json").write_bytes(gzip.decompress(src.read_bytes()))
    assert main(["kernels", str(src), "-f", "csv", "--no-cache"]) == 0
    expected = capsys.readouterr().out
    assert main(["kernels", "~k.json", "-f", "csv", "--no-cache"]) == 0
    assert capsys.readouterr().out == expected
    snap = lzma.decompress((FIXTURES / "memory" / "tiny_cmd.memory.pickle.xz").read_bytes())
    (tmp_path / "a.pickle").write_bytes(snap)
    (tmp_path / "~m.pickle").write_bytes(snap)
    assert main(["memory", "a.pickle", "-f", "json"]) == 0
    expected = capsys.readouterr().out
    assert main(["memory", "~m.pickle", "-f", "json"]) == 0
    got = capsys.readouterr().out
    assert got == expected.replace('"a.pickle"', '"~m.pickle"')


def test_a_quoted_home_path_still_means_home(tmp_path, capsys, monkeypatch):
    """`"~/t.sqlite"` (quoted, so the shell left it) is the file in the home folder."""
    monkeypatch.setenv("HOME", str(tmp_path))
    shutil.copy(NCF, tmp_path / "t.sqlite")
    monkeypatch.chdir("/")
    assert main(["kernels", "~/t.sqlite", "-f", "csv", "--no-cache"]) == 0, capsys.readouterr().err
