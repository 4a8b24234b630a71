"""Everything the views show, computed off the UI thread from the core (no Textual here)."""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass
class TraceData:
    trace: object
    kern_sum: pl.DataFrame
    table: pl.DataFrame | None = None       # attributed kernels (filled in after the summary)
    overview: object | None = None
    paths: pl.DataFrame | None = None
    layers: pl.DataFrame | None = None
    phases: pl.DataFrame | None = None
    names: list[str] = field(default_factory=list)


STAGES = ("opening", "kernel summary", "attributing kernels", "overview", "NVTX tree", "layers")


def load(path: str, use_cache: bool, progress) -> TraceData:
    """Load in stages; `progress(stage_index, text, data)` is called after each stage so the UI
    shows the first table before the slow stages finish."""
    from kview.analysis.attribution import attribute
    from kview.analysis.layers import layer_times, phase_times
    from kview.analysis.nvtx_tree import path_table
    from kview.analysis.kernel_names import short_names
    from kview.analysis.overview import build
    from kview.reports import cuda_gpu_kern_sum
    from kview.trace import open_trace

    progress(0, f"opening {path}", None)
    trace = open_trace(path, use_cache=use_cache)
    progress(1, "kernel summary", None)
    data = TraceData(trace, cuda_gpu_kern_sum(trace).frame)
    progress(2, "attributing kernels", data)
    table = attribute(trace)
    # grouping keys derived once, here in the worker, so no keystroke pays for them
    data.table = table.with_columns(short_names(table["Kernel"]).alias("_short"),
                                    pl.col("NVTX Path").str.split(" > ").list.last().alias("_range"))
    data.names = sorted(data.table["Kernel"].unique().drop_nulls().to_list())[:5000]
    progress(3, "overview", data)
    data.overview = build(trace)
    progress(4, "NVTX tree", data)
    data.paths = path_table(trace)
    progress(5, "layers", data)
    data.layers = layer_times(trace)
    data.phases = phase_times(trace)
    progress(6, "done", data)
    return data
