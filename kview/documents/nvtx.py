"""NVTX ranges: `kview nvtx` and the explorer's NVTX tree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kview.analysis.nvtx_tree import path_table
from kview.documents import Document, Section

if TYPE_CHECKING:
    import polars as pl

    from kview.trace import Trace

# what a reader sees of each range path; the tree keeps its ids and first instance besides
COLUMNS = ("Path", "Depth", "Instances", "GPU (ns)", "CPU (ns)", "GPU ops")
NO_RANGES = "no NVTX or record_function ranges"


def nvtx(trace: Trace) -> Document:
    """GPU and CPU time per NVTX range path (`path_table`), parents before their children: the
    GPU time of the work launched while the range was open, from any thread; the CPU time the
    range was open; its instances and GPU ops."""

    return nvtx_of(path_table(trace), trace.name)


def nvtx_of(paths: pl.DataFrame, name: str) -> Document:
    """`nvtx` of the path table `paths` of the trace named `name`."""
    return Document(
        "NVTX",
        (Section("ranges", "NVTX ranges", paths, columns=COLUMNS),),
        () if paths.height else (NO_RANGES,),
        f"kview nvtx {name}",
    )
