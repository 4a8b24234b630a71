"""The explorer's views, one a module; each turns its document into widgets and knows the table
it shows (for copy and export). A new view is its module plus one line below."""

from __future__ import annotations

from kview.tui.views import (
    compare,
    efficiency,
    kernels,
    launches,
    layers,
    memory,
    nvtx,
    overview,
    ranks,
    timeline,
)
from kview.tui.views.registry import register, registered, shown_by, unregister

# tab order: the n-th view is shown by key n, unless it names its own key (Ranks is 7, Memory 8,
# Efficiency 9, Launches 0, whichever views come before them)
register(overview.OverviewView)
register(kernels.KernelsView)
register(nvtx.NvtxView)
register(layers.LayersView)
register(compare.CompareView)
register(timeline.TimelineView)
register(ranks.RanksView)
register(memory.MemoryView)
register(efficiency.EfficiencyView)
register(launches.LaunchesView)

VIEWS = registered()  # the built-in views (the app reads `registered()`: a view added later too)

__all__ = ["VIEWS", "register", "registered", "shown_by", "unregister"]
