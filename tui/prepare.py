"""The tables of a large trace that go through every NVTX range, made in a worker process.

Attribution, the NVTX tree, the Timeline's range rows, the phases and the steps each read
every range of the trace (5.7 million with their labels on the dense 1.1M-kernel trace: a
peak of 4 GB or more while they are made). The explorer makes them in a spawned worker
process, which writes them (Parquet) into a temporary folder and ends; the explorer reads
them back into the trace's derived tables, so its own memory holds what the views show and
never the ranges they were made from, and a worker killed for memory does not take the
session with it. The worker computes exactly what the explorer would have (the same derived
functions on the same file; with the cache in use they land in the frame cache as well). A
trace whose tables are already in the frame cache, a small trace, or a worker that failed:
the explorer makes or reads them itself, as it always did.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from kview.trace import Trace

# traces of this size or more are prepared in a worker process (dense_x5: 212 MiB, 1.1M ranges)
PREPARE_BYTES = 128 << 20


def tables() -> dict[str, Callable[[Trace], Any]]:
    """The derived tables the worker makes, by file name, in the order it makes them
    (attribution first: the rest reuse its nesting and labels)."""
    from kview.analysis.attribution import attribute
    from kview.analysis.compare import phase_spans
    from kview.analysis.cpu_ops import holdings_table
    from kview.analysis.gpu_time import launch_timeline
    from kview.analysis.layers import phase_times
    from kview.analysis.nvtx_tree import paths_and_windows
    from kview.analysis.steps import step_instances
    from kview.analysis.timeline import nvtx_row_table

    return {
        "attribution": attribute,
        "nvtx_tree": paths_and_windows,
        "timeline_nvtx": nvtx_row_table,
        "phase_times": phase_times,
        "phase_spans": phase_spans,
        "holdings": holdings_table,
        "steps": step_instances,
        "launch_timeline": launch_timeline,
    }


# the frame-cache keys of the tables above: all there, the explorer reads them as it goes
CACHE_KEYS = (
    "attribution",
    "nvtx_tree.paths",
    "nvtx_tree.windows",
    "timeline.nvtx_rows",
    "timeline.nvtx_names",
    "layers.phase_times",
    "layers.phase_spans",
    "cpu_ops.holdings",
    "iterations.steps1",
    "gpu_time.launch_timeline",
)


def large(trace: Trace) -> bool:
    try:
        return os.path.getsize(trace.path) >= PREPARE_BYTES
    except OSError:
        return False


def worth_it(trace: Trace, use_cache: bool) -> bool:
    """Whether to make the tables in a worker: a large trace whose tables are not all kept in
    the frame cache yet."""
    from kview.io import cache

    return large(trace) and not (use_cache and cache.has(Path(trace.path), CACHE_KEYS))


def prepare(trace: Trace, use_cache: bool) -> bool:
    """Make the tables in a worker process and put them in `trace`'s derived tables; False
    (nothing put) when the worker failed."""
    from kview.analysis.ranks import _start_resource_tracker

    _start_resource_tracker()
    ctx = multiprocessing.get_context("spawn")  # polars' thread pool does not survive a fork
    with tempfile.TemporaryDirectory(prefix="kview-tables-") as out:
        # daemonic: ended by multiprocessing's exit handler when the explorer leaves first
        worker = ctx.Process(target=make, args=(str(trace.path), use_cache, out), daemon=True)
        worker.start()
        worker.join()
        if worker.exitcode != 0:
            return False
        made: dict[tuple, Any] = {}
        for name, table in tables().items():
            n, is_tuple = map(int, Path(out, f"{name}.n").read_text().split())
            frames = tuple(pl.read_parquet(Path(out, f"{name}.{j}.parquet")) for j in range(n))
            made[(table,)] = frames if is_tuple else frames[0]
    for key, value in made.items():
        trace.derived_tables.setdefault(key, value)
    return True


def make(path: str, use_cache: bool, out: str) -> None:
    """In the worker: open the trace and write each table's frames to `out`."""
    from kview.analysis.ranks import _silent
    from kview.trace import open_trace

    _silent()  # the explorer owns the terminal
    trace = open_trace(path, use_cache=use_cache)
    for name, table in tables().items():
        value = table(trace)
        frames = value if isinstance(value, tuple) else (value,)
        for j, frame in enumerate(frames):
            frame.write_parquet(Path(out, f"{name}.{j}.parquet"))
        Path(out, f"{name}.n").write_text(f"{len(frames)} {int(isinstance(value, tuple))}")
