"""What the views show, computed off the UI thread from the core, one document per view.

The app's worker only opens each trace (`open_one`). Each view that shows one trace then
fetches its own document of it in its own thread worker (views/base.py: View.fetch): a
function `(trace, use_cache) -> Iterator[Message]` below, yielding its Stages and the
messages (messages.py) its view shows, so the kernel summary is on screen while attribution
runs. They share the trace's store (kview.derived), which makes each table once whichever
views ask for it at once. `compare` makes the Compare table, `ranks` the Ranks view's tables
and `run_timeline` the run's Timeline once every trace is in, in those views' own workers.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import polars as pl
from textual.message import Message

from kview.derived import KeyedLocks
from kview.errors import TraceError
from kview.tui.messages import (
    AttributedKernels,
    CompareReady,
    EfficiencyReady,
    KernelSummary,
    LaunchesReady,
    LayersReady,
    MemoryReady,
    NvtxTree,
    OverviewReady,
    RanksReady,
    SnapshotOnly,
    Stage,
    TimelineReady,
)

if TYPE_CHECKING:
    from kview.analysis.kernel_context import KernelContext
    from kview.analysis.memory_timeline import MemoryTimeline, Snapshot
    from kview.analysis.rank_files import SummarizedRun
    from kview.documents import Document
    from kview.trace import Trace
    from kview.tui.prepare import Worker

T = TypeVar("T")


def open_one(trace: Trace | Snapshot | str, use_cache: bool) -> Trace | Snapshot:
    """The Trace (or the memory Snapshot opened alone) at `trace`: the one the CLI opened and
    checked, or the path opened here (the app's per-trace worker: it opens, views fetch)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis import memory_timeline
    from kview.io.snapshot_pickle import is_snapshot_file
    from kview.trace import open_trace

    if isinstance(trace, str):
        if is_snapshot_file(trace):
            return memory_timeline.open_snapshot(trace)
        return open_trace(trace, use_cache=use_cache)
    return trace


# what a trace's documents made once for all of them: (trace -> {name: value}), each name
# made under its own lock (views' workers ask at the same time; the first makes it)
_made: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_made_guard = threading.Lock()
_making = KeyedLocks()


def once(trace: Trace, name: str, make: Callable[[], T]) -> T:
    """`make()` for `trace`, made once whichever of its views' workers ask first (the others
    wait for it); kept as long as the trace."""
    with _made_guard:
        done = _made.setdefault(trace, {})
        if name in done:
            return done[name]
    with _making((id(trace), name)):
        with _made_guard:
            if name in done:
                return done[name]
        value = make()
        with _made_guard:
            done[name] = value
    return value


def _worker(trace: Trace, use_cache: bool) -> Worker | None:
    """A large trace's worker process (kview.tui.prepare), started once per trace by the first
    document that needs its tables; None where the explorer makes or reads them itself."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.tui import prepare

    return once(
        trace, "worker", lambda: prepare.Worker(trace, use_cache) if prepare.worth_it(trace, use_cache) else None
    )


def large(trace: Trace) -> bool:
    """Whether `trace` is large (kview.tui.prepare.large): its views read its tables in the
    frame cache in part, as its worker's files (a small trace's are read whole, as always)."""
    # deferred as in `_worker`, which the first view's document ran by then
    from kview.tui import prepare

    return prepare.large(trace)


def read_in_part(trace: Trace, *frames: tuple[Callable[..., Any], str]) -> tuple[Path | bytes, ...] | None:
    """Frames (table, part) to be read by the columns and rows a view needs, not whole: the
    files the trace's worker wrote, else a large trace's verified bytes in the frame cache;
    None where any is in neither."""
    made: tuple[Path | bytes | None, ...] = tuple(trace.store.made_file(fn, part) for fn, part in frames)
    if None in made and large(trace):
        made = tuple(trace.store.cached_bytes(fn, part) for fn, part in frames)
    return None if None in made else made  # type: ignore[return-value]


# what the views wait for while the worker makes each batch of tables (kview.tui.prepare.BATCHES)
STAGES = {
    "kernels": "attributing kernels (in a worker process)",
    "ranges": "nesting NVTX ranges (in a worker process)",
    "documents": "making the Overview, Efficiency, Launches, Layers, Compare and Ranks tables (in a worker process)",
}


def ready(trace: Trace, use_cache: bool, batch: str) -> Iterator[Stage]:
    """A large trace: the tables of `batch` (kview.tui.prepare.BATCHES) and those before it,
    from its worker process, each batch read back once (the views that need it wait for the
    first). A worker that failed gives nothing more: the views make what it did not give."""
    worker = _worker(trace, use_cache)
    if worker is None:
        return
    from kview.tui.prepare import BATCHES  # loaded with the worker

    order = list(BATCHES)
    for name in order[: order.index(batch) + 1]:
        with _made_guard:
            done = f"batch {name}" in _made.get(trace, {})
        if not done:
            yield Stage(STAGES[name])
        if not once(trace, f"batch {name}", functools.partial(worker.batch, name)):
            return


def kernels_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Kernels view's: the kernel summary (at once), then every kernel attributed."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.attribution import launched_ops
    from kview.analysis.gpu_time import launch_timeline
    from kview.documents.kernels import kernel_groups, kernels
    from kview.io.schema import KERNEL
    from kview.reports import cuda_gpu_kern_sum
    from kview.tui.kernel_words import kernel_summary, kernel_words

    yield Stage("kernel summary")
    # cuda_gpu_kern_sum's rows: of a trace with a kernel table, as kept in the frame cache
    summary = kernel_summary(trace) if trace.has(KERNEL) else cuda_gpu_kern_sum(trace).frame
    if summary.height == 0:  # no GPU kernels: say what the trace holds, show its CPU ops
        from kview.analysis.attribution import gpu_ops

        if gpu_ops(trace).height == 0:  # no GPU work: what `kview kernels` prints instead, and why
            doc = kernels(trace)
            yield KernelSummary(summary, doc.notes[0], doc.frame("kernels"), doc)
        else:  # copies and memsets only
            yield KernelSummary(summary, "no GPU kernels in this trace (only memory copies and sets)")
    else:
        yield KernelSummary(summary)
    yield from ready(trace, use_cache, "kernels")
    yield Stage("attributing kernels")
    table = attributed(trace)
    # a row per kernel name, read alone
    names_file = read_in_part(trace, (kernel_groups, "names")) if isinstance(table, pl.LazyFrame) else None
    shown = pl.read_parquet(names_file[0]) if names_file else kernel_groups(trace)[1]
    widths_row, words = kernel_words(trace)
    names = tuple(words.filter(pl.col("field") == "")["word"].to_list())
    widths = {c: int(v or 0) for c, v in widths_row.row(0, named=True).items()} if widths_row.height else {}
    widths["Kernel"] = widths.get("_name", 0)  # per-kernel rows show `_name` as Kernel
    # the rows of `kview kernels`: made of a table in memory; of a large trace's files, when asked
    document = kernels(trace, table=table) if isinstance(table, pl.DataFrame) else None
    yield AttributedKernels(table, names, tuple(words["word"].to_list()), shown, widths, document)

    # each op's launch time (NVTX tree, phases, Compare) is kept; the launches joined to the
    # ops it is made from are not (on the dense 1.1M-kernel trace that frame is 0.5 GB, and
    # nothing the views show reads it again)
    def launch_times() -> pl.DataFrame:
        times = launch_timeline(trace)
        trace.store.drop(launched_ops)
        return times

    if trace.store.made_file(launch_timeline) is None:  # else a worker made them: read when the NVTX view asks
        once(trace, "launch times", launch_times)


def attributed(trace: Trace) -> pl.DataFrame | pl.LazyFrame:
    """Every kernel attributed (`attribute`), with the grouping keys Kernels and the Timeline's
    filter read (`_short`, `_name`, `_range`: kernel_groups), so no keystroke pays for them.
    A large trace's, as its worker process wrote them, are not read whole: a LazyFrame over
    its files, which each question reads by the columns and rows it needs (the table is 0.4
    GB on dense_x25, held through the worker's later peaks if read); so are those in the frame
    cache of a large trace, over their Parquet bytes (read whole, 0.2 GB and 0.3 CPU s on
    dense_x25)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.attribution import attribute
    from kview.documents.kernels import kernel_groups

    def make() -> pl.DataFrame | pl.LazyFrame:
        files = (
            read_in_part(trace, (attribute, ""), (kernel_groups, "columns"))
            if trace.store.peek(attribute) is None
            else None
        )
        if files:
            return pl.concat([pl.scan_parquet(f) for f in files], how="horizontal")
        return attribute(trace).hstack(kernel_groups(trace)[0].get_columns())

    return once(trace, "attributed", make)


def kernel_context(trace: Trace, idx: int) -> KernelContext:
    """The context of GPU op `idx` (kview.analysis.kernel_context): of a large trace's tables
    read in part where its views read them so (its attributed kernels, its labelled ranges),
    else of the tables in memory."""
    # deferred: only when a context is asked for
    from kview.analysis import kernel_context as kc
    from kview.analysis import nvtx_ranges as nv
    from kview.analysis.attribution import attribute

    made = read_in_part(trace, (attribute, "")) if trace.store.peek(attribute) is None else None
    if not made:
        return kc.kernel_context(trace, idx)
    held = trace.store.peek(nv.labelled_ranges) is not None or trace.store.peek(nv.projection_ranges) is not None

    def ranges(part: str) -> Path | bytes | None:
        found = None if held else read_in_part(trace, (nv.labelled_ranges, part))
        return found[0] if found else None

    return kc.kernel_context_in_part(trace, idx, made[0], ranges)


def timeline_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Timeline view's: the GPU rows, then every row with the attributed kernels. On a
    large trace the GPU and runtime rows are made once the worker's range tables are written
    (its highest peak is while it makes them), the rest once its last batch is: the rows
    made of the ranges are not held through it, and those that read no range table are made
    meanwhile (seconds of reading every GPU op and runtime call)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis import timeline
    from kview.io.sqlite_source import return_freed_memory

    yield from ready(trace, use_cache, "ranges")
    yield Stage("timeline")
    gpu_timeline = timeline.build(trace, cpu=False)
    yield TimelineReady(gpu_timeline, cpu_pending=True)
    if _worker(trace, use_cache) is not None:
        # the rows hold their own tables; the columns of every GPU op and runtime call they
        # were read from (0.15 GB on dense_x25) were the last the explorer read of them, its
        # worker making the rest (a later ask reads them again): the GPU ops' go before the
        # runtime calls are read (the explorer's highest point while it makes the rows, beside
        # the worker's documents: 0.62 -> 0.56 GB on dense_x25 with 16 threads), and what
        # reading them freed on the C heap (SQLite's rows, the read's Arrow buffers) goes back
        # to the system rather than staying in the explorer through the worker's documents,
        # the sum's peak (0.13 GB)
        trace.let_go(*GPU_FRAMES)
        return_freed_memory()
        timeline.api_row_table(trace)
        trace.let_go("runtime")
        return_freed_memory()
    yield from ready(trace, use_cache, "documents")
    yield Stage("timeline: CPU threads")
    yield full_timeline(trace, gpu_timeline)


GPU_FRAMES = ("kernels", "memcpy", "memset")  # Trace.columns' frames of the GPU ops


def full_timeline(trace: Trace, gpu_timeline=None) -> TimelineReady:
    """Every row of the trace's timeline: the CPU rows reuse the NVTX nesting attribution
    built; GPU ops take the attributed category, so the Timeline and Kernels agree."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis import timeline

    table = attributed(trace)
    # a large trace's kernels are a LazyFrame over its worker's files: the columns asked are
    # read alone (out of Idx order, the table is read and sorted once, as one in memory is)
    idx = table.lazy().select("Idx").collect()["Idx"]
    att = table if idx.is_sorted() else table.lazy().sort("Idx").collect()
    colours = att.lazy().select("Idx", "Category").collect()
    gpu = gpu_timeline if gpu_timeline is not None else timeline.build(trace, cpu=False)
    full = timeline.recolour(timeline.with_cpu_rows(trace, gpu), colours)
    return TimelineReady(full, attributed=att, attributed_idx=colours["Idx"].to_numpy())


def overview_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Overview view's: the document of `kview overview`."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents.overview import overview

    yield from ready(trace, use_cache, "documents")
    yield Stage("overview")
    yield OverviewReady(overview(trace))


def launches_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Launches view's: the documents of `kview launches` and `kview critical-path`."""
    yield from ready(trace, use_cache, "documents")
    yield Stage("launches")
    yield launches(trace)


def efficiency_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Efficiency view's: the document of `kview efficiency`."""
    yield from ready(trace, use_cache, "documents")
    yield Stage("efficiency")
    yield efficiency(trace)


def nvtx_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The NVTX view's: the document of `kview nvtx`, with each path's windows and each op's
    launch time (so a range opens Kernels on exactly the ops its GPU time counts)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.gpu_time import launch_timeline
    from kview.analysis.nvtx_tree import children_order, path_table, path_windows, paths_and_windows, tree_order

    yield from ready(trace, use_cache, "ranges")
    yield Stage("NVTX tree")
    timeline = launch_timeline(trace).select("Idx", "t")
    # a large trace's tree, as its worker wrote it or as the frame cache keeps it: read in part
    # (kview.tui.prepare.READ_IN_PART; from the cache, 0.12 GB and 0.25 CPU s less on dense_x25
    # than read whole)
    parts = ((paths_and_windows, "paths"), (paths_and_windows, "windows"))
    made = read_in_part(trace, *parts) if trace.store.peek(paths_and_windows) is None else None
    if made:
        paths_file, windows_file = made
        paths = read_paths(paths_file)
        texts = None if "Path" in paths.columns else paths_file
        # the order kept in the frame cache beside the tree, else made of the paths read
        children = children_order(trace) if trace.store.on_disk(["nvtx_tree.children"]) else tree_order(paths)
        yield NvtxTree(trace.name, paths, PathWindows(windows_file), timeline, children, texts)
        return
    yield NvtxTree(trace.name, path_table(trace), path_windows(trace), timeline, children_order(trace))


def read_paths(file: Path | bytes) -> pl.DataFrame:
    """path_table from its file (or its Parquet bytes), without the Path texts where each is
    its parent's, " > " and its name (a tree shallower than the levels a path keeps:
    kview.analysis.nvtx_tree's _path_texts); the NVTX view makes those of the rows it shows
    (`child_paths`)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.nvtx_tree import texts_from_parents

    if not texts_from_parents(pl.read_parquet(file, columns=["Depth"])["Depth"].max()):
        return pl.read_parquet(file)
    return pl.read_parquet(file, columns=[c for c in pl.read_parquet_schema(file) if c != "Path"])


def child_paths(parent: str | None) -> pl.Expr:
    """The Path of rows of `read_paths` (their Name) whose parent's Path is `parent` (None: the
    top level)."""
    # deferred as this module's analyses are: the NVTX view that calls this has it loaded
    from kview.analysis.nvtx_tree import child_path

    if parent is None:
        return pl.col("Name").alias("Path")
    return child_path(pl.lit(parent, dtype=pl.String)).alias("Path")


class PathWindows:
    """path_windows read from the file a worker wrote (or its Parquet bytes from the frame
    cache), a path's at a time (`of`): sorted by path, each path's windows are one slice of
    the file, whose bounds are kept (8 bytes a path) rather than every window (5.7 million on
    dense_x25, 0.16 GB), which only opening a range reads."""

    def __init__(self, file: Path | bytes):
        ids = pl.read_parquet(file, columns=["path_id"])["path_id"].to_numpy()
        top = int(ids[-1]) + 1 if len(ids) else 0
        self.file = file
        self.bounds = np.searchsorted(ids, np.arange(top + 1), side="left")

    def of(self, path_id: int) -> pl.DataFrame:
        """The windows of path `path_id` (none for a path that has none)."""
        if not 0 <= path_id < len(self.bounds) - 1:
            return pl.read_parquet(self.file, n_rows=0)
        lo, hi = int(self.bounds[path_id]), int(self.bounds[path_id + 1])
        return pl.scan_parquet(self.file).slice(lo, hi - lo).collect()


def layers_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Layers view's: the document of `kview layers`."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents.layers import layers

    yield from ready(trace, use_cache, "documents")
    yield Stage("layers")
    yield LayersReady(layers(trace))


def memory_document(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The Memory view's: the allocator history beside the trace, or its own memory events."""
    yield Stage("looking for the allocator's history")
    yield from load_memory_beside(trace, use_cache)


