"""Compare: `kview compare` and the explorer's Compare view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis.compare import (
    distinct_labels,
    kept_phase_windows,
    phase_windows,
    rank_windows,
    root_window,
    side_by_side,
)
from kview.analysis.layers import phase_times
from kview.derived import derived
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.analysis.compare import Window
    from kview.analysis.rank_files import SummarizedRun
    from kview.analysis.ranks import Run
    from kview.trace import Trace

WHAT = {
    "range": "the GPU time of the work launched while each range was open, from any thread (a layer's "
    "backward runs after its range closed: b shows by layer)",
    "layer": "the GPU time of each layer's kernels, forward and backward",
    "category": "the GPU time per kernel category",
    "kernel": "the GPU time per kernel",
}


def what(by: str, metric: str) -> str:
    """What the compared figures are, in words."""
    return WHAT[by] if metric == "gpu" else "the CPU time each range was open"


def _options(by: str, metric: str, root: str | None) -> str:
    return (f" --root {root}" if root else "") + f" --by {by}" + (" --metric cpu" if metric == "cpu" else "")


def _document(frame: pl.DataFrame, command: str, terminal: pl.DataFrame | None = None, notes=()) -> Document:
    return Document("Compare", (Section("compare", "Compare", frame, terminal=terminal),), tuple(notes), command)


def traces(traces: list[Trace], by: str, metric: str = "gpu", root: str | None = None) -> Document:
    """Several traces side by side, each within the last instance of range `root` (when given).
    The columns are named by the traces' stems; a terminal shows what tells them apart
    (`distinct_labels`: forward, train)."""

    stems = [t.stem for t in traces]
    frame = side_by_side([root_window(t, root, stem) for t, stem in zip(traces, stems)], by, metric)
    labels = distinct_labels(stems)
    terminal = None if labels == stems else relabelled(frame, stems, labels)
    command = "kview compare " + " ".join(t.name for t in traces) + _options(by, metric, root)
    return _document(frame, command, terminal)


def relabelled(frame: pl.DataFrame, old: list[str], new: list[str]) -> pl.DataFrame:
    """side_by_side's table with its columns named by `new` instead of `old` (all distinct):
    the columns, then Δ and Δ% of each later one, named after it; rows and values stay."""
    names = dict(zip(old, new))
    renamed = {}
    for c in frame.columns[1:]:
        for prefix in ("", "Δ ", "Δ% "):
            if c.startswith(prefix) and c[len(prefix) :] in names:
                renamed[c] = prefix + names[c[len(prefix) :]]
                break
    return frame.rename(renamed)


# what the explorer's Compare view shows first of one trace: its phases by category, GPU time
FIRST = ("category", "gpu", None)


@derived(key="documents.compare_phases", version="1", persist=True)
def _kept_phases(trace: Trace) -> pl.DataFrame:
    """The trace's phases side by side by category (GPU time), kept in the frame cache: a second
    look reads it instead of measuring every phase's kernels again (seconds at a million kernels).
    A trace without phases: an empty table (the explorer's worker makes it for every trace)."""
    names = phase_times(trace)["Phase"].to_list()
    if not names:
        return pl.DataFrame()
    return side_by_side(kept_phase_windows(trace, names), "category", "gpu")


def phases(
    trace: Trace,
    ranges: list[str],
    by: str,
    metric: str = "gpu",
    root: str | None = None,
    windows: list[Window] | None = None,
) -> Document:
    """One trace's ranges (its phases) side by side; `windows`: theirs, when already known."""

    if (by, metric, root) == FIRST and ranges == phase_times(trace)["Phase"].to_list():
        frame = _kept_phases(trace)
    else:
        frame = side_by_side(windows if windows is not None else phase_windows(trace, ranges, root), by, metric)
    command = f"kview compare {trace.name} --ranges {','.join(ranges)}" + _options(by, metric, root)
    return _document(frame, command)


def ranks(run: Run, names: list[str], by: str, metric: str = "gpu", root: str | None = None) -> Document:
    """The ranks of a run side by side (`kview compare --ranks`), and the spread across them."""

    frame = side_by_side(rank_windows(run, root), by, metric, True)
    command = "kview compare " + " ".join(names) + " --ranks" + _options(by, metric, root)
    return _document(frame, command, notes=run.notes)


def summarized(run: SummarizedRun, by: str, metric: str, cluster: str) -> Document:
    """The ranks side by side from each rank file's columns (`kview compare --cluster`)."""
    from pathlib import Path

    names = [Path(f).name for f in run.files]
    command = "kview compare " + " ".join(names) + f" --cluster {cluster}" + _options(by, metric, None)
    return _document(run.compare(by), command, notes=run.notes)
