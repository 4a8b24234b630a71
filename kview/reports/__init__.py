"""nsys-compatible reports: each takes a Trace and returns a Report equal to `nsys stats`."""

from __future__ import annotations

import json
from collections.abc import Callable

import polars as pl

from kview.derived import Codec, derived
from kview.reports.api import cuda_api_sum, osrt_sum
from kview.reports.base import Report
from kview.reports.gpu_kernels import cuda_gpu_kern_gb_sum, cuda_gpu_kern_sum, cuda_kern_exec_sum
from kview.reports.memops import cuda_gpu_mem_size_sum, cuda_gpu_mem_time_sum
from kview.reports.nvtx import nvtx_gpu_proj_sum, nvtx_kern_sum, nvtx_pushpop_sum, nvtx_startend_sum, nvtx_sum
from kview.trace import Trace


def _codec(name: str) -> Codec:
    """Report `name` as its frame and one row of the rest."""

    def encode(r: Report) -> tuple[pl.DataFrame, pl.DataFrame]:
        about = pl.DataFrame(
            {"title": [r.title], "skipped": [r.skipped], "decimals": [json.dumps(r.decimals)]},
            schema={"title": pl.String, "skipped": pl.String, "decimals": pl.String},
        )
        return r.frame, about

    def decode(frames: tuple[pl.DataFrame, ...]) -> Report:
        frame, about = frames
        title, skipped, decimals = about.row(0)
        return Report(name, title, frame, skipped, json.loads(decimals))

    return Codec("report", ("", "about"), encode, decode)


def _kept(name: str, build: Callable[[Trace], Report]) -> Callable[[Trace], Report]:
    """The report `build` makes, computed once per trace and kept in the disk cache: a reopen
    reads back a table of a few hundred rows instead of redoing the work over millions. A report
    skipped for the memory budget (--max-memory) depends on more than the trace: not kept."""
    return derived(
        key=f"report.{name}", version="1", persist=True, codec=_codec(name), keep=lambda r: r.skipped is None
    )(build)


_REPORTS: dict[str, Callable[[Trace], Report]] = {
    "nvtx_sum": nvtx_sum,
    "osrt_sum": osrt_sum,
    "cuda_api_sum": cuda_api_sum,
    "cuda_gpu_kern_sum": cuda_gpu_kern_sum,
    "cuda_gpu_mem_time_sum": cuda_gpu_mem_time_sum,
    "cuda_gpu_mem_size_sum": cuda_gpu_mem_size_sum,
    "cuda_gpu_kern_gb_sum": cuda_gpu_kern_gb_sum,
    "nvtx_pushpop_sum": nvtx_pushpop_sum,
    "nvtx_startend_sum": nvtx_startend_sum,
    "nvtx_kern_sum": nvtx_kern_sum,
    "nvtx_gpu_proj_sum": nvtx_gpu_proj_sum,
    "cuda_kern_exec_sum": cuda_kern_exec_sum,
}
# the reports that read no GPU table (kernels, memory copies and sets), only NVTX ranges
NO_GPU_TABLES = frozenset({"nvtx_sum", "nvtx_pushpop_sum", "nvtx_startend_sum"})
REPORTS: dict[str, Callable[[Trace], Report]] = {name: _kept(name, build) for name, build in _REPORTS.items()}

# What `nsys stats` runs when no report is named (nsys 2023.2 and later).
DEFAULT_REPORTS = [
    "nvtx_sum",
    "osrt_sum",
    "cuda_api_sum",
    "cuda_gpu_kern_sum",
    "cuda_gpu_mem_time_sum",
    "cuda_gpu_mem_size_sum",
]

__all__ = ["REPORTS", "DEFAULT_REPORTS", "Report"]
