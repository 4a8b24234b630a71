"""What a trace holds besides GPU work, and the CPU op times of one without any (a CPU-only
run, an MTIA rank, a rank without a GPU, a capture on a machine without CUDA).

CPU ops are PyTorch's op ranges (emit_nvtx text in an export, the CPU ops of a torch.profiler
trace) grouped by op name, as torch.profiler's `key_averages()` table shows them: calls, total
time (inclusive) and self time (minus the ranges nested directly inside, on the same thread).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import gpu_op_count
from kview.derived import INT_ROW, derived
from kview.trace import Trace

SCHEMA = pl.Schema(
    {"Op": pl.String, "Calls": pl.UInt32, "Total (ns)": pl.Int64, "Self (ns)": pl.Int64, "Avg (ns)": pl.Float64}
)


@derived
def cpu_op_summary(trace: Trace) -> pl.DataFrame:
    """One row per op name: calls, total and self time, heaviest self time first."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema=SCHEMA)
    tree = nv.projection_tree(trace)
    if tree.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    dur = pl.col("end") - pl.col("start")
    kids = (
        tree.filter(pl.col("parent").is_not_null())
        .group_by("parent")
        .agg(dur.sum().alias("inner"))
        .rename({"parent": "id"})
    )
    ops = (
        nv.labels(trace)
        .filter(pl.col("marker"))
        .select("name_code", pl.col("label").str.extract(r"^([^,]*)", 1).str.strip_chars().alias("Op"))
    )
    r = (
        tree.select("id", "name_code", "start", "end")
        .join(ops, on="name_code", how="inner")
        .join(kids, on="id", how="left")
        .with_columns(dur.alias("d"))
    )
    g = r.group_by("Op").agg(
        pl.len().alias("Calls"),
        pl.col("d").sum().alias("Total (ns)"),
        (pl.col("d") - pl.col("inner").fill_null(0)).clip(0).sum().alias("Self (ns)"),
        pl.col("d").mean().round(1).alias("Avg (ns)"),
    )
    return g.sort(["Self (ns)", "Op"], descending=[True, False]).cast(SCHEMA)


# kept in the frame cache: counting a reopened trace's ranges would read every range's label
@derived(key="cpu_ops.holdings", version="1", persist=True, codec=INT_ROW)
def holdings(trace: Trace) -> dict[str, int]:
    """How many CPU ops, user ranges, API calls and GPU ops the trace holds."""

    # counted, not made: the Overview asks before attribution reads the GPU ops
    out = {"CPU ops": 0, "ranges": 0, "API calls": 0, "GPU ops": gpu_op_count(trace)}
    if trace.has("NVTX_EVENTS"):
        # each range's kind gathered by its name code: a join of five million ranges with five
        # million labels cost seconds, a gather milliseconds; a byte a code and a range (0 no
        # label, 1 user range, 2 op marker), not counts of eight bytes (90 MB over the names)
        labels = nv.labels(trace)
        codes = nv.projection_ranges(trace)["name_code"].drop_nulls().to_numpy()
        known = labels["name_code"].to_numpy()
        size = int(max(codes.max(initial=-1), known.max(initial=-1))) + 1
        kind = np.zeros(size, dtype=np.uint8)
        kind[known] = np.where(labels["marker"].fill_null(False).to_numpy(), np.uint8(2), np.uint8(1))
        of_range = kind[codes]
        out["CPU ops"] = int(np.count_nonzero(of_range == 2))
        out["ranges"] = int(np.count_nonzero(of_range == 1))
    if trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        out["API calls"] = trace.row_count("runtime")
    return out


def no_gpu_work_note(trace: Trace) -> str:
    """What a view says for a trace without GPU kernels: what the trace holds instead."""
    h = holdings(trace)
    has = [f"{h[k]:,} {k}" for k in ("CPU ops", "ranges", "API calls") if h[k]]
    return "no GPU kernels in this trace" + (f"; it holds {', '.join(has)}" if has else "")