def snapshot_document(snap: Snapshot, use_cache: bool) -> Iterator[Message]:
    """A memory snapshot opened alone: its timeline (the Memory view's)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.memory_timeline import timeline

    yield Stage(f"replaying the allocator history of {snap.name}")
    yield memory_ready(timeline(snap, use_cache=use_cache))


def no_trace(snap: Snapshot, shown_in: str) -> Iterator[Message]:
    """What a view of a trace shows of a memory snapshot opened alone: what the file is."""
    yield SnapshotOnly(f"{snap.name} is a memory snapshot, not a trace: see the {shown_in} view.")


def load_memory_beside(trace: Trace, use_cache: bool) -> Iterator[Message]:
    """The timeline of the allocator history `kview capture --memory` wrote beside the trace
    (phases from the trace, already open), or the sentence saying there is none."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.memory_timeline import open_snapshot, timeline
    from kview.io.snapshot_pickle import memory_name

    snap = memory_name(trace.path)
    if not snap.exists():
        # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
        from kview.analysis import trace_memory

        if trace_memory.source_of(trace) is not None:  # the trace's own memory events
            yield Stage("memory timeline")
            try:
                yield memory_ready(trace_memory.timeline(trace))
            except TraceError as e:  # damaged memory events: the trace still opens
                yield MemoryReady(None, f"{trace.name}: its memory events {e.problem}")
            return
        yield MemoryReady(
            None,
            f"No allocator history beside this trace ({snap.name}) and no memory events in it. Record one with "
            "`kview capture --memory`, torch.profiler(profile_memory=True) or nsys --cuda-memory-usage=true, "
            "or open a snapshot: kview SNAPSHOT.pickle",
        )
        return
    yield Stage("memory timeline")
    try:
        yield memory_ready(timeline(open_snapshot(trace.path), use_cache=use_cache, trace=trace))
    except TraceError as e:  # a damaged snapshot beside a good trace: the trace still opens
        yield MemoryReady(None, f"{snap.name} {e.problem}")


