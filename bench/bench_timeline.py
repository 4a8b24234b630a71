"""The Timeline view on a large trace, headless (Textual's Pilot): how long after the kernel
summary its first frame comes, what each key costs the app, and the memory its rows take.

1. The whole app (`--first-frame`): time from the kernel table to the Timeline's first frame
   (GPU rows), cold (no cache) and warm.
2. The view alone over the trace's full timeline (every row, CPU threads included, built by the
   core as the loader builds it): each key's app work = the action plus rendering every line
   of the canvas and the status line, the way a terminal refresh would ask for them.

    python bench/bench_timeline.py /tmp/bench/dense25.sqlite [--first-frame]
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


async def first_frame(path: str, use_cache: bool) -> dict:
    from kview.tui.app import KviewApp

    app = KviewApp([path], use_cache=use_cache)
    async with app.run_test(size=(160, 45)) as pilot:
        while app.ready_at is None:
            await pilot.pause(0.02)
        view = app.views["timeline"]
        while getattr(view, "shown_at", None) is None:
            await pilot.pause(0.02)
        out = {
            "kernel table (s)": round(app.ready_at - app.t0, 2),
            "timeline first frame after it (s)": round(view.shown_at - app.ready_at, 2),
        }
        app.exit()
    return out


async def keys(path: str, size: tuple[int, int]) -> dict:
    from textual.app import App

    from kview.analysis import timeline
    from kview.trace import open_trace
    from kview.tui.messages import TimelineReady
    from kview.tui.views.timeline import TimelineView

    trace = open_trace(path)
    before = rss_mb()
    t = time.perf_counter()
    tl = timeline.build(trace)
    out: dict = {"build every row, cache warm (s)": round(time.perf_counter() - t, 2)}
    out["rows"] = len(tl.rows)
    out["GPU ops"] = sum(len(r) for r in tl.rows if r.kind == "gpu")
    out["API calls"] = sum(len(r) for r in tl.rows if r.kind == "api")
    out["NVTX ranges"] = sum(len(r) for r in tl.rows if r.kind == "nvtx")

    class One(App):
        def compose(self):
            yield TimelineView(id="view-timeline")

    app = One()
    async with app.run_test(size=size) as pilot:
        view = app.query_one(TimelineView)
        view.post_message(TimelineReady(tl))
        while view.canvas is None:
            await pilot.pause(0.02)
        await pilot.pause()
        canvas = view.canvas

        def work(fn) -> float:
            t = time.perf_counter()
            fn()
            for y in range(canvas.size.height):
                canvas.render_line(y)
            view.status_text()
            return round((time.perf_counter() - t) * 1000, 1)

        out["first frame, whole trace (ms)"] = work(lambda: None)
        out["pan right"] = work(lambda: view.action_pan(1))
        out["pan left"] = work(lambda: view.action_pan(-1))
        out["cursor one cell"] = work(lambda: view.action_cell(1))
        out["row down"] = work(lambda: view.action_row(1))
        out["row down again"] = work(lambda: view.action_row(1))
        for i in range(1, 11):
            out[f"zoom in x2 ({i})"] = work(lambda: view.action_zoom(2.0))
        out["pan right, zoomed in"] = work(lambda: view.action_pan(1))
        out["zoom out x2"] = work(lambda: view.action_zoom(0.5))
        out["end"] = work(lambda: view.action_edge(1))
        out["home"] = work(lambda: view.action_edge(0))
        out["fit"] = work(view.action_fit)
        out["more NVTX depth"] = work(lambda: view.action_depth(1))
        out["expand the thread"] = work(view.action_expand)
        out["page down"] = work(lambda: view.action_page(1))
        out["zoom to the op under the cursor"] = work(view.action_zoom_op)
        held = [work(lambda: view.action_pan(1)) for _ in range(30)]
        out["held right arrow, 30 pans: max"] = max(held)
        out["held right arrow, 30 pans: median"] = sorted(held)[15]
        # every row binned once at full width: what the rows and their prefix sums hold
        view.expanded |= {r.group for r in tl.rows}
        view.rebuild_entries()
        for e in view.entries:
            if e.row is not None:
                canvas.row_cells(e.row)
        arrays = sum(a.nbytes for r in tl.rows for a in (r.start, r.end, r.code, r.cls))
        sums = sum(sum(a.nbytes for a in r._sums if a is not None and a is not r.end) for r in tl.rows if r._sums)
        out["row arrays (MB)"] = round(arrays / 1e6)
        out["prefix sums of every row (MB)"] = round(sums / 1e6)
        out["process RSS growth over the timeline (MB)"] = round(rss_mb() - before)
        app.exit()
    return out


def main() -> None:
    path = sys.argv[1]
    os.environ.setdefault("XDG_CACHE_HOME", tempfile.mkdtemp(prefix="kview-bench-"))
    if "--first-frame" in sys.argv:
        for label, cache in (("cold, no cache", False), ("cache written", True), ("warm cache", True)):
            print(label, asyncio.run(first_frame(path, cache)), flush=True)
    for size in ((160, 45), (80, 24)):
        print(f"{size[0]}x{size[1]}", asyncio.run(keys(path, size)), flush=True)


if __name__ == "__main__":
    main()
