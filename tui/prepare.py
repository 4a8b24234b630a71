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
explorer makes or reads them itself, as it always did. The worker makes them in batches, each
read back as soon as it is written (but for READ_WHEN_ASKED: read when a view asks, or in part),
so the Kernels view shows while the range tables are made. The folder stays until the explorer
leaves: what the explorer lets go, or has not read yet, is read from there. The views of the
range tables hold what they make of them from once the worker's last batch is written (the NVTX
view fetches last; the Timeline makes its range rows then): they do not add to the worker's
peaks.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import weakref

from kview.analysis import nvtx_ranges
from kview.analysis.attribution import GPU_OP_TABLES, LAUNCH_COLUMNS, attribute, gpu_ops
from kview.analysis.nvtx_tree import paths_and_windows
from kview.analysis.ranks import _start_resource_tracker
from kview.analysis.timeline import nvtx_row_table
from kview.documents.kernels import kernel_groups
from kview.io.sqlite_source import return_freed_memory
from kview.trace import Trace, make_tables
from kview.tui import kernel_words  # declares the Kernels view's words, which the worker makes

# traces of this size or more are prepared in a worker process (dense_x5: 212 MiB, 1.1M ranges)
PREPARE_BYTES = 128 << 20

# the derived tables the worker makes, by key, in batches, each read back as soon as it is
# written: the Kernels view's (the attribution first: the rest reuse its nesting and labels;
# the words its filter line completes, of every kernel's texts, made while the worker holds them),
# the NVTX, Timeline and phase views' (the Timeline's rows and the NVTX tree last: they read
# no more of the labels than their short names and kinds, so the labels go before them), then
# the documents' (Overview, Efficiency, Launches, Layers, Compare, Ranks), made of the range
# tables the worker holds, and the trace's ranks (made for the Ranks tables: the Compare view
# asks how many ranks a trace holds, which the explorer would answer from every GPU op)
BATCHES = {
    "kernels": ("attribution", "gpu_time.launch_timeline", "documents.kernel_groups", "explorer.kernel_words"),
    "ranges": ("layers.phase_times", "layers.phase_spans", "cpu_ops.holdings", "steps", "timeline.nvtx", "nvtx_tree"),
    "documents": (
        "documents.layers",
        "documents.efficiency",
        "documents.launches",
        "documents.critical_path",
        "overview",
        "documents.compare_phases",
        "documents.ranks",
        "documents.iterations",
        "ranks.units",
    ),
}
TABLES = BATCHES["kernels"] + BATCHES["ranges"]  # every table made of the NVTX ranges


def large(trace: Trace) -> bool:
    try:
        return os.path.getsize(trace.path) >= PREPARE_BYTES
    except OSError:
        return False


def worth_it(trace: Trace, use_cache: bool) -> bool:
    """Whether to make the tables in a worker: a large trace whose tables are not all kept in
    the frame cache yet."""
    return large(trace) and not (use_cache and trace.store.on_disk(TABLES))


# what the Timeline's rows and the NVTX tree read of the labels: made before the labels go
OF_LABELS = (nvtx_ranges.short_labels, nvtx_ranges.range_kinds, nvtx_ranges.user_codes)


# the range tables that read the ranges' labels, besides the attribution and OF_LABELS: the
# range batch's up to the steps (after which _let_go lets the labels go)
OF_NAMES = BATCHES["ranges"][: BATCHES["ranges"].index("steps") + 1]