MEMORY_ROWS = 50  # rows of the Memory view's tables (`kview memory --top 50`)


def memory_ready(tl: MemoryTimeline | None) -> MemoryReady:
    """The Memory view's timeline (its plot and peak) and document."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents.memory import memory

    return MemoryReady(tl, document=None if tl is None else memory(tl, MEMORY_ROWS))


def launches(trace: Trace) -> LaunchesReady:
    """The documents of `kview launches` and `kview critical-path` (their defaults), for the Launches view."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import launches as ld

    return LaunchesReady(ld.launches(trace), ld.critical_path(trace))


def efficiency(trace: Trace) -> EfficiencyReady:
    """The document of `kview efficiency` for the Efficiency view, and the caption naming the GPU."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import efficiency as ed

    doc = ed.efficiency(trace)
    return EfficiencyReady(doc, efficiency_caption(doc.frame("gpus")))


def efficiency_caption(gpus: pl.DataFrame) -> str:
    """`H200 SXM (NVIDIA H200, by name): FP32 67 · TF32 494.5 · ... TFLOP/s dense, 4,800 GB/s`."""
    if gpus.height == 0:
        return "No GPU work in this trace."
    parts = []
    for g in gpus.unique("GPU", keep="first", maintain_order=True).iter_rows(named=True):
        if g["GPU"] is None:
            parts.append(
                f"GPU {g['Name'] or '(unnamed)'}: no peaks known, so no MFU or bandwidth (kview efficiency --gpu NAME)"
            )
            continue
        peaks = " · ".join(
            f"{k} {g[f'{k} (TFLOP/s)']:g}" for k in ("FP32", "TF32", "BF16", "FP16", "FP8") if g[f"{k} (TFLOP/s)"]
        )
        parts.append(
            f"{g['GPU']} ({g['Name'] or 'unnamed'}, by {g['How']}): {peaks} TFLOP/s dense, "
            f"{g['Memory (GB/s)']:,.0f} GB/s"
        )
    return "; ".join(parts)


BY = ("range", "layer", "category", "kernel")


def all_ready(traces: list[Trace], batch: str) -> None:
    """Each large trace's tables from its worker up to `batch` (what the views of every trace
    read: phases, steps, the phases compared), waited for rather than made again here."""
    for t in traces:
        for _ in ready(t, t.use_cache, batch):
            pass


def compare(traces: list[Trace], by: str | None = None, metric: str = "gpu", ranks: bool | None = None) -> CompareReady:
    """Several traces side by side (within their last `profiled_step` when every trace has
    one), or one trace's phases side by side, or the ranks of the run (`ranks`; by default when
    one trace holds several), by range, layer, category or kernel: the document of
    `kview compare` (kview.documents.compare), whose command line the caption gives."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis.compare import distinct_labels, kept_phase_windows
    from kview.analysis.layers import phase_times
    from kview.analysis.nvtx_ranges import user_ranges
    from kview.analysis.ranks import make_run
    from kview.documents import compare as cd

    all_ready(traces, "documents")
    first = traces[0]
    several = len(traces) > 1
    if by == "gate":
        return _gate(traces)
    run = make_run(traces) if ranks or (ranks is None and not several) else None
    if run is not None and (ranks or len(run.ranks) > 1):
        return _compare_ranks(traces, run, by or "category", metric)
    by = by or ("range" if several else "category")
    phase_names = [] if several else phase_times(first)["Phase"].to_list()
    if not several and len(phase_names) < 2:
        return CompareReady(
            None, "Open two or more traces (kview A B) or a trace with phase ranges to compare.", by, metric
        )
    try:
        if several:
            ts = traces
            has_root = all(user_ranges(t).filter(pl.col("label") == "profiled_step").height for t in ts)
            doc = cd.traces(ts, by, metric, "profiled_step" if has_root else None)
            labels = distinct_labels([t.stem for t in ts])
            legend = "; ".join(f"{label} = {t.name}" for label, t in zip(labels, ts) if label != t.stem)
            head = f"{len(ts)} traces by {by}" + (f" · {legend}" if legend else "")
        else:
            doc = cd.phases(first, phase_names, by, metric, windows=kept_phase_windows(first, phase_names))
            head = f"the phases of this trace by {by}"
        return CompareReady(doc, f"{head}: {cd.what(by, metric)}  ·  = {doc.command}", by, metric)
    except ValueError as e:
        return CompareReady(None, str(e).splitlines()[0], by, metric)


