"""Memory: `kview memory` and the explorer's Memory view."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from kview.analysis import memory_timeline as mt
from kview.analysis.memory import summary, summary_data
from kview.documents import Document, Section, facts_table

if TYPE_CHECKING:
    from kview.analysis.memory_timeline import MemoryTimeline

PLOT = "Allocated and reserved over time"  # a picture the terminal table draws (kview.output.memory_plot)
TOP = 15  # rows of the live-at-the-peak and largest-allocation tables (`kview memory --top`)


def memory(tl: MemoryTimeline, top: int = TOP) -> Document:
    """The allocator's memory over time: the peak, what was live at it by call site and by size,
    the largest allocations, the peak of each phase and step, and every event's levels."""

    live = mt.live_at(tl, tl.peak["idx"]) if tl.series.height else tl.allocations.head(0)
    # a trace's own events know no requested bytes (and nsys's no reserved): those columns go
    levels = [c for c in ("allocated", "requested", "reserved") if tl.series[c].null_count() < tl.series.height]
    series = tl.series.select("idx", ((pl.col("t") - tl.start) / 1e6).round(6).alias("Time (ms)"), *levels).rename(
        {"idx": "Event", **{c: c.capitalize() for c in levels}}
    )
    # the steps when they are not the phases already
    steps_too = tl.steps.height > 0 and not tl.steps.equals(tl.phases)
    return Document(
        "Memory",
        (
            Section("plot", PLOT, pl.DataFrame(), formats=("table",)),
            # a person reads the facts with their units; data formats get numbers, units in the names
            Section("summary", "Memory", facts_table(summary(tl)), data=summary_data(tl)),
            Section("phases", "Allocated bytes per phase", mt.phase_peaks(tl)),
            Section("steps", "Allocated bytes per step", mt.step_peaks(tl), formats=None if steps_too else ()),
            Section("by-site", mt.by_site_title(tl), mt.by_site(live, top)),
            Section("by-size", "Live at the peak, by size", mt.by_size(live, top)),
            Section("top", "Largest allocations", mt.top_allocations(tl, top)),
            Section("timeline", "timeline", series, formats=("json",)),
        ),
        command=f"kview memory {tl.name}" + (f" --top {top}" if top != TOP else ""),
        empty="(none)\n",
    )
