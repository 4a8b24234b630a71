"""Timeline: `kview timeline` and what the explorer's Timeline view copies and exports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kview.analysis import timeline
from kview.documents import Document, Section

if TYPE_CHECKING:
    from kview.analysis.timeline import Timeline

LABELS = 25  # characters of a picture's line the row labels take: the cells have the rest


def window(
    tl: Timeline,
    t0: int,
    t1: int,
    width: int,
    kinds: set[str],
    depth: int,
    title: str = "",
    cells: int | None = None,
    command: str = "",
) -> Document:
    """The window [t0, t1] of the timeline `width` characters wide: the picture (a row per GPU
    stream, per thread its CUDA API and NVTX rows by depth) and the numbers behind it, op time
    and op count per row and cell (`cells` of them; default: what the picture's width leaves)."""

    picture = timeline.text(tl, t0, t1, width, kinds, depth, title)
    frame = timeline.table(tl, t0, t1, cells or max(width - LABELS, 10), kinds, depth)
    return Document("Timeline", (Section("timeline", "Timeline", frame, picture=picture),), command=command)