GATE_PCT = 5.0  # the Compare view's gate: every scope at 5%, as `kview diff A B --gate 5`


def _gate(traces: list[Trace]) -> CompareReady:
    """The regression gate of the last trace against the first (`kview diff A B --gate 5`):
    every gated item, those past the gate first."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents.diff import gate

    if len(traces) < 2:
        return CompareReady(None, "The gate compares two traces: open a baseline and a new run (kview A B).", "gate")
    a, b = traces[0], traces[-1]
    doc, v = gate(a, b, [f"{GATE_PCT:g}"])
    n = v.regressed.height
    verdict = (
        f"{n} of {v.checked} items regressed past {GATE_PCT:g}%"
        if n
        else f"passed: none of {v.checked} items regressed past {GATE_PCT:g}%"
    )
    caption = f"gate, {b.name} against {a.name}: {verdict}; {v.basis}  ·  = {doc.command} (exit {1 if n else 0})"
    return CompareReady(doc, caption, "gate")


def _compare_ranks(traces: list[Trace], run, by: str, metric: str) -> CompareReady:
    """The ranks of the run side by side (`kview compare --ranks`), and the spread across them."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import compare as cd

    if len(run.ranks) < 1:
        return CompareReady(None, "No GPU work in these traces: no ranks to compare.", by, metric, True)
    try:
        doc = cd.ranks(run, [t.name for t in traces], by, metric)
    except ValueError as e:
        return CompareReady(None, str(e).splitlines()[0], by, metric, True)
    other = "traces" if len(traces) > 1 else "phases"
    return _ranks_compared(doc, len(run.ranks), by, metric, other)


