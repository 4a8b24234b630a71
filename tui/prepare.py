"""The tables of a large trace that go through every NVTX range, and the documents made of
them, made in a worker process.

Attribution, the NVTX tree, the Timeline's range rows, the phases and the steps each read
every range of the trace (5.7 million with their labels on the dense 1.1M-kernel trace: a
peak of 4 GB or more while they are made). The explorer makes them in a spawned worker
process, which writes them (each as its codec's frames) into a temporary folder and ends; the
explorer reads them back into the trace's store, so its own memory holds what the views show
and never the ranges they were made from, and a worker killed for memory does not take the
session with it. The worker computes exactly what the explorer would have (the same derived
tables on the same file; with the cache in use they land in the frame cache as well). A trace
whose tables are already in the frame cache, a small trace, or a worker that failed: the
explorer makes or reads them itself, as it always did. The documents' tables (Overview,
Efficiency, Launches, Layers) come after the range tables, from the same worker, so the views of
the range tables are shown while they are made.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile

from kview.analysis import nvtx_ranges
from kview.analysis.nvtx_tree import paths_and_windows
from kview.analysis.ranks import _start_resource_tracker
from kview.analysis.timeline import nvtx_row_table
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


# the documents' tables it makes next, of the range tables it holds
DOCUMENTS = (
    "documents.layers",
    "documents.efficiency",
    "documents.launches",
    "documents.critical_path",
    "overview",
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


def _let_go(trace: Trace) -> None:
    """In the worker, once the range tables are written: what the documents' tables do not read
    goes (the NVTX ranges, names and nesting: gigabytes at a million kernels; the NVTX tree's
    and the Timeline's range rows, 0.5 GB on dense_x25)."""
    nvtx_ranges.release(trace)
    trace.store.drop(paths_and_windows, nvtx_row_table)


class Worker:
    """The worker process making a large trace's tables: the range tables first (it says so
    on a pipe, and the views that need them go on), then the documents' (the Overview,
    Efficiency, Launches and Layers views wait for those), so the explorer's own process never
    makes them: their transients (the critical path of every step, every runtime call joined
    to its ops) end with the worker, and the views of the range tables are shown meanwhile."""

    def __init__(self, trace: Trace, use_cache: bool):
        _start_resource_tracker()
        ctx = multiprocessing.get_context("spawn")  # polars' thread pool does not survive a fork
        self.trace = trace
        self.folder = tempfile.TemporaryDirectory(prefix="kview-tables-")
        self.said, says = ctx.Pipe(duplex=False)
        # daemonic: ended by multiprocessing's exit handler when the explorer leaves first
        self.process = ctx.Process(
            target=make_tables,
            args=(str(trace.path), TABLES, use_cache, self.folder.name, True, DOCUMENTS, says, _let_go),
            daemon=True,
        )
        self.process.start()
        says.close()  # the worker's end: a worker that ends without saying closes the pipe

    def tables(self) -> bool:
        """Wait for the range tables and put them in the trace's store; False (nothing put) when
        the worker failed before making them."""
        try:
            made = self.said.recv()
        except EOFError:
            made = False
        if made:
            self.trace.store.read_made(TABLES, self.folder.name)
        return bool(made)

    def documents(self) -> bool:
        """Wait for the documents' tables and put them in the trace's store; False (nothing put)
        when the worker failed."""
        self.process.join()
        try:
            if self.process.exitcode != 0:
                return False
            self.trace.store.read_made(DOCUMENTS, self.folder.name)
            return True
        finally:
            self.folder.cleanup()
