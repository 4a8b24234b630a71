"""The load protocol: one message per thing that became ready, made by a view's document.

Each message is a frozen dataclass holding finished polars frames; nothing writes to it once it
is made, so a view may keep it as its data while the worker goes on. A view message names the
view that shows it (`view`). A view's own worker (View.fetch) makes its document's messages
and hands each to the view's own `on_<message>` method. The app's per-trace worker posts
`TraceOpened` or `LoadFailed` to the app; a view's fetch that failed posts `FetchFailed`.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import polars as pl
from textual.message import Message
from typing_extensions import dataclass_transform

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from kview.analysis.memory_timeline import MemoryTimeline, Snapshot
    from kview.analysis.timeline import Timeline
    from kview.documents import Document
    from kview.trace import Trace

_TEXTUAL_SLOTS = frozenset(Message.__slots__)


@dataclass_transform(frozen_default=True)
def frozen_message(cls: type) -> type:
    """`@dataclass(frozen=True)` for a Textual Message: the fields cannot be reassigned, while
    Textual's own bookkeeping on every message (sender, time, propagation flags) stays writable.
    (A plain frozen dataclass would refuse that bookkeeping too.) Equality is identity, as for
    any message: the fields are frames, which have no truth value."""
    cls = dataclass(frozen=True, eq=False)(cls)

    def __setattr__(self: Message, name: str, value: Any) -> None:
        if name not in _TEXTUAL_SLOTS:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self: Message, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    cls.__setattr__ = __setattr__  # type: ignore[assignment]
    cls.__delattr__ = __delattr__  # type: ignore[assignment]
    return cls


class ViewMessage(Message):
    """What one view shows; `view` is that view's id (the worker posts the message to it, and
    it goes no further: nothing above the view handles it)."""

    view: ClassVar[str]

    def __init_subclass__(cls, bubble: bool | None = False, **kw: Any) -> None:
        super().__init_subclass__(bubble=bubble, **kw)


# -- for the views -------------------------------------------------------------------------
@frozen_message
class KernelSummary(ViewMessage):
    """`cuda_gpu_kern_sum` of the trace: the first table, shown before attribution finishes."""

    view: ClassVar[str] = "kernels"
    frame: pl.DataFrame
    # a trace without GPU kernels: what it holds, and its CPU op times to show instead
    note: str = ""
    cpu_ops: pl.DataFrame | None = None
    document: Document | None = None  # of `kview kernels` (its CPU op times), when there is no GPU work


@frozen_message
class AttributedKernels(ViewMessage):
    """Every kernel with its layer, op, direction and range (`attribute`), plus the grouping keys
    derived once here (`_short`, `_range`), the kernel names, and every word the filter line
    completes (those names and `field:value` pairs)."""

    view: ClassVar[str] = "kernels"
    # a large trace's: a LazyFrame over its worker's files, read by the columns and rows asked
    table: pl.DataFrame | pl.LazyFrame
    names: tuple[str, ...]
    words: tuple[str, ...] = ()
    # Kernel -> the name the tables show (`distinct_short_names`, `_name` in `table`)
    names_shown: pl.DataFrame = field(default_factory=pl.DataFrame)
    # the widest value of each text column, so a million-row table is measured once
    text_widths: dict[str, int] = field(default_factory=dict)
    # the rows of `kview kernels` (kview.documents.kernels): `table` without its helper columns
    document: Document | None = None


@frozen_message
class OverviewReady(ViewMessage):
    """The document of `kview overview` (kview.documents.overview)."""

    view: ClassVar[str] = "overview"
    document: Document


class PathsWindows(Protocol):
    """Each NVTX path's merged windows, read a path's at a time (kview.tui.loading.PathWindows)."""

    def of(self, path_id: int) -> pl.DataFrame: ...


@frozen_message
class NvtxTree(ViewMessage):
    """The document of `kview nvtx` (kview.documents.nvtx): GPU and CPU time per NVTX path
    (`path_table`; without its Path texts where the tree makes each of its parent's: a large
    trace's, read from its worker's file), empty when the trace has no ranges. With the merged
    windows of each path (`path_windows`, or a reader of a path's at a time) and the launch time
    of every op (`launch_timeline`), so a range opens Kernels on exactly the ops its GPU time
    counts; and the order the tree lists the paths in (`children_order`)."""

    view: ClassVar[str] = "nvtx"
    trace_name: str
    paths: pl.DataFrame
    windows: pl.DataFrame | PathsWindows
    timeline: pl.DataFrame
    children: pl.DataFrame
    # the path table with its Path texts (its file, or its Parquet bytes), where `paths` lacks them
    texts_file: Path | bytes | None = None

    @property
    def document(self) -> Document:
        """The document of `kview nvtx` (its paths' texts read again where `paths` lacks them)."""
        # deferred as every analysis the views show: the explorer's first screen waits for none of it
        from kview.documents.nvtx import nvtx_of

        return nvtx_of(self.paths if self.texts_file is None else pl.read_parquet(self.texts_file), self.trace_name)

    def windows_of(self, path_id: int) -> pl.DataFrame:
        """Windows holding those of path `path_id` (every path's, or that path's alone)."""
        return self.windows if isinstance(self.windows, pl.DataFrame) else self.windows.of(path_id)


@frozen_message
class LayersReady(ViewMessage):
    """The document of `kview layers` (kview.documents.layers): forward/backward time per
    repeated layer range, empty when none repeat."""

    view: ClassVar[str] = "layers"
    document: Document

    @property
    def layers(self) -> pl.DataFrame:
        return self.document.frame("layers")

    @property
    def note(self) -> str:
        """Why Backward is empty (layers.backward_unplaced), when there are layers."""
        return "; ".join(self.document.notes) if self.layers.height else ""


@frozen_message
class CompareReady(ViewMessage):
    """The Compare table, or (frame None) the sentence saying why there is nothing to compare."""

    view: ClassVar[str] = "compare"
    document: Document | None  # of `kview compare` (kview.documents.compare), or of the gate
    caption: str
    by: str = "range"
    metric: str = "gpu"
    ranks: bool = False  # columns are the ranks of the run (else the traces, or one trace's phases)

    @property
    def frame(self) -> pl.DataFrame | None:
        """The table shown: the document's first, as a terminal shows it (None: nothing to compare)."""
        return None if self.document is None else self.document.sections[0].frame_for("table")


@frozen_message
class TimelineReady(ViewMessage):
    """The timeline's rows: first the GPU rows alone (`cpu_pending`), right after the kernel
    summary; then every row, with the attributed kernels' Idx, layer, op, direction and
    category (sorted by Idx, `attributed_idx` the Idx column) for the status line and `/`."""

    view: ClassVar[str] = "timeline"
    timeline: Timeline
    cpu_pending: bool = False
    attributed: pl.DataFrame | pl.LazyFrame | None = None  # as AttributedKernels.table
    attributed_idx: np.ndarray | None = None
    # the ranks of a run of several files on one timeline (`timeline.of_run`): per file, its
    # (attributed, attributed_idx); the view then shows the run whichever file is in front
    run: tuple[tuple[pl.DataFrame | pl.LazyFrame | None, np.ndarray | None], ...] = ()


@frozen_message
class RanksReady(ViewMessage):
    """Every trace on the command line as one run: the documents of `kview ranks` and
    `kview iterations` (kview.documents.ranks), and a caption: what the run is, or (no ranks)
    why there is nothing to show."""

    view: ClassVar[str] = "ranks"
    ranks: Document
    iterations: Document
    caption: str


@frozen_message
class LaunchesReady(ViewMessage):
    """The documents of `kview launches` and `kview critical-path` (kview.documents.launches)."""

    view: ClassVar[str] = "launches"
    document: Document
    critical_path: Document

    @property
    def tables(self) -> dict[str, pl.DataFrame]:
        """The view's tables by name: the launch tables by the name `--table` takes, then the
        critical path's."""
        return {
            **{s.name: s.frame for s in self.document.sections},
            "critical path": self.critical_path.frame("steps"),
            "path ops": self.critical_path.frame("ops"),
        }


@frozen_message
class EfficiencyReady(ViewMessage):
    """The document of `kview efficiency` (kview.documents.efficiency), and a caption naming
    the GPU and its peaks."""

    view: ClassVar[str] = "efficiency"
    document: Document
    caption: str

    @property
    def tables(self) -> dict[str, pl.DataFrame]:
        """The view's tables by the name `--table` takes."""
        return {s.name: s.frame for s in self.document.sections}


@frozen_message
class MemoryReady(ViewMessage):
    """The allocator timeline (`memory_timeline.timeline`) of the snapshot opened, or of the one
    beside the trace; or (None) the sentence saying there is none and how to record one."""

    view: ClassVar[str] = "memory"
    timeline: MemoryTimeline | None
    note: str = ""
    # its document (`kview memory --top 50`, kview.documents.memory), when there is a timeline
    document: Document | None = None


@frozen_message
class SnapshotOnly(Message):
    """The file is a memory snapshot, not a trace: a view of a trace says so (`note`)."""

    note: str


@frozen_message
class Stage(Message):
    """The document moved on to `text`; its view, still waiting, says so."""

    text: str


# -- for the app ---------------------------------------------------------------------------
@frozen_message
class TraceOpened(Message):
    """File `index` (its place on the command line) is open: a Trace, or a memory Snapshot
    opened alone. The views that show one trace fetch their documents of it when it is shown;
    Compare and Ranks wait for every file."""

    index: int
    trace: Trace | Snapshot


@frozen_message
class FetchFailed(Message):
    """A view's document of `trace` could not be made: `why` (the file's damage, found while
    reading it, or what went wrong)."""

    trace: Trace | Snapshot
    why: str


@frozen_message
class LoadFailed(Message):
    """Trace `index` could not be loaded; `error` is the one line to show."""

    index: int
    error: str


class ForView(Message):
    """A request for view `view`, posted by any widget: the app brings that view forward and
    hands it the message (`View.request`)."""

    view: ClassVar[str]


@dataclass(frozen=True, eq=False)
class Scope:
    """A set of GPU ops (their Idx) the Kernels view is restricted to, named by `label` (an
    NVTX range's path); escape goes back to view `back_to`."""

    label: str
    idx: pl.Series
    back_to: str = ""


@frozen_message
class OpenKernels(ForView):
    """Show the Kernels view filtered by `filter_text`, or restricted to `scope` (posted by a
    view)."""

    view: ClassVar[str] = "kernels"
    filter_text: str = ""
    scope: Scope | None = None


@frozen_message
class ShowOnTimeline(ForView):
    """Show the Timeline with GPU op `idx` (Kernels' Idx) or the range [start, end] (absolute
    ns) of thread `thread` at NVTX depth `depth` under the cursor (posted by a view)."""

    view: ClassVar[str] = "timeline"
    idx: int | None = None
    start: int | None = None
    end: int | None = None
    thread: int | None = None
    depth: int | None = None