def summarized_compare(run: SummarizedRun, by: str, metric: str, cluster: str) -> CompareReady:
    """The ranks side by side from each rank file's columns (`kview compare --cluster`)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import compare as cd

    if not run.ranks:
        return CompareReady(None, "No GPU work in these traces: no ranks to compare.", by, metric, True)
    return _ranks_compared(cd.summarized(run, by, metric, cluster), len(run.ranks), by, metric, "traces")


def _ranks_compared(doc: Document, n: int, by: str, metric: str, other: str) -> CompareReady:
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents.compare import what

    head = f"{n} ranks by {by} (r: {other} as columns)"
    caption = f"{head}: {what(by, metric)}, and the spread across ranks  ·  = {doc.command}"
    return CompareReady(doc, caption, by, metric, True)


def run_timeline(traces: list[Trace]) -> TimelineReady | None:
    """Every trace's rows on one timeline grouped by rank (`timeline.of_run`), when the traces
    are the ranks of one run: each trace's ranks numbered from its own metadata or file name,
    none twice (traces opened side by side to compare get no such timeline)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.analysis import timeline
    from kview.analysis.ranks import make_run
    from kview.analysis.run_clock import run_clock

    if len(traces) < 2:
        return None
    all_ready(traces, "ranges")
    run = make_run(traces)
    if len(run.ranks) < 2 or run.notes:
        return None
    timelines = [full_timeline(t) for t in traces]  # every row of each, attributed
    names = [t.name for t in traces]
    clock = run_clock(traces)
    tl = timeline.of_run([m.timeline for m in timelines], run.units, names, clock)
    return TimelineReady(tl, run=tuple((m.attributed, m.attributed_idx) for m in timelines))


