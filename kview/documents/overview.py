"""The Overview: `kview overview` and the explorer's Overview view."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kview.analysis.overview import overview as made
from kview.documents import Document, Section, facts_table, sentences

if TYPE_CHECKING:
    from kview.trace import Trace


def overview(trace: Trace) -> Document:
    """What the trace is, how busy the GPU was, where the time went, and the findings."""

    o = made(trace)
    return Document(
        "Overview",
        (
            Section("trace", "Trace", facts_table(o.facts)),
            Section("busy", "GPU busy", o.busy),
            Section("gaps", "Largest idle gaps", o.gaps),
            Section("categories", "Time by category", o.categories),
            Section("phases", "Time by phase", o.phases),
            Section("kernels", "Top kernels", o.top_kernels),
            Section("cpu-ops", "Top CPU ops", o.cpu_ops),
            Section("ranks", "Ranks", o.ranks),
            Section("critical-path", "Critical path by step", o.critical_path),
            # sentences: bullets for a person rather than a truncated table cell
            Section("findings", "Findings", sentences("Finding", o.findings), bullets=True),
        ),
        command=f"kview overview {trace.name}",
    )
