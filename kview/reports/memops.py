"""cuda_gpu_mem_time_sum and cuda_gpu_mem_size_sum: memcpy by direction and memset."""

from __future__ import annotations

import polars as pl

from kview.analysis.summary_stats import order_like_sqlite, percent_of_total, sqlite_round, stats_aggs
from kview.reports.base import Report, empty
from kview.trace import Trace


def memops(trace: Trace) -> pl.DataFrame:
    """One row per memcpy/memset: Operation label as nsys writes it, duration and bytes.

    Exports before 2022.4 lack ENUM_CUDA_MEMCPY_OPER; nsys then skips memcpy rows entirely,
    kview labels them from the fixed CUPTI enum instead (a deliberate, documented difference).
    """
    parts = []
    if trace.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
        labels = trace.memcpy_kind_labels
        lab = pl.DataFrame(
            {"copy_kind": list(labels), "label": list(labels.values())},
            schema={"copy_kind": pl.Int64, "label": pl.String},
        )
        m = trace.columns("memcpy", ["start", "end", "bytes", "copy_kind"]).join(lab, on="copy_kind", how="inner")
        parts.append(
            m.select(
                pl.format("[CUDA memcpy {}]", "label").alias("Operation"),
                (pl.col("end") - pl.col("start")).alias("dur"),
                pl.col("bytes").alias("size"),
            )
        )
    if trace.has("CUPTI_ACTIVITY_KIND_MEMSET"):
        parts.append(
            trace.columns("memset", ["start", "end", "bytes"]).select(
                pl.lit("[CUDA memset]").alias("Operation"),
                (pl.col("end") - pl.col("start")).alias("dur"),
                pl.col("bytes").alias("size"),
            )
        )
    if not parts:
        return pl.DataFrame(schema={"Operation": pl.String, "dur": pl.Int64, "size": pl.Int64})
    return pl.concat(parts)


def cuda_gpu_mem_time_sum(trace: Trace) -> Report:
    name, title = "cuda_gpu_mem_time_sum", "CUDA GPU MemOps Summary (by Time)"
    if not (trace.has("CUPTI_ACTIVITY_KIND_MEMCPY") or trace.has("CUPTI_ACTIVITY_KIND_MEMSET")):
        return empty(name, title, "does not contain GPU memory data")
    g = memops(trace).group_by("Operation").agg(stats_aggs("dur"))
    g = g.with_columns(percent_of_total().alias("Time (%)"))
    g = sqlite_round(g, ["Time (%)", "avg", "med", "stddev"])
    g = order_like_sqlite(g, ["Operation"], ["total"], [True])
    return Report(
        name,
        title,
        g.select(
            "Time (%)",
            pl.col("total").alias("Total Time (ns)"),
            pl.col("num").alias("Count"),
            pl.col("avg").alias("Avg (ns)"),
            pl.col("med").alias("Med (ns)"),
            pl.col("min").alias("Min (ns)"),
            pl.col("max").alias("Max (ns)"),
            pl.col("stddev").alias("StdDev (ns)"),
            "Operation",
        ),
    )


def cuda_gpu_mem_size_sum(trace: Trace) -> Report:
    name, title = "cuda_gpu_mem_size_sum", "CUDA GPU MemOps Summary (by Size)"
    if not (trace.has("CUPTI_ACTIVITY_KIND_MEMCPY") or trace.has("CUPTI_ACTIVITY_KIND_MEMSET")):
        return empty(name, title, "does not contain GPU memory data")
    g = memops(trace).group_by("Operation").agg(stats_aggs("size"))
    g = order_like_sqlite(g, ["Operation"], ["total"], [True])
    mb = {
        "total": "Total (MB)",
        "avg": "Avg (MB)",
        "med": "Med (MB)",
        "min": "Min (MB)",
        "max": "Max (MB)",
        "stddev": "StdDev (MB)",
    }
    cols = [(pl.col(k).cast(pl.Float64) / 1e6).alias(v) for k, v in mb.items()]
    out = g.select(cols[0], pl.col("num").alias("Count"), *cols[1:], "Operation")
    return Report(name, title, out, decimals={v: 3 for v in mb.values()})