def ranks(traces: list[Trace]) -> RanksReady:
    """The traces as one run: the documents of `kview ranks` and `kview iterations` over the
    same files (a row per rank with its bar, the iterations of every rank, the stragglers by
    iteration and the collectives)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import ranks as rd

    # one trace's tables are kept with its documents' (the worker's last batch); a run of
    # several traces is made here from their range tables
    all_ready(traces, "documents" if len(traces) == 1 else "ranges")
    return _ranks_ready(rd.of_traces(traces, "ranks"), rd.of_traces(traces, "iterations"))


def summarized_ranks(run: SummarizedRun) -> RanksReady:
    """The Ranks view of a run summarized rank file by rank file (`kview ranks --cluster`)."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import ranks as rd

    return _ranks_ready(rd.summarized(run, "ranks"), rd.summarized(run, "iterations"))


def nothing_ranked(caption: str) -> RanksReady:
    """The Ranks view's message when there is no run to show, and why."""
    # imported in the worker, off the UI thread: the explorer's first screen waits for none of it
    from kview.documents import Document

    return RanksReady(Document("Ranks"), Document("Iterations"), caption)


def _ranks_ready(ranks: Document, iterations: Document) -> RanksReady:
    """The documents, and a caption: what the run is, or why there is nothing to show."""
    summary = ranks.frame("time")
    if summary.height == 0:
        return RanksReady(ranks, iterations, "No GPU work in these traces: no ranks to show.")
    n = summary.height
    steps = iterations.frame("iterations")["Iteration"].drop_nulls().n_unique()
    caption = f"{n} rank{'s' if n > 1 else ''} · {steps} iteration{'s' if steps != 1 else ''}"
    joined_last = ranks.frame("stragglers")["Straggler"].drop_nulls()
    if joined_last.len():
        top = joined_last.mode().sort()[0]
        caption += f" · straggler: rank {top} in {(joined_last == top).sum()} of {joined_last.len()} iterations"
    elif n == 1:
        caption += " · one rank: open its other ranks' traces too (kview rank0.sqlite rank1.sqlite, or a folder)"
    caption += "".join(f" · {note}" for note in ranks.notes)
    return RanksReady(ranks, iterations, caption)