def _before_attribution(trace: Trace) -> None:
    """In the worker, before the attribution: the tables that read the ranges' labels made
    first (held until their batch is written), so that the attribution lets the labels go as
    `kview kernels` does (`Trace.names_only_for_attribution`) rather than holding them (0.7 GB
    on dense_x25) through its peak, the worker's.

    The runtime calls' columns are read in one pass where the first of them is asked (the
    launches of the phases' GPU time): the launched ops' four and the names the Launches
    document reads (a second pass over 2.4M calls on dense_x25 was 0.5-0.7 CPU s)."""
    from kview.analysis.launches import API_COLUMNS  # the worker's only: imported then, not with the explorer
    from kview.analysis.layers import phase_instances  # the worker's only: imported then, as above

    phase_instances(trace)
    # the GPU ops first: the kernels', copies' and sets' columns they are made of (0.13 GB on
    # dense_x25) go before the runtime calls are read and the ops joined to their launches, the
    # worker's highest point, rather than with the Kernels view's batch; no table reads them again
    gpu_ops(trace)
    trace.let_go(*GPU_OP_TABLES)
    # what the trace's reads free on the C heap (SQLite's rows, Python's objects) is not reused by
    # polars, whose allocator is its own: handed back after each step here and each table made
    # (`_let_go`), it stayed through the worker's peaks (0.15-0.2 GB of it on dense_x25)
    return_freed_memory()
    if trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        trace.columns("runtime", list(dict.fromkeys([*LAUNCH_COLUMNS, *API_COLUMNS])))
    return_freed_memory()
    for key in OF_NAMES:
        trace.store.by_key(key)
        return_freed_memory()
    for table in OF_LABELS:
        table(trace)
    trace.names_only_for_attribution = True
    return_freed_memory()


def _let_go(trace: Trace, key: str) -> None:
    """In the worker, once table `key` is written, what the tables after it do not read goes (a
    table let go that is asked again is read back from what was written, or made again):

    - after the Kernels view's, the attributed table and its groups (0.3 GB on dense_x25; the
      documents read the attribution back) and the kernels' columns (where the attribution read
      them: `_before_attribution` let them go);
    - after the last range table that reads the labels (the steps), the ranges' names and
      labels (0.7 GB): the Timeline's rows and the NVTX tree read only the short names, the
      range kinds and the user ranges' codes, made first;
    - after the Timeline's range rows, those (0.15 GB);
    - after the NVTX tree, the ranges and their nesting (gigabytes at a million kernels) and
      the tree (0.35 GB), which the documents' tables do not read;
    - after the Efficiency document, the kernels' efficiency figures and the ops by layer (no
      later table reads them);
    - after the Launches document, the queue lengths over time and the idle gaps (of which the
      Overview reads only the totals by cause, kept) and the runtime calls' columns (the
      launched ops and the synchronizations are made of them by then): 0.4 GB on dense_x25,
      held through the critical path's walk, the documents' peak, until now;
    - after the Overview, the last to read them, the launches (a million rows, names included);
    - after the Compare document, its ops by category (in launch order too)."""
    if key == BATCHES["kernels"][-1]:
        trace.store.drop(attribute, kernel_groups, kernel_words.kernel_words)
        trace.let_go("kernels")
    elif key == "steps":
        for table in OF_LABELS:
            table(trace)
        trace.store.drop(nvtx_ranges.labelled_ranges, nvtx_ranges.labels)
    elif key == "timeline.nvtx":
        trace.store.drop(nvtx_row_table)
    elif key == BATCHES["ranges"][-1]:
        nvtx_ranges.release(trace)
        trace.store.drop(paths_and_windows, *OF_LABELS)
    elif key == "documents.efficiency":
        from kview.analysis.compare import ops_by_launch  # made by then: imported then, not with the explorer
        from kview.analysis.efficiency import kernel_efficiency  # made by then: imported then, as above

        trace.store.drop(kernel_efficiency, ops_by_launch)
    elif key == "documents.launches":
        from kview.analysis.launches import gap_rows, idle_totals, queue_series  # made by then: as above

        idle_totals(trace)  # all the Overview asks of the gaps, kept while they are held
        trace.store.drop(queue_series, gap_rows)
        trace.let_go("runtime")
    elif key == "documents.compare_phases":
        from kview.analysis.compare import ops_by_launch, ops_by_launch_time  # made by then: as above

        trace.store.drop(ops_by_launch, ops_by_launch_time)
    elif key == "overview":
        from kview.analysis.launches import launches  # made by then: imported then, as above

        trace.store.drop(launches)
    return_freed_memory()  # what the table's making and writing freed, before the next


