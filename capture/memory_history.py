"""The CUDA caching allocator's history around the profiled steps, for `kview capture --memory`
and `kview bench --memory-snapshot`.

`start()` resets the peak counters and turns on torch's history (`_record_memory_history`, Python
frames of every allocation, record_function ranges as annotations where torch has them), then
opens and closes one range named MARKER in the trace while reading the wall clock before and
after. `finish()` takes the snapshot, adds the `kview` key (that clock pair and the peaks torch
itself counted) and writes it as torch's `_dump_snapshot` would.

Clocks: the allocator stamps its history with `time_us`, c10's wall clock (CLOCK_REALTIME) in
microseconds; the trace has its own clock (nsys's session clock, or torch.profiler's). MARKER's
start in the trace and the wall-clock time taken around it are the same moment, so `kview capture`
reads the marker's start from the finished trace, stores it beside the wall-clock time
(`finalize`), and removes the marker range; `kview memory` then maps any trace time t to
`unix_ns + (t - trace_ns)`. The uncertainty is the time the push and pop take (microseconds).

Imports only the standard library and torch (runs in the profiled process).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager

import torch

MARKER = "kview_memory_clock"
MAX_ENTRIES = 1_000_000


def available() -> bool:
    return torch.cuda.is_available()


def start(marker: Callable[[str], ContextManager] | None = None, max_entries: int = MAX_ENTRIES) -> dict:
    """Start recording; returns the wall-clock side of the clock pair."""
    if torch.cuda.is_initialized():  # else nothing to reset, and no context is made here for it
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    kwargs = {"max_entries": max_entries, "context": "alloc", "stacks": "python"}
    try:  # record_function ranges as the snapshot's external_annotations (newer torch)
        torch.cuda.memory._record_memory_history(**kwargs, global_record_annotations=True)
    except TypeError:
        torch.cuda.memory._record_memory_history(**kwargs)
    before = time.time_ns()
    with (marker or (lambda _name: contextlib.nullcontext()))(MARKER):
        pass
    after = time.time_ns()
    return {"unix_ns": (before + after) // 2, "uncertainty_ns": after - before, "marker": MARKER}


def finish(path: str, clock: dict) -> dict:
    """Take the snapshot, stop recording, write it to `path`; returns the `kview` facts."""
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    stats = torch.cuda.memory_stats()
    torch.cuda.memory._record_memory_history(enabled=None)
    facts = {
        "clock": clock,
        "device_index": torch.cuda.current_device(),
        "device": str(torch.cuda.get_device_name()),
        "torch": str(torch.__version__),
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "requested_bytes_peak": int(stats.get("requested_bytes.all.peak", 0)),
    }
    snap["kview"] = facts
    # kview's core only once the snapshot is written (this runs in the profiled process)
    from kview.io.snapshot_pickle import dump

    dump(snap, path)
    return facts
