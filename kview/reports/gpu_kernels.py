"""cuda_gpu_kern_sum, cuda_gpu_kern_gb_sum and cuda_kern_exec_sum."""

from __future__ import annotations

import polars as pl

from kview.analysis.summary_stats import (
    STAT_HEADERS,
    order_like_sqlite,
    percent_of_total,
    sqlite_round,
    stats_aggs,
    strip_version_suffix,
)
from kview.io.schema import PID_MASK, pid_of, tid_of
from kview.reports.base import Report, empty
from kview.trace import Trace


def _named_kernels(trace: Trace, extra: tuple[str, ...] | list[str] = ()) -> pl.DataFrame:
    k = trace.columns("kernels", ["start", "end", "name_id", *extra])
    return k.with_columns((pl.col("end") - pl.col("start")).alias("dur"))


def cuda_gpu_kern_sum(trace: Trace) -> Report:
    title = "CUDA GPU Kernel Summary"
    if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        return empty("cuda_gpu_kern_sum", title, "does not contain CUDA kernel data")
    g = _named_kernels(trace).group_by("name_id").agg(stats_aggs("dur"))
    g = trace.with_strings(g, "name_id", "Name")
    return _kernel_summary("cuda_gpu_kern_sum", title, g, [], [])


def cuda_gpu_kern_gb_sum(trace: Trace) -> Report:
    title = "CUDA GPU Kernel/Grid/Block Summary"
    if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        return empty("cuda_gpu_kern_gb_sum", title, "does not contain CUDA kernel data")
    dims = ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]
    g = _named_kernels(trace, dims).group_by(["name_id", *dims]).agg(stats_aggs("dur"))
    g = trace.with_strings(g, "name_id", "Name").with_columns(
        pl.format("{} {} {}", *[pl.col(c).cast(pl.String).str.pad_start(4) for c in dims[:3]]).alias("GridXYZ"),
        pl.format("{} {} {}", *[pl.col(c).cast(pl.String).str.pad_start(4) for c in dims[3:]]).alias("BlockXYZ"),
    )
    return _kernel_summary("cuda_gpu_kern_gb_sum", title, g, ["GridXYZ", "BlockXYZ"], dims)


def _kernel_summary(name, title, g, extra, dims) -> Report:
    g = g.with_columns(percent_of_total().alias("Time (%)"))
    g = sqlite_round(g, ["Time (%)", "avg", "med", "stddev"])
    # ORDER BY total DESC, instances, Name; remaining ties in GROUP BY (name, grid, block) order.
    g = order_like_sqlite(g, ["Name", *dims], ["total", "num", "Name"], [True, False, False])
    out = g.select(pl.col("Time (%)"), *[pl.col(k).alias(v) for k, v in STAT_HEADERS.items()], *extra, "Name")
    return Report(name, title, out)


def cuda_kern_exec_sum(trace: Trace) -> Report:
    title = "CUDA Kernel Launch & Exec Time Summary"
    name = "cuda_kern_exec_sum"
    if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        return empty(name, title, "does not contain CUDA kernel data")
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return empty(name, title, "does not contain CUDA API data")
    k = trace.columns("kernels", ["start", "end", "device", "correlation", "global_pid", "name_id"])
    r = trace.columns("runtime", ["start", "end", "global_tid", "correlation", "name_id"]).select(
        pl.col("start").alias("r_start"),
        pl.col("end").alias("r_end"),
        "global_tid",
        "correlation",
        pl.col("name_id").alias("api_id"),
        (pl.col("global_tid") & PID_MASK).alias("global_pid"),
    )
    j = k.join(r, on=["correlation", "global_pid"], how="inner")
    j = j.with_columns(
        pid_of(pl.col("global_tid")).alias("PID"),
        tid_of(pl.col("global_tid")).alias("TID"),
        (pl.col("r_end") - pl.col("r_start")).alias("api"),
        pl.when(pl.col("start") - pl.col("r_end") >= 0).then(pl.col("start") - pl.col("r_end")).alias("que"),
        (pl.col("end") - pl.col("start")).alias("kern"),
        (pl.max_horizontal("r_end", "end") - pl.col("r_start")).alias("tot"),
    )
    j = trace.with_strings(j, "api_id", "api_raw")
    j = trace.with_strings(j, "name_id", "Kernel Name")
    j = j.with_columns(strip_version_suffix(pl.col("api_raw")).alias("API Name"))
    keys = ["PID", "TID", "device", "API Name", "Kernel Name"]
    aggs = [pl.len().alias("Count"), pl.col("que").count().alias("QCount")]
    for p, col in (("T", "tot"), ("A", "api"), ("Q", "que"), ("K", "kern")):
        aggs += stats_aggs(col, prefix=p)
    g = j.group_by(keys).agg(aggs)
    rounded = [f"{p}{s}" for p in "TAQK" for s in ("avg", "med", "stddev")]
    g = sqlite_round(g, rounded)
    g = order_like_sqlite(g, keys, ["Tavg"], [True])
    cols = [pl.col("PID"), pl.col("TID"), pl.col("device").alias("DevId"), pl.col("Count"), pl.col("QCount")]
    for p in "TAQK":
        cols += [
            pl.col(f"{p}avg").alias(f"{p}Avg (ns)"),
            pl.col(f"{p}med").alias(f"{p}Med (ns)"),
            pl.col(f"{p}min").alias(f"{p}Min (ns)"),
            pl.col(f"{p}max").alias(f"{p}Max (ns)"),
            pl.col(f"{p}stddev").alias(f"{p}StdDev (ns)"),
        ]
    cols += [pl.col("API Name"), pl.col("Kernel Name")]
    return Report(name, title, g.select(cols))
