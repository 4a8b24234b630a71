"""The memory timeline of what `kview memory` and the Memory view are given, whichever its source:
an allocator snapshot (memory_timeline), or a trace's own memory events (trace_memory)."""

from __future__ import annotations

import os

import polars as pl

from kview.analysis import memory_timeline as mt
from kview.analysis import trace_memory
from kview.errors import TraceError
from kview.io import snapshot_pickle
from kview.io.paths import named
from kview.trace import open_trace


def open_memory(path: str | os.PathLike, device: int | None = None, use_cache: bool = True) -> mt.MemoryTimeline:
    """The timeline of a snapshot file, or of the snapshot beside a trace (`open_snapshot`); a
    trace without one gives the timeline of its own memory events (trace_memory)."""
    p = named(path)
    beside = snapshot_pickle.memory_name(p)
    if p.name.endswith(mt.TRACE_SUFFIXES) and p.is_file() and not beside.exists():
        tl = trace_memory.timeline(open_trace(p, use_cache=use_cache), device)
        if tl is None:
            raise TraceError(
                p,
                f"has no allocator history beside it ({beside.name}) and no memory events of its own: record "
                "one with `kview capture --memory`, torch.profiler(profile_memory=True) or nsys "
                "--cuda-memory-usage=true",
            )
        return tl
    return mt.timeline(mt.open_snapshot(path), device, use_cache)


def summary(tl: mt.MemoryTimeline) -> list[tuple[str, str]]:
    """Facts of the timeline as (name, value) rows."""
    return mt.summary(tl) if tl.source == mt.SNAPSHOT else trace_memory.summary(tl)


def summary_data(tl: mt.MemoryTimeline) -> pl.DataFrame:
    """The facts of `summary` as one row of numbers for the data formats."""
    return mt.summary_data(tl) if tl.source == mt.SNAPSHOT else trace_memory.summary_data(tl)
