"""Traces kview opens through a copy in its cache: an Nsight Systems report (`.nsys-rep`)
exported to SQLite by the local `nsys`, and a compressed SQLite export (`.sqlite.xz`,
`.sqlite.gz`) decompressed. The copy is made once, never beside the input (which may sit in a
read-only folder), and is keyed by the input's fingerprint (path, size, times, inode, sampled
bytes), so an edited or replaced input makes a new copy instead of serving a stale one. Each
copy is written to a temporary and renamed into place, then recorded with its own size and
fingerprint: a copy that no longer matches its record (damaged, truncated) is made again.
"""

from __future__ import annotations

import gzip
import json
import lzma
import os
import shlex
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

from kview import atomic_write
from kview.errors import TraceError, shown

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
XZ_MAGIC = b"\xfd7zXZ\x00"
GZ_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


def export_command(report: Path) -> str:
    """The command that exports `report` to SQLite beside it, as a user would type it."""
    out = report.with_suffix(".sqlite")
    return f"nsys export --type sqlite --output {shlex.quote(str(out))} {shlex.quote(str(report))}"


def _gz_holds_sqlite(p: Path) -> bool:
    try:
        with gzip.open(p, "rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except (OSError, EOFError, lzma.LZMAError, zlib.error):
        return False  # not for this module: the JSON reader names what is wrong with it


def kind_of(p: Path, head: bytes) -> str | None:
    """'report', 'xz' or 'gz' (holding SQLite) when `p` opens through a copy, else None."""
    if p.suffix.lower() in REPORT_SUFFIXES:
        return "report"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(GZ_MAGIC) and _gz_holds_sqlite(p):
        return "gz"
    return None


def _copy_name(p: Path) -> str:
    """The copy keeps the input's name as a trace's name (`run.nsys-rep` -> `run.sqlite`,
    `t.sqlite.xz` -> `t.sqlite`), so the views and file names it leads to read the same."""
    name = p.name
    for suffix in (".xz", ".gz", *REPORT_SUFFIXES):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name if name.lower().endswith((".sqlite", ".json")) else f"{name}.sqlite"


def _record(copy: Path) -> dict:
    # deferred: the frame cache imports polars, which a quick answer (kview/quick_stats.py) never loads
    from kview.io.cache import content_fingerprint

    size = copy.stat().st_size
    return {"size": size, "fingerprint": content_fingerprint(copy, size)}


def _verified(copy: Path, record: Path) -> bool:
    try:
        return json.loads(record.read_text()) == _record(copy)
    except (OSError, ValueError):
        return False


def _say(text: str) -> None:
    try:
        print(f"kview: {text}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def copy_of(p: Path, kind: str) -> Path:
    """The SQLite (or JSON) file `p` opens as: its verified copy in the cache, made now if
    there is none. TraceError when it cannot be made (no nsys, a failed export, damage)."""
    # deferred: the frame cache imports polars, which a quick answer (kview/quick_stats.py) never loads
    from kview.io.cache import cache_root, fingerprint

    if kind == "report" and shutil.which("nsys") is None:
        raise TraceError(
            p,
            "is an Nsight Systems report, and nsys is not on PATH to export it; export it where nsys is "
            f"installed with `{export_command(p)}` and open the .sqlite",
        )
    fp = fingerprint(p)
    if fp is None:
        raise TraceError(p, "cannot be read")
    folder = cache_root() / "converted" / fp[1][:32]
    copy = folder / _copy_name(p)
    record = folder / f"{copy.name}.ok"
    if copy.is_file() and _verified(copy, record):
        return copy
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in (copy, record):
            stale.unlink(missing_ok=True)
    except OSError as e:
        raise TraceError(p, f"cannot be copied into the cache {folder} ({e.strerror or e})") from None
    # the temporary ends in the copy's own suffix (nsys export adds `.sqlite` to any other name)
    tmp = folder / f".partial-{os.getpid()}-{copy.name}"
    atomic_write._pending.add(str(tmp))
    try:
        if kind == "report":
            _export(p, tmp)
        else:
            _decompress(p, tmp, lzma.open if kind == "xz" else gzip.open)
        os.replace(tmp, copy)
        atomic_write.write_bytes(record, json.dumps(_record(copy)).encode())
    except OSError as e:
        raise TraceError(p, f"cannot be copied into the cache {folder} ({e.strerror or e})") from None
    finally:
        atomic_write._pending.discard(str(tmp))
        tmp.unlink(missing_ok=True)
    return copy


def _decompress(p: Path, tmp: Path, opener) -> None:
    """`p` decompressed into `tmp`, a MiB at a time."""
    _say(f"{shown(p.name)}: decompressing into the cache (once; kept in {shown(tmp.parent)})")
    try:
        with opener(p, "rb") as src, open(tmp, "xb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(p, f"is damaged: it does not decompress ({str(e).splitlines()[0][:120]})") from None


def _export(p: Path, tmp: Path) -> None:
    """`nsys export --type sqlite` of `p` into `tmp`, its progress on stderr as nsys prints it."""
    cmd = ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(tmp), str(p)]
    _say(f"{shown(p.name)}: exporting to SQLite with nsys (once; kept in {shown(tmp.parent)})")
    tail = b""
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        raise TraceError(
            p, f"nsys cannot be started ({e.strerror or e}); export it with `{export_command(p)}`"
        ) from None
    assert proc.stdout is not None
    out = getattr(sys.stderr, "buffer", None)
    try:
        while chunk := proc.stdout.read1(4096):  # type: ignore[attr-defined]
            tail = (tail + chunk)[-2000:]
            if out is not None:
                out.write(chunk)
                out.flush()
        code = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if code != 0 or not tmp.is_file():
        lines = [ln.strip() for ln in tail.decode("utf-8", "replace").replace("\r", "\n").splitlines() if ln.strip()]
        last = shown(lines[-1][:200]) if lines else "no output"
        raise TraceError(p, f"nsys export failed (exit {code}: {last}); the command was `{shlex.join(cmd)}`")
    with open(tmp, "rb") as f:
        if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise TraceError(p, "nsys export wrote no SQLite database")
