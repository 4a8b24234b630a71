"""Kernels: `kview kernels` and the explorer's Kernels view (its rows)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis.attribution import attribute, shown
from kview.analysis.cpu_ops import cpu_op_summary, no_gpu_work_note
from kview.derived import derived, frames
from kview.documents import Document, Section
from kview.notation import distinct_short_names, short_names

if TYPE_CHECKING:
    from kview.trace import Trace


def kernels(
    trace: Trace,
    pred: pl.Expr | None = None,
    absolute: bool = False,
    filter_text: str = "",
    table: pl.DataFrame | None = None,
) -> Document:
    """One row per GPU op with its direction, layer, op, shapes, category and FLOPs (`attribute`),
    those the filter `pred` (parsed from `filter_text`) keeps; with `absolute` each op's start on
    the clock the file records too. A trace without GPU work: its CPU op times, and a note
    saying so. `table`: the attributed table, when already made."""

    command = f"kview kernels {trace.name}" + (f" --filter '{filter_text}'" if filter_text else "")
    command += " --absolute" if absolute else ""
    if table is None:
        table = attribute(trace)
    if table.height == 0:  # no GPU work: what the trace does hold, its CPU op times
        ops = cpu_op_summary(trace)
        note = no_gpu_work_note(trace) + ("; showing its CPU op times instead" if ops.height else "")
        return Document(
            "Kernels", (Section("kernels", "Kernels", ops if ops.height else shown(table)),), (note,), command
        )
    if pred is not None:
        table = table.filter(pred)
    out = shown(table)
    if absolute:
        out = out.with_columns(absolute_start(trace, out["Start (ns)"]))
    return Document("Kernels", (Section("kernels", "Kernels", out),), (), command)


def absolute_start(trace: Trace, start: pl.Series) -> pl.Series:
    """`start` (from the trace's zero) on the clock the file records: UTC for an nsys export (its
    session start plus the time), else the time as the file holds it (a torch.profiler trace's
    own clock)."""
    clock = trace.clock
    if clock is not None and clock[0] == "UTC":
        return (start + clock[1]).alias("Start (UTC, ns)")
    return (start + trace.origin).alias("Start (as recorded, ns)")


@derived(key="documents.kernel_groups", version="1", persist=True, codec=frames("columns", "names"))
def kernel_groups(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """What the explorer groups and names the attributed kernels by, a row per kernel (`_short`
    its short name, `_name` the name the Kernels view gives it, `_range` its innermost range:
    the text after the path's last " > "), and a row per kernel name with its `_name`; kept in
    the frame cache, so a second look does not derive them again from every kernel's name and
    path (seconds at a million kernels)."""
    table = attribute(trace)
    columns = table.select(
        short_names(table["Kernel"]).alias("_short"),
        distinct_short_names(table["Kernel"]).alias("_name"),
        # a replace, not a split: a split would make a list of every level of every row first
        pl.col("NVTX Path").str.replace(r"(?s)^.* > ", "").alias("_range"),
    )
    names = pl.DataFrame([table["Kernel"], columns["_name"]])[table["Kernel"].arg_unique()]
    return columns, names
