"""What a reader gives a Trace: the frames of one trace file in kview's schema (io/schema.py).

Two implementations: `NsysSource` (io/nsys_reader.py) reads an Nsight Systems export or a
kview capture column by column; `KinetoSource` (io/kineto_reader.py) decodes a torch.profiler
JSON once into the same frames. A Trace holds one (composition), so every analysis runs on
either without knowing which.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import polars as pl


class TraceSource(Protocol):
    path: Path  # absolute
    # whether the Trace keeps this source's frames in the disk cache (column by column); a
    # source that decodes the whole file at once caches that decode itself
    persist_frames: bool

    def has(self, table: str) -> bool:
        """Whether the trace holds rows of nsys table `table` (schema.KERNEL, ...)."""
        ...

    def metadata(self) -> dict[str, str]: ...

    def origin(self) -> int:
        """Time zero of the trace's timeline, in the trace's own clock's ns (the frames are read
        in that clock; the Trace moves them to time from zero)."""
        ...

    def clock(self) -> tuple[str, int] | None:
        """(the clock the trace's times are readings of, its reading at time zero): traces of one
        run whose clocks have the same name share that clock, so their times line up; None
        where the trace does not say."""
        ...

    def read_columns(self, key: str, names: list[str], where: tuple[str, list[int]] | None = None) -> pl.DataFrame:
        """Columns `names` of logical table `key` (schema.TABLES), in the trace's order; with
        `where` (a column, its values), only the rows holding one of those values."""
        ...

    def row_count(self, key: str) -> int:
        """The rows of logical table `key` (read_columns' height), counted without reading a column."""
        ...

    def strings(self) -> pl.DataFrame:
        """(id, value) of every string the frames' *_id columns point to."""
        ...

    def string_count(self) -> int: ...

    def strings_for(self, ids: pl.Series) -> pl.DataFrame:
        """(id, value) of the strings `ids` only (for string tables too large to read whole)."""
        ...

    def nvtx_events(self) -> pl.DataFrame:
        """NVTX range and domain-create rows (schema.NVTX_COLUMNS names, `text` Categorical)."""
        ...

    def nvtx_max_timestamp(self) -> int | None: ...

    def session_ns(self) -> int | None:
        """How long the recorded session lasted from time zero (None where the trace does not say)."""
        ...

    def memcpy_kind_labels(self) -> dict[int, str]: ...

    def threads(self) -> pl.DataFrame: ...

    def processes(self) -> pl.DataFrame: ...

    def devices(self) -> pl.DataFrame: ...

    def close(self) -> None: ...
