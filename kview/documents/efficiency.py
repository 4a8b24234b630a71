"""Efficiency: `kview efficiency` and the explorer's Efficiency view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis import efficiency as eff
from kview.analysis.gpu_peaks import PEAKS
from kview.derived import derived, frames
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.trace import Trace

NO_GPU_WORK = "no GPU work: nothing to measure against a GPU's peak"
TITLES = {
    "gpus": "GPUs and their peaks (dense)",
    "steps": "Efficiency by step",
    "layers": "Efficiency by layer",
    "categories": "Efficiency by category",
    "kernels": "Efficiency by kernel",
    "tensor-cores": "FP32 GEMMs that could use tensor cores",
}


def _tables(trace: Trace, gpu: str | None) -> tuple[pl.DataFrame, ...]:
    """The document's tables, in TITLES' order, against `gpu`'s peaks (None: the trace's GPU's)."""
    return (
        eff.trace_gpus(trace, gpu).join(PEAKS.drop("Source"), on="GPU", how="left"),
        eff.by_step(trace, gpu),
        eff.by_group(trace, "Layer", gpu),
        eff.by_group(trace, "Category", gpu),
        eff.by_kernel(trace, gpu),
        eff.tensor_core_candidates(trace, gpu),
    )


@derived(key="documents.efficiency", version="1", persist=True, codec=frames(*TITLES))
def _kept(trace: Trace) -> tuple[pl.DataFrame, ...]:
    """The tables against the trace's own GPU, kept in the frame cache: a second look reads
    them instead of measuring every kernel again (seconds at a million kernels)."""
    return _tables(trace, None)


def efficiency(trace: Trace, gpu: str | None = None) -> Document:
    """Achieved against the GPU's peak (`gpu`'s, when given, instead of the one the trace names):
    the GPUs and their peaks, MFU and bandwidth by step, layer, category and kernel, and the FP32
    GEMMs that could use tensor cores. The notes: no GPU work, or a GPU whose peaks kview does not
    know."""
    tables = _tables(trace, gpu) if gpu else _kept(trace)
    sections = tuple(Section(name, title, t) for (name, title), t in zip(TITLES.items(), tables))
    gpus = tables[0]
    notes = []
    if gpus.height == 0:
        notes.append(NO_GPU_WORK)
    unknown = gpus.filter(pl.col("GPU").is_null())
    if unknown.height:
        names = ", ".join(sorted({str(n) for n in unknown["Name"].drop_nulls().to_list()})) or "it names none"
        notes.append(f"no peaks known for its GPU ({names}): MFU and bandwidth are left out; give --gpu NAME")
    return Document(
        "Efficiency",
        sections,
        tuple(notes),
        f"kview efficiency {trace.name}" + (f" --gpu {gpu}" if gpu else ""),
        empty="(none)\n",
        written_empty=("json",),
    )


def peaks(trace_name: str) -> Document:
    """The GPU peak table kview measures against (`kview efficiency T --table peaks`): no trace read."""
    return Document(
        "Efficiency",
        (Section("peaks", "GPU peaks", PEAKS),),
        command=f"kview efficiency {trace_name} --table peaks",
        written_empty=("json",),
    )
