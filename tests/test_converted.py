"""Traces opened through a copy in the cache: `.sqlite.xz` / `.sqlite.gz` decompressed once,
`.nsys-rep` exported by the local nsys (here: the one line that says how, without nsys)."""

from __future__ import annotations

import gzip
import shutil

from kview.cli import main
from kview.io.cache import cache_root

from conftest import FIXTURES, LM_TRACES

SAMPLE = next(p for p in LM_TRACES if p.name == "lm-small_ctx256_train_nsys.sqlite")
GOLDEN = SAMPLE.with_name(f"{SAMPLE.stem}_cuda_gpu_kern_sum.csv")
VECADD_XZ = FIXTURES / "nsys" / "vecadd_nsys2025.5.sqlite.xz"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_gzipped_export_opens_as_the_export_copied_into_the_cache(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "in"
    folder.mkdir()
    packed = folder / "t.sqlite.gz"
    with open(SAMPLE, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst)
    rc, out, err = _run(capsys, "stats", str(packed), "-r", "cuda_gpu_kern_sum", "-f", "csv")
    assert rc == 0 and out == GOLDEN.read_text()
    assert "decompressing" in err and err.count("\n") == 1
    assert sorted(p.name for p in folder.iterdir()) == ["t.sqlite.gz"]  # nothing beside the input
    (copy,) = (cache_root() / "converted").glob("*/t.sqlite")
    # the second open reads the verified copy, silently
    rc, out, err = _run(capsys, "stats", str(packed), "-r", "cuda_gpu_kern_sum", "-f", "csv")
    assert rc == 0 and out == GOLDEN.read_text() and err == ""
    # a damaged copy is never served: it is made again
    with open(copy, "r+b") as f:
        f.seek(100)
        f.write(b"\xff" * 64)
    rc, out, err = _run(capsys, "stats", str(packed), "-r", "cuda_gpu_kern_sum", "-f", "csv")
    assert rc == 0 and out == GOLDEN.read_text() and "decompressing" in err


def test_an_xz_export_opens_and_an_edited_one_is_not_served_stale(capsys, tmp_path, monkeypatch):
    import lzma
    import sqlite3

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    plain = tmp_path / "vecadd.sqlite"
    with lzma.open(VECADD_XZ) as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(plain) as db:
        (kernels,) = db.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    packed = tmp_path / "v.sqlite.xz"
    shutil.copy(VECADD_XZ, packed)
    rc, out, _ = _run(capsys, "kernels", str(packed), "-f", "csv", "--filter", "-cat:memcpy -cat:memset")
    assert rc == 0 and out.count("\n") - 1 == kernels > 0
    # the same name, other content: a new copy, not the old one
    with sqlite3.connect(plain) as db:
        db.execute(
            "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid IN (SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)"
        )
    with open(plain, "rb") as src, lzma.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    rc, out, _ = _run(capsys, "kernels", str(packed), "-f", "csv", "--filter", "-cat:memcpy -cat:memset")
    assert rc == 0 and out.count("\n") - 1 == kernels - 1


def test_a_report_without_nsys_is_one_line_with_the_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nsys anywhere
    report = tmp_path / "my run.nsys-rep"
    report.write_bytes(b"not opened without nsys")
    for argv in (["kernels", str(report)], ["stats", str(report)], [str(report)]):
        rc, out, err = _run(capsys, *argv)
        assert rc == 2 and out == "" and err.count("\n") == 1, argv
        assert f"nsys export --type sqlite --output '{tmp_path}/my run.sqlite' '{report}'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my run.nsys-rep"]
