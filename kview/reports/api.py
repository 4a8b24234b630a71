"""cuda_api_sum and osrt_sum: host API calls summarized per name id."""

from __future__ import annotations

import polars as pl

from kview.analysis.summary_stats import (
    order_like_sqlite,
    percent_of_total,
    sqlite_round,
    stats_aggs,
    strip_version_suffix,
)
from kview.reports.base import Report, empty
from kview.trace import Trace

HEADERS = {
    "total": "Total Time (ns)",
    "num": "Num Calls",
    "avg": "Avg (ns)",
    "med": "Med (ns)",
    "min": "Min (ns)",
    "max": "Max (ns)",
    "stddev": "StdDev (ns)",
}


def _api_summary(trace: Trace, frame: pl.DataFrame, name: str, title: str, strip: bool) -> Report:
    g = frame.with_columns((pl.col("end") - pl.col("start")).alias("dur")).group_by("name_id").agg(stats_aggs("dur"))
    g = trace.with_strings(g, "name_id", "Name")
    if strip:
        g = g.with_columns(strip_version_suffix(pl.col("Name")).alias("Name"))
    g = g.with_columns(percent_of_total().alias("Time (%)"))
    g = sqlite_round(g, ["Time (%)", "avg", "med", "stddev"])
    g = order_like_sqlite(g, ["name_id"], ["total"], [True])
    return Report(name, title, g.select(pl.col("Time (%)"), *[pl.col(k).alias(v) for k, v in HEADERS.items()], "Name"))


def cuda_api_sum(trace: Trace) -> Report:
    title = "CUDA API Summary"
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return empty("cuda_api_sum", title, "does not contain CUDA trace data")
    return _api_summary(trace, trace.columns("runtime", ["start", "end", "name_id"]), "cuda_api_sum", title, True)


def osrt_sum(trace: Trace) -> Report:
    title = "OS Runtime Summary"
    if not trace.has("OSRT_API"):
        return empty("osrt_sum", title, "does not contain OS Runtime trace data")
    rows = trace.columns("osrt", ["start", "end", "name_id", "event_class"]).filter(pl.col("event_class") == 27)
    return _api_summary(trace, rows, "osrt_sum", title, False)
