"""What a report is: a titled polars table with nsys's column headers, or a reason it is empty."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl


@dataclass
class Report:
    name: str  # nsys report name, e.g. "cuda_gpu_kern_sum"
    title: str  # nsys display name, e.g. "CUDA GPU Kernel Summary"
    frame: pl.DataFrame  # columns named exactly as nsys's CSV headers
    skipped: str | None = None  # why the report has no data (the trace lacks the tables)
    # columns shown with a fixed number of decimals (nsys converts bytes to MB, 3 decimals)
    decimals: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return self.frame.height == 0


def empty(name: str, title: str, reason: str) -> Report:
    return Report(name, title, pl.DataFrame(), skipped=reason)
