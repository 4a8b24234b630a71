"""nsys-compatible reports: each takes a Trace and returns a Report equal to `nsys stats`."""

from __future__ import annotations

from collections.abc import Callable

from kview.reports.api import cuda_api_sum, osrt_sum
from kview.reports.base import Report
from kview.reports.gpu_kernels import cuda_gpu_kern_gb_sum, cuda_gpu_kern_sum, cuda_kern_exec_sum
from kview.reports.memops import cuda_gpu_mem_size_sum, cuda_gpu_mem_time_sum
from kview.reports.nvtx import nvtx_gpu_proj_sum, nvtx_kern_sum, nvtx_pushpop_sum, nvtx_startend_sum, nvtx_sum
from kview.trace import Trace

REPORTS: dict[str, Callable[[Trace], Report]] = {
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