# tables the explorer does not read back whole: the NVTX view reads the tree's paths without
# their texts (made from the parents' where the tree is shallow) and a path's windows only
# when the range is opened (0.3 GB of the 0.4 GB on dense_x25)
READ_IN_PART = ("nvtx_tree",)
# tables read back when a view first asks for them, not with their batch: those read in part,
# the Timeline's range rows (0.2 GB), which its view asks for once the worker's last batch is
# made (kview.tui.loading.timeline_document), each op's launch time, which the NVTX view,
# fetched last, asks for (views/base.py: View.fetched_last), and the attributed kernels and
# their groups (0.4 GB on dense_x25), which the Kernels and Timeline views read by column and
# by rows from the files as each question needs (kview.tui.loading.attributed): the explorer
# does not hold them through the worker's range and documents batches, the sum's peaks
READ_WHEN_ASKED = (
    *READ_IN_PART,
    "timeline.nvtx",
    "gpu_time.launch_timeline",
    "attribution",
    "documents.kernel_groups",
)


def _end(process: multiprocessing.process.BaseProcess, folder: tempfile.TemporaryDirectory) -> None:
    """End a worker process, then remove its folder."""
    if process.is_alive():
        process.terminate()
        process.join(5)
    folder.cleanup()


class Worker:
    """The worker process making a large trace's tables in batches (BATCHES), saying on a pipe
    when each is written, so each view waits only for the batch it shows: the Kernels view for
    the attribution, the NVTX and Timeline views for the range tables, the Overview,
    Efficiency, Launches, Layers, Compare and Ranks views for the documents'. The explorer's own
    process never makes them: their transients (every range's label and nesting, the critical
    path of every step, every runtime call joined to its ops) end with the worker."""

    def __init__(self, trace: Trace, use_cache: bool):
        _start_resource_tracker()
        ctx = multiprocessing.get_context("spawn")  # polars' thread pool does not survive a fork
        self.trace = trace
        self.folder = tempfile.TemporaryDirectory(prefix="kview-tables-")
        self.said, says = ctx.Pipe(duplex=False)
        self.written = 0  # batches the worker said it wrote
        self._hearing = threading.Lock()  # views' threads wait for batches at once
        keys = tuple(k for b in BATCHES.values() for k in b)
        sizes = tuple(len(b) for b in BATCHES.values())[:-1]
        # daemonic: ended by multiprocessing's exit handler when the explorer leaves first
        self.process = ctx.Process(
            target=make_tables,
            args=(str(trace.path), keys, use_cache, self.folder.name, True, sizes, says, _let_go, _before_attribution),
            daemon=True,
        )
        self.process.start()
        says.close()  # the worker's end: a worker that ends without saying closes the pipe
        # the folder lasts as long as the explorer (or the trace); when it goes, the worker ends
        # first: one still writing (the explorer left while it worked) would leave files in it
        weakref.finalize(self, _end, self.process, self.folder)

    def batch(self, name: str) -> bool:
        """Wait for batch `name` (those before it read already) and put its tables in the
        trace's store; False (nothing put) when the worker failed before writing it."""
        i = list(BATCHES).index(name)
        with self._hearing:
            while self.written <= i:
                try:
                    self.written = self.said.recv() + 1
                except EOFError:
                    break
        if self.written <= i:
            return False
        # the folder stays while the explorer runs (removed when it leaves): tables read in
        # part, or let go, are read from there again
        self.trace.store.read_made(BATCHES[name], self.folder.name, later=READ_WHEN_ASKED)
        if i == len(BATCHES) - 1:
            self.process.join()
        return True
