"""Timeline: GPU streams, CUDA API calls and NVTX ranges per thread against time, in cells.

The canvas is a Line-API widget: each line is made on demand from the rows on screen, and a
row's cells (binned by kview.analysis.timeline with sorted searches, never a loop over ops)
are cached per viewport, so moving the cursor redraws from the cache and a pan or zoom bins
only the visible rows.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events, on, work
from textual.reactive import var
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Input, Static

from kview.analysis import chrome_trace, filters
from kview.analysis import timeline as tl_
from kview.documents import Document
from kview.documents.timeline import window
from kview.notation import fmt_ns, human_ms
from kview.output import chrome_json
from kview.tui.clipboard import copy_dir
from kview.tui.export import free_path
from kview.tui.keymap import VIEW_KEYS, bindings
from kview.tui.loading import run_timeline, timeline_document
from kview.tui.messages import ForView, OpenKernels, ShowOnTimeline, TimelineReady
from kview.tui.views.base import Shown, View
from kview.tui.widgets.filter_input import FilterInput
from kview.tui.widgets.frame_table import CATEGORY_COLOURS

# API calls: blocking calls stand out (the CPU waits), launches are the steady green of a busy loop
CLASS_COLOURS = {
    **CATEGORY_COLOURS,
    "api:sync": "red",
    "api:launch": "green",
    "api:memory": "yellow",
    "api:other": "white",
    "nvtx:user": "cyan",
    "nvtx:op": "magenta",
    "nvtx:library": "yellow",
}
DEFAULT_DEPTH = 3  # NVTX rows shown per thread until expanded (step > phase > layer, typically)
PAN = 8  # left/right move the view by 1/PAN of its span
CACHE_LINES = 1024
PLAIN, DIM, BOLD, REVERSE = Style(), Style(dim=True), Style(bold=True), Style(reverse=True)


def fmt_at(ns: float) -> str:
    """A point in time from the trace's start, to the µs."""
    return human_ms(ns, 3)


@dataclass
class Entry:
    """A line of the canvas below the axis: a group title (device or thread) or a row."""

    title: str
    row: tl_.Row | None = None