def on_cluster(view, members: list[int], compare: tuple[str, str, str | None] | None, stage: str) -> SummarizedRun:
    """The run's rank files summarized on the session's cluster (`compare`: their columns of
    Compare), `view` told how many are done; a file that fails is said and left out. Runs in
    `view`'s thread worker."""
    # deferred: the cluster's client (dask) loads only for a run summarized on a cluster
    from kview.analysis.rank_files import Step, SummarizedRun
    from kview.cluster import summarize_run

    session = view.session
    assert session.cluster is not None
    address, cache_dir = session.cluster
    app = view.app

    def progress(n: int, total: int, done) -> None:
        app.call_from_thread(view.show_stage, f"{stage}: {n} of {total}")
        if done.tables is None:
            why = f"kview: {done.path}: {done.problem}".splitlines()[0]
            app.call_from_thread(app.notify, why, title="left out of the run", severity="error", timeout=30)

    files = [os.path.abspath(session.paths[i]) for i in members]
    outcome = summarize_run(address, files, Step(cache_dir, compare=compare), progress, quiet=True)
    good = [(d.path, d.tables) for d in outcome if d.tables is not None]
    if not good:
        raise ValueError("no rank file could be summarized")
    return SummarizedRun([f for f, _ in good], [t for _, t in good])


def no_ranks(e: Exception) -> RanksReady:
    """The Ranks view's message when its tables could not be made: why."""
    return nothing_ranked(f"cannot make the ranks: {type(e).__name__}: {e}".splitlines()[0])
