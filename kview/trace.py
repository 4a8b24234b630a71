"""The normalized trace model: one object per opened trace, frames loaded on demand.

Each accessor loads only the columns it needs, once, and keeps the frame. Reports, analyses
and views ask this object, never the file. A parquet cache of the frames (kview.cache) makes
a second open of a large trace cheap.
"""
from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path

import polars as pl

from . import nsys_reader as nr
from .errors import TraceError
from .sqlite_source import SqliteSource, check_sqlite_file


class Trace:
    """An Nsight Systems export (or a kview capture in the same schema)."""

    def __init__(self, path: str | os.PathLike, use_cache: bool = True):
        self.path = Path(path).expanduser().absolute()
        self.src = SqliteSource(self.path)
        nr.check_nsys(self.src)
        self.use_cache = use_cache
        self._frames: dict[str, pl.DataFrame] = {}

    # -- facts -------------------------------------------------------------
    @cached_property
    def metadata(self) -> dict[str, str]:
        return nr.metadata(self.src)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def stem(self) -> str:
        return self.path.stem

    def has(self, table: str) -> bool:
        return self.src.has(table)

    # -- frames --------------------------------------------------------------
    def _get(self, key: str, load):
        if key not in self._frames:
            frame = None
            if self.use_cache:
                from . import cache

                frame = cache.load(self.path, key)
            if frame is None:
                frame = load()
                if self.use_cache:
                    from . import cache

                    cache.store(self.path, key, frame)
            self._frames[key] = frame
        return self._frames[key]

    @property
    def strings(self) -> pl.DataFrame:
        return self._get("strings", lambda: nr.strings(self.src))

    @property
    def kernels(self) -> pl.DataFrame:
        return self._get("kernels", lambda: nr.kernels(self.src))

    @property
    def runtime(self) -> pl.DataFrame:
        return self._get("runtime", lambda: nr.runtime(self.src))

    @property
    def memcpy(self) -> pl.DataFrame:
        return self._get("memcpy", lambda: nr.memcpy(self.src))

    @property
    def memset(self) -> pl.DataFrame:
        return self._get("memset", lambda: nr.memset(self.src))

    @property
    def osrt(self) -> pl.DataFrame:
        return self._get("osrt", lambda: nr.osrt(self.src))

    @property
    def nvtx_events(self) -> pl.DataFrame:
        return self._get("nvtx_events", lambda: nr.nvtx_events(self.src))

    @cached_property
    def nvtx_max_timestamp(self) -> int | None:
        return nr.nvtx_max_timestamp(self.src)

    @cached_property
    def memcpy_kind_labels(self) -> dict[int, str]:
        return nr.memcpy_kind_labels(self.src)

    @property
    def threads(self) -> pl.DataFrame:
        return self._get("threads", lambda: nr.threads(self.src))

    @property
    def processes(self) -> pl.DataFrame:
        return self._get("processes", lambda: nr.processes(self.src))

    @property
    def devices(self) -> pl.DataFrame:
        return self._get("devices", lambda: nr.devices(self.src))

    # -- helpers -------------------------------------------------------------
    def with_strings(self, df: pl.DataFrame, id_col: str, out_col: str) -> pl.DataFrame:
        """Replace a StringIds id column by its text (left join, so unknown ids give null)."""
        s = self.strings.rename({"id": id_col, "value": out_col})
        return df.join(s, on=id_col, how="left")


def open_trace(path: str | os.PathLike, use_cache: bool = True) -> Trace:
    """Open any supported trace; raises TraceError with a one-line reason otherwise."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceError(p, "no such file")
    if p.is_dir():
        raise TraceError(p, "is a folder, not a trace file")
    check_sqlite_file(p)
    return Trace(p, use_cache=use_cache)