class TimelineCanvas(Widget, can_focus=True):
    """The axis and the rows; the view owns the state, the canvas draws it."""

    def __init__(self, view: TimelineView, **kw):
        super().__init__(**kw)
        self.view = view
        self._cache: dict[tuple, list[Segment]] = {}
        self._styles: dict[tuple, Style] = {}
        self._axis: tuple = (None, ("", ""))
        self._cw = 0  # the width the cursor's cell was counted in

    @staticmethod
    def widths(width: int) -> tuple[int, int]:
        """(label column, cells) of a canvas `width` wide."""
        lw = 14 if width < 120 else 22
        return lw, max(width - lw - 1, 8)

    def label_width(self) -> int:
        return self.widths(self.size.width)[0]

    def cells_width(self) -> int:
        return self.widths(self.size.width)[1]

    def style(self, k: int, named: bool, hit: int) -> Style:
        """The style of a cell of class `k` (-1 idle), holding a name or a bar, highlighted
        (hit > 0), dimmed (hit == 0) or not (-1); made once per combination."""
        key = (k, named, hit)
        got = self._styles.get(key)
        if got is None:
            colour = CLASS_COLOURS.get(self.view.timeline.classes[k], "white") if k >= 0 else None
            if named:  # a name written across the op's cells
                got = Style(color="black", bgcolor=colour or "white")
            else:
                got = Style(color=colour) if colour else Style()
            if hit > 0:
                got = Style(color="black", bgcolor="yellow", bold=True)
            elif hit == 0:
                got = got + Style(dim=True)
            self._styles[key] = got
        return got

    def row_cells(self, row: tl_.Row, cw: int | None = None) -> list[Segment]:
        """The row's cells on screen as runs of one style (no cursor), cached per viewport."""
        v = self.view
        cw = self.cells_width() if cw is None else cw
        key = (id(row), v.t0, v.t1, cw, v.hl_gen)
        got = self._cache.get(key)
        if got is None:
            cells = tl_.bin_row(row, v.t0, v.t1, cw)
            chars, cls = tl_.picture(v.timeline, row, cells)
            marks = v.hl_masks.get(id(row))
            hit = tl_.hits(row, marks, cells).tolist() if marks is not None else [-1] * cw
            styles = [self.style(cls[c], chars[c] not in tl_.LEVELS, min(hit[c], 1)) for c in range(cw)]
            got, start = [], 0
            for c in range(1, cw + 1):
                if c == cw or styles[c] is not styles[start]:
                    got.append(Segment(chars[start:c], styles[start]))
                    start = c
            if len(self._cache) > CACHE_LINES:
                self._cache.clear()
            self._cache[key] = got
        return got

    def axis(self, cw: int) -> tuple[str, str]:
        v = self.view
        key = (v.t0, v.t1, cw)
        if self._axis[0] != key:
            self._axis = (key, tl_.axis(v.t0, v.t1, cw))
        return self._axis[1]

    def render_line(self, y: int) -> Strip:
        v = self.view
        width = self.size.width
        lw, cw = self.widths(width)
        col = min(v.col, cw - 1)
        if v.drawn_at is None and y == self.size.height - 1:
            v.drawn_at = time.perf_counter()
        if y == 0:
            labels, _ = self.axis(cw)
            return Strip([Segment(" " * (lw + 1) + labels, DIM)]).extend_cell_length(width)
        if y == 1:
            m = list(self.axis(cw)[1])
            mc = v.mark_col(cw)
            if mc is not None:
                m[mc] = "M"
            m[col] = "▼"
            return Strip([Segment(" " * lw + "┌", DIM), Segment("".join(m), DIM)]).extend_cell_length(width)
        i = v.top + y - 2
        if i >= len(v.entries):
            return Strip.blank(width)
        e = v.entries[i]
        if e.row is None:
            return Strip([Segment(e.title[:width], BOLD)]).extend_cell_length(width)
        current = i == v.entry
        label = e.row.label[:lw].ljust(lw)
        segs = [Segment(label, REVERSE if current else (DIM if e.row.kind == "nvtx" else PLAIN)), Segment("│", DIM)]
        # the cached runs, the one under the cursor's column split around it
        x = 0
        for seg in self.row_cells(e.row, cw):
            n = len(seg.text)
            if x <= col < x + n:
                k = col - x
                if k:
                    segs.append(Segment(seg.text[:k], seg.style))
                segs.append(Segment(seg.text[k], (seg.style or PLAIN) + REVERSE))
                if k + 1 < n:
                    segs.append(Segment(seg.text[k + 1 :], seg.style))
            else:
                segs.append(seg)
            x += n
        return Strip(segs).extend_cell_length(width).crop(0, width)

    def on_resize(self, _event) -> None:
        self._cache.clear()
        cw = self.cells_width()
        if self._cw and cw != self._cw:  # the cursor stays on its time
            self.view.col = self.view.col * cw // self._cw
        self._cw = cw
        self.view.refresh_all()

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self.view.zoom_at_x(event.x, 2.0)
        event.stop()

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self.view.zoom_at_x(event.x, 0.5)
        event.stop()


