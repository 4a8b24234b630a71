"""Efficiency: `kview efficiency` and the explorer's Efficiency view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis import efficiency as eff
from kview.analysis.gpu_peaks import PEAKS
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.trace import Trace

NO_GPU_WORK = "no GPU work: nothing to measure against a GPU's peak"


def efficiency(trace: Trace, gpu: str | None = None) -> Document:
    """Achieved against the GPU's peak (`gpu`'s, when given, instead of the one the trace names):
    the GPUs and their peaks, MFU and bandwidth by step, layer, category and kernel, and the FP32
    GEMMs that could use tensor cores. The notes: no GPU work, or a GPU whose peaks kview does not
    know."""
    gpus = eff.trace_gpus(trace, gpu).join(PEAKS.drop("Source"), on="GPU", how="left")
    sections = (
        Section("gpus", "GPUs and their peaks (dense)", gpus),
        Section("steps", "Efficiency by step", eff.by_step(trace, gpu)),
        Section("layers", "Efficiency by layer", eff.by_group(trace, "Layer", gpu)),
        Section("categories", "Efficiency by category", eff.by_group(trace, "Category", gpu)),
        Section("kernels", "Efficiency by kernel", eff.by_kernel(trace, gpu)),
        Section("tensor-cores", "FP32 GEMMs that could use tensor cores", eff.tensor_core_candidates(trace, gpu)),
    )
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
