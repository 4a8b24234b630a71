"""Launches and critical paths: `kview launches`, `kview critical-path` and the explorer's
Launches view (which shows both)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import polars as pl

from kview.analysis import critical_path as cp
from kview.analysis import launches as la
from kview.analysis.launches import launches as launched  # not `la.launches`: this module has a `launches`
from kview.derived import derived, frames
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.trace import Trace

# `--table NAME` -> the title it has in the whole document; queue-series (every change of every
# stream's queue length) only with --table: a whole document never holds it
LAUNCH_TITLES = {
    "kernels": "Launch cost and delay by kernel",
    "ops": "Launch cost and delay by CPU op",
    "queue": "Queue length by stream",
    "idle": "Idle time by stream and cause",
    "gaps": "Longest idle gaps",
    "queue-series": "Queue length over time",
}
ONLY_WITH_TABLE = ("queue-series",)
PATH_TITLES = {"steps": "Critical path by step", "ops": "On the critical paths"}
NO_LAUNCHES = "no GPU ops: nothing was launched"
TOP_GAPS = 20  # `kview launches --top`
TOP_OPS = 20  # `kview critical-path --top`


def _sections(titles: dict[str, str], makers: dict[str, Callable[[], pl.DataFrame]], only: str | None):
    """The sections named in `titles` (only `only` when given), each table made when it is shown."""
    names = [only] if only is not None else [n for n in titles if n not in ONLY_WITH_TABLE]
    return tuple(Section(n, titles[n], makers[n]()) for n in names)


def _launch_makers(trace: Trace, top: int, wait: int) -> dict[str, Callable[[], pl.DataFrame]]:
    return {
        "kernels": lambda: la.launch_stats(trace, "Kernel"),
        "ops": lambda: la.launch_stats(trace, "Op"),
        "queue": lambda: la.queue_summary(trace),
        "idle": lambda: la.idle_by_stream(trace, wait),
        "gaps": lambda: la.gap_table(trace, top, wait),
        "queue-series": lambda: la.queue_series(trace),
    }


WHOLE_LAUNCHES = tuple(n for n in LAUNCH_TITLES if n not in ONLY_WITH_TABLE)


@derived(key="documents.launches", version="1", persist=True, codec=frames(*WHOLE_LAUNCHES, "held"))
def _kept_launches(trace: Trace) -> tuple[pl.DataFrame, ...]:
    """The whole document's tables with their defaults, and whether anything was launched, kept
    in the frame cache: a second look (the explorer reopening a trace) reads them instead of
    joining every runtime call to its GPU ops again (seconds at a million kernels)."""
    makers = _launch_makers(trace, TOP_GAPS, la.KERNEL_WAIT_NS)
    if trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        # the longest gaps read every runtime call (their CPU calls): read first, the idle
        # gaps' synchronizations are a filter of them, not a pass over the file of their own
        trace.columns("runtime", la.API_COLUMNS)
    held = pl.DataFrame({"launched": [launched(trace).height > 0]})
    return (*(makers[n]() for n in WHOLE_LAUNCHES), held)


def _path_makers(trace: Trace, top: int) -> dict[str, Callable[[], pl.DataFrame]]:
    return {"steps": lambda: cp.step_table(trace), "ops": lambda: cp.top_ops(trace, top)}


@derived(key="documents.critical_path", version="1", persist=True, codec=frames(*PATH_TITLES))
def _kept_paths(trace: Trace) -> tuple[pl.DataFrame, ...]:
    """The critical path tables with their defaults, kept in the frame cache (as the launches')."""
    makers = _path_makers(trace, TOP_OPS)
    return tuple(makers[n]() for n in PATH_TITLES)


def launches(trace: Trace, top: int = TOP_GAPS, kernel_wait: int | None = None, only: str | None = None) -> Document:
    """Launch cost and delay per kernel and per CPU op, queue length and idle time by cause per
    stream, the `top` longest idle gaps (0: every one); `kernel_wait`: the gap under which a
    queued op's wait is the GPU's own (default HTA's 30 ns). `only`: that table alone (what
    `--table` prints)."""
    wait = la.KERNEL_WAIT_NS if kernel_wait is None else kernel_wait
    command = f"kview launches {trace.name}" + (f" --table {only}" if only else "")
    command += (f" --top {top}" if top != TOP_GAPS else "") + (
        f" --kernel-wait {wait}" if kernel_wait is not None else ""
    )
    if only is None and top == TOP_GAPS and kernel_wait is None:  # the explorer's and a plain command's
        *tables, held = _kept_launches(trace)
        sections = tuple(Section(n, LAUNCH_TITLES[n], t) for n, t in zip(WHOLE_LAUNCHES, tables))
        notes = () if held["launched"][0] else (NO_LAUNCHES,)
    else:
        sections = _sections(LAUNCH_TITLES, _launch_makers(trace, top, wait), only)
        notes = (NO_LAUNCHES,) if launched(trace).height == 0 else ()
    return Document(
        "Launches",
        sections,
        notes,
        command,
        empty="(none)\n",
        written_empty=("json",),
    )


def critical_path(trace: Trace, top: int = TOP_OPS, only: str | None = None) -> Document:
    """Each step's critical path (its length, GPU / CPU / launch time on it, CPU- or GPU-bound)
    and the `top` ops the paths spend their time in (0: every one). `only`: that table alone."""
    command = f"kview critical-path {trace.name}" + (f" --table {only}" if only else "")
    command += f" --top {top}" if top != TOP_OPS else ""
    if only is None and top == TOP_OPS:
        sections = tuple(Section(n, PATH_TITLES[n], t) for n, t in zip(PATH_TITLES, _kept_paths(trace)))
    else:
        sections = _sections(PATH_TITLES, _path_makers(trace, top), only)
    return Document(
        "Critical path",
        sections,
        command=command,
        empty="(none)\n",
        written_empty=("json",),
    )
