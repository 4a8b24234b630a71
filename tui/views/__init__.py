"""The explorer's views, one a module; each turns what the loader made ready into widgets and
knows the table it shows (for copy and export)."""

from __future__ import annotations

from kview.tui.views.base import View
from kview.tui.views.compare import CompareView
from kview.tui.views.efficiency import EfficiencyView
from kview.tui.views.kernels import KernelsView
from kview.tui.views.launches import LaunchesView
from kview.tui.views.layers import LayersView
from kview.tui.views.memory import MemoryView
from kview.tui.views.nvtx import NvtxView
from kview.tui.views.overview import OverviewView
from kview.tui.views.ranks import RanksView
from kview.tui.views.timeline import TimelineView

# tab order: the n-th view is shown by key n, unless it names its own key (Ranks is 7, Efficiency 9, Launches 0,
# whichever views come before them)
VIEWS: tuple[type[View], ...] = (
    OverviewView,
    KernelsView,
    NvtxView,
    LayersView,
    CompareView,
    TimelineView,
    RanksView,
    MemoryView,
    EfficiencyView,
    LaunchesView,
)


def shown_by() -> list[tuple[str, type[View]]]:
    """(key, view) in tab order: the key that shows each view (the tab says it too)."""
    return [(cls.key or str(n), cls) for n, cls in enumerate(VIEWS, 1)]
