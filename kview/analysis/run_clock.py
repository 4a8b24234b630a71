"""One clock for the files of one run: where each file's time zero lies on the run's timeline.

Each trace counts from its own time zero (kview.trace.Trace.origin). Files of one run line up
through what they record of the clock they read (Trace.clock): an nsys export the UTC time of
its session start (TARGET_INFO_SESSION_START_TIME.utcEpochNs), torch.profiler the clock its
timestamps read (one per host, named by `baseTimeNanoseconds`). Files whose clocks share a
name are placed by their zeros' readings, the earliest at 0. Where they do not (mixed tools,
hosts with different bases, a profiler's monotonic clock whose files do not even overlap), the
run is lined up on the end of each file's first instance of a collective they all ran, which
every rank leaves together (or, without one, each file from its own start), and the note says
so.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from kview.analysis.categories import name_categories
from kview.analysis.ranks import COLLECTIVE_RE
from kview.trace import Trace


@dataclass(frozen=True)
class RunClock:
    offsets: tuple[int, ...]  # per file: ns its time zero lies after the run's time zero
    note: str = ""  # empty when the files share a recorded clock; else how kview lined them up


def _span(trace: Trace) -> tuple[int, int] | None:
    """(first start, last end) of the trace's GPU ops and CUDA API calls, from its zero."""
    found = []
    for key, table in (("kernels", "CUPTI_ACTIVITY_KIND_KERNEL"), ("runtime", "CUPTI_ACTIVITY_KIND_RUNTIME")):
        if trace.has(table):
            found.append(trace.columns(key, ["start", "end"]).select(pl.col("start").min(), pl.col("end").max()))
    if not found:
        return None
    lo, hi = pl.concat(found).select(pl.col("start").min(), pl.col("end").max()).row(0)
    return None if lo is None or hi is None else (int(lo), int(hi))


def first_collectives(trace: Trace) -> dict[str, int]:
    """Per collective (AllReduce, Broadcast, ...; `other` for a communication kernel of no
    named collective): the end of the trace's first such kernel, from its zero."""

    if not trace.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        return {}
    k = trace.columns("kernels", ["start", "end", "name_id"])
    names = trace.with_strings(k.select(pl.col("name_id").unique()), "name_id", "Kernel")
    cats = name_categories(names["Kernel"]).filter(pl.col("name_category") == "communication")
    comm = names.filter(pl.col("Kernel").is_in(cats["Kernel"].implode())).select(
        "name_id", pl.col("Kernel").str.extract(COLLECTIVE_RE, 1).str.to_lowercase().fill_null("other").alias("c")
    )
    first = k.join(comm, on="name_id").sort("start").group_by("c", maintain_order=True).first()
    return dict(zip(first["c"].to_list(), first["end"].to_list()))


def _overlap(offsets: list[int], spans: list[tuple[int, int] | None]) -> bool:
    """Whether the files' spans, placed at `offsets`, all overlap (a monotonic clock read on
    different hosts puts them hours or days apart)."""
    placed = [(o + s[0], o + s[1]) for o, s in zip(offsets, spans) if s is not None]
    return not placed or max(a for a, _ in placed) <= min(b for _, b in placed)


def run_clock(traces: list[Trace]) -> RunClock:
    """Where each file's time zero lies on the run's timeline (the earliest file at 0)."""
    if len(traces) < 2:
        return RunClock(tuple(0 for _ in traces))
    clocks = [t.clock for t in traces]
    names = {c[0] for c in clocks if c is not None}
    if None not in clocks and len(names) == 1:
        zeros = [c[1] for c in clocks if c is not None]
        offsets = [z - min(zeros) for z in zeros]
        name = names.pop()
        if name == "UTC" or _overlap(offsets, [_span(t) for t in traces]):
            return RunClock(tuple(offsets))
        why = f"their {name} readings do not overlap (different hosts?)"
    elif None in clocks:
        why = "some record no clock"
    else:
        why = "they read different clocks (" + ", ".join(sorted(names)) + ")"
    firsts = [first_collectives(t) for t in traces]
    common = set(firsts[0]).intersection(*firsts[1:])
    if not common:
        return RunClock(tuple(0 for _ in traces), f"files share no clock ({why}): each is drawn from its own start")
    # the collective every file holds that the first file ran first: its first instance ends
    # at the same moment on every rank (a collective ends when the last rank joins it)
    c = min(common, key=lambda c: firsts[0][c])
    ends = [f[c] for f in firsts]
    offsets = [max(ends) - e for e in ends]
    low = min(offsets)
    return RunClock(
        tuple(o - low for o in offsets),
        f"files share no clock ({why}): lined up on the end of their first {c} collective",
    )
