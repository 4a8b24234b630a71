"""Layers and phases: `kview layers`, `kview phases` and the explorer's Layers view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis.layers import backward_unplaced, layer_times, phase_times
from kview.derived import Codec, derived
from kview.documents import Document, Section
from kview.notation import bar, stacked_bar

if TYPE_CHECKING:
    from kview.trace import Trace

NO_LAYERS = "no repeated layer ranges found (layer_0.., Enc_0..; give --pattern REGEX)"
BAR = "Forward █ / Backward ▓"


def _layers(trace: Trace, pattern: str | None) -> tuple[pl.DataFrame, str | None]:
    """The layers' table, and the note on backward time no layer holds (None: none)."""
    df = layer_times(trace, pattern)
    return df, backward_unplaced(trace, pattern) if df.height else None


def _encode(v: tuple[pl.DataFrame, str | None]) -> tuple[pl.DataFrame, pl.DataFrame]:
    return v[0], pl.DataFrame({"note": [v[1]]}, schema={"note": pl.String})


@derived(
    key="documents.layers",
    version="1",
    persist=True,
    codec=Codec("layers,note", ("layers", "note"), _encode, lambda f: (f[0], f[1]["note"][0])),
)
def _kept_layers(trace: Trace) -> tuple[pl.DataFrame, str | None]:
    """The layers found by kview's own rules (no --pattern), kept in the frame cache: a second
    look reads them instead of walking every range's path again (seconds at a million kernels)."""
    return _layers(trace, None)


def layers(trace: Trace, pattern: str | None = None) -> Document:
    """Forward and backward GPU time per repeated layer range (and per sublayer); a terminal
    adds a bar of the two. The notes: why there is no table, or why Backward is empty."""

    df, unknown = _layers(trace, pattern) if pattern else _kept_layers(trace)
    command = f"kview layers {trace.name}" + (f" --pattern {pattern}" if pattern else "")
    if df.height == 0:  # not an error: the trace has no such ranges; the document is empty
        return Document("Layers", (Section("layers", "Layers", df),), (NO_LAYERS,), command, written_empty=("json",))
    terminal = df.with_columns(stacked_bar(["Forward (ns)", "Backward (ns)"]).alias(BAR))
    return Document(
        "Layers", (Section("layers", "Layers", df, terminal=terminal),), (unknown,) if unknown else (), command
    )


def phases(trace: Trace) -> Document:
    """GPU time per phase (forward_pass, backward_pass, optimizer_step, ...); a terminal adds a bar."""

    df = phase_times(trace)
    notes = () if df.height else ("no phase ranges (user NVTX or record_function ranges at the top of a thread)",)
    gpu = pl.col("GPU Time (ns)")
    terminal = df.with_columns(bar(gpu / gpu.max(), width=30).alias("Bar")) if df.height else None
    return Document(
        "Phases", (Section("phases", "Phases", df, terminal=terminal),), notes, f"kview phases {trace.name}"
    )
