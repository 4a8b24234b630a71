"""Parquet cache of normalized frames, under the user cache dir, never beside the trace.

Entries are keyed by the trace's absolute path, size and mtime, so an edited or replaced
trace gets a new key. A missing, unreadable or half-written entry is rebuilt from the trace;
a cache dir that cannot be written is silently not used.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import polars as pl

from kview import __version__

FORMAT_VERSION = "1"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME")
    if base:
        return Path(base) / "kview"
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kview", appauthor=False))


def _entry_dir(trace_path: Path) -> Path | None:
    try:
        st = trace_path.stat()
    except OSError:
        return None
    ident = f"{trace_path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{__version__}|{FORMAT_VERSION}"
    digest = hashlib.sha256(ident.encode()).hexdigest()[:24]
    return cache_root() / "frames" / digest


def load(trace_path: Path, key: str) -> pl.DataFrame | None:
    d = _entry_dir(trace_path)
    if d is None:
        return None
    f = d / f"{key}.parquet"
    if not f.exists():
        return None
    try:
        return pl.read_parquet(f)
    except Exception:  # corrupt or truncated entry: drop it and rebuild from the trace
        try:
            f.unlink()
        except OSError:
            pass
        return None


def _new_entry(d: Path, trace_path: Path) -> None:
    """Create entry `d` and drop older entries of the same trace (an edited or re-exported
    trace gets a new key; its old frames would otherwise stay forever)."""
    source = str(trace_path.resolve())
    for other in d.parent.iterdir() if d.parent.exists() else []:
        try:
            if other != d and (other / "source").read_text() == source:
                shutil.rmtree(other, ignore_errors=True)
        except OSError:
            continue
    d.mkdir(parents=True, exist_ok=True)
    (d / "source").write_text(source)


def store(trace_path: Path, key: str, frame: pl.DataFrame) -> None:
    d = _entry_dir(trace_path)
    if d is None:
        return
    try:
        if not d.exists():
            _new_entry(d, trace_path)
        tmp = d / f".{key}.{os.getpid()}.tmp"
        frame.write_parquet(tmp, compression="lz4", statistics=False)
        os.replace(tmp, d / f"{key}.parquet")
    except OSError:
        return


def clear() -> None:
    shutil.rmtree(cache_root() / "frames", ignore_errors=True)