class TimelineView(View):
    view_id = "timeline"
    title = "Timeline"
    document = timeline_document
    BINDINGS = bindings(VIEW_KEYS["timeline"])

    data: var[TimelineReady | None] = var(None, init=False)

    def __init__(self, **kw):
        super().__init__(**kw)
        self.t0, self.t1 = 0, 1
        self.col = 0  # cursor cell
        self.entry = 0  # cursor line (index into entries)
        self.top = 0  # first entry on screen
        self.depth = DEFAULT_DEPTH
        self.expanded: set[str] = set()
        self.mark: int | None = None
        self.moved = False  # the user has panned or zoomed (a new span is not fitted)
        self.hl_text = ""
        self.hl_masks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.hl_gen = 0
        self.entries: list[Entry] = []
        self.canvas: TimelineCanvas | None = None
        self.history: list[str] = []
        self._pending: tuple | None = None  # a jump asked for before the rows came
        self.shown_at: float | None = None  # perf_counter() when the first rows were shown
        self.run_data: TimelineReady | None = None  # the run's timeline, once there is one
        self.drawn_at: float | None = None  # ... and when the canvas's last line was first drawn

    def reset(self) -> None:
        """Another trace is about to be shown: forget this one's rows, view and marks (the
        NVTX depth shown stays). A run's timeline stays: it shows every trace."""
        if self.run_data is not None:
            return
        super().reset()
        self.canvas = None
        self.entries = []
        self.t0, self.t1, self.col, self.entry, self.top = 0, 1, 0, 0, 0
        self.expanded = set()
        self.mark = None
        self.moved = False
        self.hl_text, self.hl_masks = "", {}
        self._pending = None
        self.shown_at = self.drawn_at = None

    @property
    def timeline(self) -> tl_.Timeline:
        assert self.data is not None
        return self.data.timeline

    # -- data arriving ------------------------------------------------------------------
    def on_timeline_ready(self, m: TimelineReady) -> None:
        if m.run:  # the ranks of the run on one timeline: shown whichever trace is in front
            self.run_data = m
            self.every_trace = True  # type: ignore[misc]
            self.data = m
            show = getattr(self.app, "show_which_trace", None)
            if show is not None:
                show()
        elif self.run_data is None:
            self.data = m

    def file_index(self) -> int:
        """The place of the trace in front among those opened (0 with one)."""
        return int(getattr(self.app, "current", 0))

    def attributed_of(self, row: tl_.Row) -> tuple[pl.DataFrame | pl.LazyFrame | None, np.ndarray | None]:
        """The attributed kernels (and their Idx column) of the trace `row` comes from."""
        d = self.data
        if d is None:
            return None, None
        if d.run:
            return d.run[row.trace] if row.trace < len(d.run) else (None, None)
        return d.attributed, d.attributed_idx

    def of_trace_in_front(self, row: tl_.Row) -> bool:
        """Whether `row` is of the trace Kernels and NVTX show (always, but in a run's timeline)."""
        return not (self.data is not None and self.data.run) or row.trace == self.file_index()

    def watch_data(self, old: TimelineReady | None, m: TimelineReady) -> None:
        tl = m.timeline
        if not tl.rows:
            if m.cpu_pending:  # no GPU ops: the CPU threads come after attribution
                self.show_stage("CPU threads (this trace has no GPU ops)")
            else:
                self.show(
                    Static(
                        "This trace has no GPU ops, CUDA API calls or NVTX ranges to put on a timeline.",
                        id="timeline-empty",
                    )
                )
            return
        first = self.canvas is None
        if not first and not self.moved:  # the CPU rows widen the span: still the whole trace
            self.t0, self.t1 = tl.span
        if first:
            self.canvas = TimelineCanvas(self, id="timeline-canvas")
            self.status = Static("", id="timeline-status")
            self.finput = FilterInput(
                self.history, placeholder="highlight: gemm dir:bprop layer:layer_3 dur>50us", id="timeline-filter"
            )
            self.finput.display = False
            self.t0, self.t1 = tl.span
            self.show(self.canvas, self.status, self.finput)
            self.shown_at = time.perf_counter()
            self.focus_if_active(self.canvas)
        current = self.current_row()
        assert self.canvas is not None
        self.canvas._cache.clear()  # new rows (ids may repeat) and class codes
        self.canvas._styles.clear()
        self.rebuild_entries(keep=current)
        if self.hl_text:
            self.set_highlight(self.hl_text)
        self.refresh_all()
        if first and self._pending:
            kind, args = self._pending
            self._pending = None
            getattr(self, kind)(*args)

    # -- the lines ----------------------------------------------------------------------
    def rebuild_entries(self, keep: tl_.Row | None = None) -> None:
        tl = self.timeline
        out: list[Entry] = []
        group = None
        for r in tl.rows:
            if r.kind == "nvtx" and r.depth >= self.depth and r.group not in self.expanded:
                continue
            if r.group != group:
                group = r.group
                out.append(Entry(self.group_title(r)))
            out.append(Entry(r.label, r))
        self.entries = out
        if keep is not None:
            same = [
                i
                for i, e in enumerate(out)
                if e.row is not None and (e.row.kind, e.row.group, e.row.depth) == (keep.kind, keep.group, keep.depth)
            ]
            if same:
                self.entry = same[0]
        self.entry = self._row_entry(self.entry, 1)
        if self.data is not None and self.data.cpu_pending:
            self.entries.append(Entry("CPU threads: loading (after the kernels are attributed)…"))

    def group_title(self, r: tl_.Row) -> str:
        tl = self.timeline
        if r.kind == "gpu":
            return tl.threads.get(r.group, r.group)
        title = tl.threads.get(r.group, r.group)
        hidden = sum(1 for x in tl.rows if x.group == r.group and x.kind == "nvtx" and x.depth >= self.depth)
        if hidden and r.group not in self.expanded:
            title += f"  (+{hidden} deeper NVTX rows: space)"
        return title

    def _row_entry(self, i: int, step: int) -> int:
        """The nearest line at or after (step 1) / before (step -1) `i` that is a row."""
        n = len(self.entries)
        if not n:
            return 0
        i = max(0, min(n - 1, i))
        j = i
        while 0 <= j < n and self.entries[j].row is None:
            j += step
        if not 0 <= j < n:
            j = i
            while 0 <= j < n and self.entries[j].row is None:
                j -= step
        return max(0, min(n - 1, j))

    def current_row(self) -> tl_.Row | None:
        if not self.entries or self.entry >= len(self.entries):
            return None
        return self.entries[self.entry].row

    def visible_lines(self) -> int:
        return max((self.canvas.size.height if self.canvas else 24) - 2, 1)

    # -- state changes ------------------------------------------------------------------
    def clamp(self) -> None:
        """Keep the view inside the trace (with its own width of room to pan), at least a ns
        per cell, the cursor on screen."""
        if self.data is None or self.canvas is None:
            return
        lo, hi = self.timeline.span
        cw = self.canvas.cells_width()
        span = max(min(self.t1 - self.t0, (hi - lo) * 4), cw)
        t0 = max(min(self.t0, hi - span // 2), lo - span // 2)
        self.t0, self.t1 = int(t0), int(t0 + span)
        self.col = max(0, min(self.col, cw - 1))
        vis = self.visible_lines()
        if self.entry < self.top:
            self.top = max(self.entry - 1, 0) if self.entry and self.entries[self.entry - 1].row is None else self.entry
        elif self.entry >= self.top + vis:
            self.top = self.entry - vis + 1
        self.top = max(0, min(self.top, max(len(self.entries) - vis, 0)))

    def refresh_all(self) -> None:
        self.clamp()
        if self.canvas is not None:
            self.canvas.refresh()
            self.status.update(self.status_text())

    def cursor_window(self) -> tuple[int, int]:
        """[start, end) of the cursor's cell."""
        assert self.canvas is not None
        e = tl_.edges(self.t0, self.t1, self.canvas.cells_width())
        c = min(self.col, len(e) - 2)
        return int(e[c]), int(e[c + 1])

    def cursor_time(self) -> int:
        a, b = self.cursor_window()
        return (a + b) // 2

    def mark_col(self, cw: int) -> int | None:
        if self.mark is None or not self.t0 <= self.mark < self.t1:
            return None
        return int((self.mark - self.t0) * cw // (self.t1 - self.t0))

    def op_under_cursor(self) -> tuple[tl_.Row, int] | None:
        row = self.current_row()
        if row is None or self.canvas is None:
            return None
        a, b = self.cursor_window()
        i = tl_.op_at(row, a, b)
        return (row, i) if i >= 0 else None

    def set_view(self, t0: int, t1: int, col: int | None = None) -> None:
        self.moved = True
        self.t0, self.t1 = int(t0), int(max(t1, t0 + 1))
        if col is not None:
            self.col = col
        self.refresh_all()

    def zoom(self, factor: float, col: int | None = None) -> None:
        """Zoom by `factor` (2: twice as close) keeping the time at cell `col` (the cursor's)
        where it is on screen."""
        if self.canvas is None:
            return
        cw = self.canvas.cells_width()
        col = self.col if col is None else col
        self.col = col
        t = self.t0 + (col + 0.5) * (self.t1 - self.t0) / cw
        span = max((self.t1 - self.t0) / factor, cw)
        t0 = t - (col + 0.5) * span / cw
        self.set_view(int(round(t0)), int(round(t0 + span)))

    def zoom_at_x(self, x: int, factor: float) -> None:
        if self.canvas is None:
            return
        c = x - self.canvas.label_width() - 1
        if 0 <= c < self.canvas.cells_width():
            self.zoom(factor, c)

    def show_window(self, start: int, end: int, row: tl_.Row | None = None) -> None:
        """`start`..`end` (ns from the origin) with a margin, the cursor on its middle."""
        assert self.canvas is not None
        cw = self.canvas.cells_width()
        dur = max(end - start, 1)
        span = max(dur * 10 // 8, cw)
        t0 = start - (span - dur) // 2
        if row is not None:
            if row.kind == "nvtx" and row.depth >= self.depth:
                self.expanded.add(row.group)
                self.rebuild_entries()
            for i, e in enumerate(self.entries):
                if e.row is row:
                    self.entry = i
        self.set_view(t0, t0 + span, col=int((start + dur // 2 - t0) * cw // span))

    # -- every trace as one run ----------------------------------------------------------
    def trace_note(self) -> str:
        """How the files of a run were lined up, when they share no clock."""
        run = self.run_data
        return run.timeline.note if run is not None and run.timeline.note else ""

    def all_traces_in(self) -> None:
        if len(self.session.loaded) > 1:
            self.rank_timeline()

    @work(thread=True, exit_on_error=False)
    def rank_timeline(self) -> None:
        """The ranks' rows on one timeline (`loading.run_timeline`), when the traces are a run."""
        loaded = self.session.loaded
        try:
            message = run_timeline([loaded[i] for i in sorted(loaded)])
        except Exception as e:  # the traces' own timelines stay
            why = f"no timeline of the run: {type(e).__name__}: {e}".splitlines()[0]
            self.app.call_from_thread(self.app.notify, why, severity="warning")
            return
        if message is not None:
            self.post_message(message)

    # -- jumps from other views ---------------------------------------------------------
    def request(self, m: ForView) -> None:
        # after the tab is laid out, so the jump knows the canvas' width
        if isinstance(m, ShowOnTimeline) and m.idx is not None:
            self.app.call_after_refresh(self.show_gpu_op, m.idx)
        elif isinstance(m, ShowOnTimeline) and m.start is not None and m.end is not None:
            self.app.call_after_refresh(self.show_range, m.start, m.end, m.thread, m.depth)

    def show_gpu_op(self, idx: int) -> None:
        """Put GPU op `idx` (Kernels' Idx) under the cursor."""
        if self.canvas is None:
            self._pending = ("show_gpu_op", (idx,))
            return
        for r in self.timeline.rows:
            if r.ident is not None and self.of_trace_in_front(r):
                hit = np.flatnonzero(r.ident == idx)
                if len(hit):
                    i = int(hit[0])
                    self.show_window(*r.when(i), r)
                    return
        self.app.notify(f"GPU op {idx} is not on the timeline", severity="warning")

    def show_range(self, start: int, end: int, thread: int | None, depth: int | None) -> None:
        """Put the range [start, end] (ns from its trace's zero) on screen, on its thread's NVTX row."""
        if self.canvas is None:
            self._pending = ("show_range", (start, end, thread, depth))
            return
        run = self.data is not None and bool(self.data.run)
        group = f"{self.file_index()}:{thread}" if run else str(thread)
        row = next((r for r in self.timeline.rows if r.kind == "nvtx" and r.group == group and r.depth == depth), None)
        # in a run's timeline the file's rows lie at its offset on the run's clock
        mine = row or next((r for r in self.timeline.rows if r.trace == self.file_index()), None) if run else row
        o = mine.offset if mine is not None else 0
        self.show_window(start + o, end + o, row)

    # -- actions (keymap: VIEW_KEYS["timeline"]) -------------------------------------------
    def _ready(self) -> bool:
        return self.canvas is not None and self.data is not None

    def action_pan(self, direction: int) -> None:
        if self._ready():
            step = max((self.t1 - self.t0) // PAN, 1)
            self.set_view(self.t0 + direction * step, self.t1 + direction * step)

    def action_cell(self, delta: int) -> None:
        """Move the cursor a cell; past the edge the view follows."""
        if not self._ready():
            return
        assert self.canvas is not None
        cw = self.canvas.cells_width()
        c = self.col + delta
        if 0 <= c < cw:
            self.col = c
            self.refresh_all()
        else:
            step = (self.t1 - self.t0) / cw * delta
            self.set_view(int(self.t0 + step), int(self.t1 + step))

    def action_zoom(self, factor: float) -> None:
        if self._ready():
            self.zoom(factor)

    def action_edge(self, where: int) -> None:
        if not self._ready():
            return
        assert self.canvas is not None
        lo, hi = self.timeline.span
        span = self.t1 - self.t0
        if where == 0:
            self.set_view(lo, lo + span, col=0)
        else:
            self.set_view(hi - span, hi, col=self.canvas.cells_width() - 1)

    def action_fit(self) -> None:
        if self._ready():
            lo, hi = self.timeline.span
            self.set_view(lo, hi)

    def action_zoom_op(self) -> None:
        got = self.op_under_cursor() if self._ready() else None
        if got is None:
            if self._ready():
                self.app.notify("no op or range under the cursor", severity="warning", timeout=2)
            return
        row, i = got
        self.show_window(*row.when(i))

    def action_row(self, delta: int) -> None:
        if not self._ready() or not self.entries:
            return
        step = 1 if delta > 0 else -1
        target = max(0, min(len(self.entries) - 1, self.entry + delta))
        self.entry = self._row_entry(target, step)
        self.refresh_all()

    def action_page(self, direction: int) -> None:
        self.action_row(direction * max(self.visible_lines() - 1, 1))

    def action_depth(self, delta: int) -> None:
        if self._ready():
            deepest = max([r.depth for r in self.timeline.rows if r.kind == "nvtx"] + [0])
            self.depth = max(1, min(self.depth + delta, deepest + 1))
            self.rebuild_entries(keep=self.current_row())
            self.refresh_all()
            self.app.notify(f"NVTX rows down to depth {self.depth - 1}", timeout=2)

    def action_expand(self) -> None:
        row = self.current_row() if self._ready() else None
        if row is None or row.kind == "gpu":
            return
        self.expanded ^= {row.group}
        self.rebuild_entries(keep=row)
        self.refresh_all()

    def action_mark(self) -> None:
        if self._ready():
            self.mark = self.cursor_time()
            self.refresh_all()

    def action_export_window(self) -> None:
        """The window on screen (and the highlight's filter) as `kview export` writes it."""
        if not self._ready():
            return
        loaded = getattr(self.app, "loaded", {}).get(self.file_index())
        if loaded is None:
            self.app.notify("the trace is still loading", title="export", severity="warning")
            return
        # in a run's timeline the file's rows lie at its offset on the run's clock
        run = self.data is not None and bool(self.data.run)
        mine = next((r for r in self.timeline.rows if r.trace == self.file_index()), None) if run else None
        o = mine.offset if mine is not None else 0
        self.export_window(loaded, self.t0 - o, self.t1 - o, self.hl_text or None)

    @work(thread=True, exit_on_error=False, exclusive=True, group="export-window")
    def export_window(self, trace, t0: int, t1: int, highlight: str | None) -> None:
        w = chrome_trace.Window(t0, t1, highlight)
        export = chrome_trace.build(trace, w)
        other = chrome_trace.other_data(trace, w, export)
        stem = f"{trace.path.name.split('.')[0]}_window_{t0 / 1e6:.3f}-{t1 / 1e6:.3f}ms"
        out = free_path(stem, "json.gz")
        try:  # a new file in the working directory (never over one), else in the copies folder
            try:
                f = open(out, "xb")
            except OSError:
                copy_dir().mkdir(parents=True, exist_ok=True)
                out = free_path(stem, "json.gz", copy_dir())
                f = open(out, "xb")
            with f:
                chrome_json.write(export, f, other, compress=True)
        except OSError as e:
            self.app.call_from_thread(self.app.notify, f"{out}: {e.strerror or e}", title="export", severity="error")
            return
        self.app.call_from_thread(
            self.app.notify,
            f"wrote {out}: {export.ops:,} GPU ops, {export.events:,} events (open it in ui.perfetto.dev)",
            title="export",
            timeout=8,
        )

    def action_open(self) -> None:
        got = self.op_under_cursor() if self._ready() else None
        if got is None:
            return
        row, i = got
        if (row.ident is not None or row.kind == "nvtx") and not self.of_trace_in_front(row):
            self.app.switch_trace(row.trace)  # type: ignore[attr-defined]
        if row.ident is not None:
            self.post_message(OpenKernels(f"idx=={int(row.ident[i])}"))
        elif row.kind == "nvtx" and row.cls[i] == self.timeline.class_code("nvtx:user"):
            name = self.timeline.names[row.names_key][int(row.code[i])]
            self.post_message(OpenKernels(f'range:"(^| > ){re.escape(name)}( > |$)"'))
        else:
            self.app.notify("enter opens a GPU op or a user range in Kernels", timeout=2)

    def action_open_filter(self) -> None:
        if self._ready():
            self.finput.display = True
            self.finput.value = self.hl_text
            self.screen.set_focus(self.finput)  # at once: keys typed right after `/` are the filter's

    @on(Input.Submitted, "#timeline-filter")
    def _submitted(self, event: Input.Submitted) -> None:
        if self.set_highlight(event.value):
            self.finput.display = False
            if self.canvas is not None:
                self.focus_if_active(self.canvas)

    def set_highlight(self, text: str) -> bool:
        """Highlight the GPU ops the filter expression matches (the Kernels filter language,
        over the attributed kernels once they are in); False, with the reason shown, when it
        does not parse."""

        text = text.strip()
        try:
            pred = filters.parse(text)
        except filters.FilterError as e:
            self.app.notify(str(e), title="highlight", severity="error")
            return False
        self.hl_text = text
        self.hl_masks = {}
        self.hl_gen += 1
        if pred is not None:
            if text not in self.history:
                self.history.append(text)
            gpu = [r for r in self.timeline.rows if r.ident is not None]
            tables = {r.trace: self.attributed_of(r)[0] for r in gpu}
            if any(t is None for t in tables.values()):
                self.app.notify("highlights need the attributed kernels; still loading", severity="warning")
                self.hl_text = ""
            else:
                idx = {
                    k: t.lazy().filter(pred).select("Idx").collect()["Idx"].to_numpy()
                    for k, t in tables.items()
                    if t is not None
                }
                for r in gpu:
                    assert r.ident is not None
                    self.hl_masks[id(r)] = tl_.marked(r, np.isin(r.ident, idx[r.trace]))
        self.refresh_all()
        return True

    def back(self) -> bool:
        if self.canvas is None:
            return False
        if self.finput.display:
            self.finput.display = False
            self.focus_if_active(self.canvas)
            return True
        if self.hl_text:
            self.set_highlight("")
            return True
        if self.mark is not None:
            self.mark = None
            self.refresh_all()
            return True
        return False

    def focus_content(self) -> None:
        if self.canvas is not None:
            self.canvas.focus()

    # -- the status line -----------------------------------------------------------------
    def status_text(self) -> Text:
        """Two lines, each cut to the width: what is under the cursor; where the cursor and view are."""
        cw = self.canvas.cells_width() if self.canvas else 1
        width = max(self.status.size.width - 2, 20) if self.canvas is not None and self.status.size.width else 200
        a, b = self.cursor_window()
        first = Text()
        row = self.current_row()
        got = self.op_under_cursor()
        if row is not None:
            cells = tl_.bin_row(row, a, b, 1)
            n = int(cells.count[0])
            if got is not None:
                row, i = got
                first.append(self.describe(row, i), style="bold")
                if n > 1:
                    first.append(f"  (1 of {n:,} ops in this cell, {float(cells.fraction[0]):.0%} busy)")
            else:
                first.append("idle", style="dim")
        second = Text(f"cursor {fmt_at(self.cursor_time())}")
        if self.mark is not None:
            second.append(f"  mark→cursor {fmt_ns(self.cursor_time() - self.mark)}", style="bold yellow")
        if self.hl_text:
            n = sum(int(cm[-1]) for cm, _ in self.hl_masks.values())
            second.append(f"  highlight: {self.hl_text} ({n:,} ops)", style="yellow")
        second.append(
            f"  span {fmt_ns(self.t1 - self.t0)}  {fmt_ns((self.t1 - self.t0) / cw)}/cell  "
            f"view {fmt_at(self.t0)} .. {fmt_at(self.t1)}"
        )
        for line in (first, second):
            line.truncate(width, overflow="ellipsis")
        return Text("\n").join([first, second])

    def describe(self, row: tl_.Row, i: int) -> str:
        tl = self.timeline
        start, end = row.when(i)
        parts = [
            tl.names[row.names_key][int(row.code[i])] if tl.names.get(row.names_key) else "?",
            f"start {fmt_at(start)}",
            f"dur {fmt_ns(end - start)}",
        ]
        if row.ident is not None:
            idx = int(row.ident[i])
            parts.append(f"{row.label.replace(' s', ' stream ')}")
            att, by_idx = self.attributed_of(row)
            if att is not None and by_idx is not None:
                k = int(np.searchsorted(by_idx, idx))
                if 0 <= k < len(by_idx) and int(by_idx[k]) == idx:
                    # the op's row alone (a large trace's kernels are read from its worker's files)
                    r = att.lazy().slice(k, 1).select("Layer", "Op", "Direction", "Category").collect().row(0)
                    parts += [f"layer {r[0]}", f"op {r[1]}", r[2], r[3]]
            parts.append(f"#{idx}")
        elif row.kind == "nvtx":
            parts.append(
                f"{tl.threads.get(row.group, row.group)} depth {row.depth}"
                if row.depth >= 0
                else f"{tl.threads.get(row.group, row.group)} start/end"
            )
        else:
            parts.append(tl.threads.get(row.group, row.group))
        return " · ".join(parts)

    def window_document(self) -> Document | None:
        """The document of `kview timeline` for the window, width and rows on screen: the
        picture (what `y` copies) and the numbers behind it, per row and cell op time and op
        count (what `Y` and the data formats carry)."""
        if self.canvas is None or self.data is None:
            return None
        rows = [e.row for e in self.entries if e.row is not None]
        tl = self.timeline
        sub = tl_.Timeline(tl.origin, tl.span, rows, tl.names, tl.classes, tl.threads, tl.ranks)
        # NVTX rows down to the depth shown (`kview timeline --depth`); a thread expanded past it
        # shows every row of the window (no command line draws exactly that)
        width, depth = self.canvas.size.width, (1 << 30 if self.expanded else self.depth)
        paths = [Path(p).name for p in getattr(self.app, "paths", None) or []]
        run = bool(tl.ranks) and len(paths) > 1  # the ranks of a run on one timeline, titled as the command does
        title = f"{len(paths)} traces ({paths[0]} .. {paths[-1]})" if run else self.trace_title()
        names = " ".join(paths) if run else self.trace_title()
        command = f"kview timeline {names} --width {width} --depth {depth} --from {self.t0} --to {self.t1}"
        kinds = {"gpu", "api", "nvtx"}
        # the cells as `kview timeline -f csv` counts them for this width (one document, not the canvas's own grid)
        return window(sub, self.t0, self.t1, width, kinds, depth, title, command=command)

    def shown(self) -> Shown:
        """What copy and export carry: the document of the window on screen."""
        doc = self.window_document()
        if doc is None:
            return Shown(pl.DataFrame(), "timeline")
        section = doc.section("timeline")
        return Shown(section.frame, "timeline cells", picture=section.picture)

    def trace_title(self) -> str:
        """The trace's name, as `kview timeline` titles its picture."""
        app = self.app
        paths = getattr(app, "paths", None)
        return Path(paths[getattr(app, "current", 0)]).name if paths else ""
