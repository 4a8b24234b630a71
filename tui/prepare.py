"""The tables of a large trace that go through every NVTX range, made in a worker process.

Attribution, the NVTX tree, the Timeline's range rows, the phases and the steps each read
every range of the trace (5.7 million with their labels on the dense 1.1M-kernel trace: a
peak of 4 GB or more while they are made). The explorer makes them in a spawned worker
process, which writes them (each as its codec's frames) into a temporary folder and ends; the
explorer reads them back into the trace's store, so its own memory holds what the views show
and never the ranges they were made from, and a worker killed for memory does not take the
session with it. The worker computes exactly what the explorer would have (the same derived
tables on the same file; with the cache in use they land in the frame cache as well). A trace
whose tables are already in the frame cache, a small trace, or a worker that failed: the
explorer makes or reads them itself, as it always did.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile

from kview.analysis.ranks import _start_resource_tracker
from kview.trace import Trace, make_tables

# traces of this size or more are prepared in a worker process (dense_x5: 212 MiB, 1.1M ranges)
PREPARE_BYTES = 128 << 20

# the derived tables the worker makes, by key, in the order it makes them (attribution first:
# the rest reuse its nesting and labels)
TABLES = (
    "attribution",
    "nvtx_tree",
    "timeline.nvtx",
    "layers.phase_times",
    "layers.phase_spans",
    "cpu_ops.holdings",
    "steps",
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
    return large(trace) and not (use_cache and trace.store.on_disk(TABLES))


def prepare(trace: Trace, use_cache: bool) -> bool:
    """Make the tables in a worker process and put them in `trace`'s store; False (nothing
    put) when the worker failed."""
    _start_resource_tracker()
    ctx = multiprocessing.get_context("spawn")  # polars' thread pool does not survive a fork
    with tempfile.TemporaryDirectory(prefix="kview-tables-") as out:
        # daemonic: ended by multiprocessing's exit handler when the explorer leaves first
        worker = ctx.Process(target=make_tables, args=(str(trace.path), TABLES, use_cache, out, True), daemon=True)
        worker.start()
        worker.join()
        if worker.exitcode != 0:
            return False
        trace.store.read_made(TABLES, out)
    return True
