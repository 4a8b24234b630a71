"""The Timeline view on a large trace, headless (Textual's Pilot): how long after the kernel
summary its first frame comes, what each key costs the app, and the memory the view adds.

    python bench/bench_timeline.py TRACE keys [--size 160x45] [--repeat N]
    python bench/bench_timeline.py TRACE first-frame [--no-cache]
    python bench/bench_timeline.py TRACE memory [--without-timeline]

keys: the view alone over the trace's full timeline (every row, CPU threads included, built by
  the core as the loader builds it). Each key is pressed many times; its app work is the action
  plus rendering every line of the canvas and the status line, as a terminal refresh asks for
  them. Per key: median, p95 and worst, as wall time and as the UI thread's CPU time (what the
  app did, without the time other processes had the core: the figure to read on a loaded box).
first-frame: the whole app; `6` is pressed the moment the kernel table is shown; the time from
  that table to the first line of the Timeline's canvas drawn, and to its CPU threads' rows.
memory: the loader's messages, in order, in this process (no UI): RSS after each, and the
  process's peak. With --without-timeline the timeline's steps are left out, so two runs give
  what the view adds to the app (final and peak RSS).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import sys
import time


def rss_mb() -> float:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3


async def first_frame(path: str, use_cache: bool) -> dict:
    from kview.tui.app import KviewApp

    app = KviewApp([path], use_cache=use_cache)
    async with app.run_test(size=(160, 45)) as pilot:
        while app.ready_at is None:
            await pilot.pause(0.005)
        await pilot.press("6")
        pressed = time.perf_counter()
        view = app.views["timeline"]
        while getattr(view, "drawn_at", None) is None:
            await pilot.pause(0.005)
        out = {
            "kernel table (s)": round(app.ready_at - app.t0, 2),
            "6 pressed after the table (s)": round(pressed - app.ready_at, 3),
            "Timeline's first frame after the table (s)": round(view.drawn_at - app.ready_at, 2),
        }
        while view.data is None or view.data.cpu_pending:
            await pilot.pause(0.05)
        await pilot.pause()
        out["CPU threads' rows after the table (s)"] = round(time.perf_counter() - app.ready_at, 1)
        while app.working or len(app.loaded) < 1:
            await pilot.pause(0.05)
        c = time.thread_time()
        gc.collect()
        out["full GC once loaded (frozen objects, ms)"] = (
            gc.get_freeze_count(),
            round((time.thread_time() - c) * 1e3, 1),
        )
        gc.unfreeze()
        c = time.thread_time()
        gc.collect()
        out["full GC without the freeze (ms)"] = round((time.thread_time() - c) * 1e3, 1)
        app.exit()
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


async def keys(path: str, size: tuple[int, int], repeat: int) -> dict:
    from textual.app import App

    from kview.analysis import timeline
    from kview.trace import open_trace
    from kview.tui.messages import TimelineReady
    from kview.tui.views.timeline import TimelineView

    trace = open_trace(path)
    t = time.perf_counter()
    tl = timeline.build(trace)
    out: dict = {"build every row (s)": round(time.perf_counter() - t, 2)}
    out["rows"] = len(tl.rows)
    out["GPU ops"] = sum(len(r) for r in tl.rows if r.kind == "gpu")
    out["API calls"] = sum(len(r) for r in tl.rows if r.kind == "api")
    out["NVTX ranges"] = sum(len(r) for r in tl.rows if r.kind == "nvtx")
    arrays = sum(a.nbytes for r in tl.rows for a in (r.start, r.end, r.code, r.cls))
    arrays += sum(r.ident.nbytes for r in tl.rows if r.ident is not None)
    sums = sum(sum(a.nbytes for a in r.sums() if a is not None and a is not r.end) for r in tl.rows)
    out["row arrays (MB)"] = round(arrays / 1e6)
    out["prefix sums (MB)"] = round(sums / 1e6)

    class One(App):
        def compose(self):
            yield TimelineView(id="view-timeline")

    times: dict[str, list[tuple[float, float]]] = {}
    # full (generation 2) collections during the keys: their count and CPU time
    full_gc: list[float] = []
    started: list[float] = []

    def on_gc(phase: str, info: dict) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started.append(time.thread_time())
            elif started:
                full_gc.append((time.thread_time() - started.pop()) * 1e3)

    gc.callbacks.append(on_gc)
    app = One()
    async with app.run_test(size=size) as pilot:
        view = app.query_one(TimelineView)
        view.post_message(TimelineReady(tl))
        while view.canvas is None:
            await pilot.pause(0.02)
        await pilot.pause()
        canvas = view.canvas

        def work(name: str, fn) -> None:
            t, c = time.perf_counter(), time.thread_time()
            fn()
            for y in range(canvas.size.height):
                canvas.render_line(y)
            view.status_text()
            times.setdefault(name, []).append(((time.perf_counter() - t) * 1e3, (time.thread_time() - c) * 1e3))

        work("first frame, whole trace", lambda: None)
        for _ in range(repeat):
            work("pan right (held)", lambda: view.action_pan(1))
        for _ in range(repeat):
            work("pan left (held)", lambda: view.action_pan(-1))
        for _ in range(repeat):
            work("cursor one cell", lambda: view.action_cell(1))
        for _ in range(repeat // 3):
            work("row down", lambda: view.action_row(1))
            work("row up", lambda: view.action_row(-1))
        for _ in range(3):
            for _ in range(10):
                work("zoom in x2", lambda: view.action_zoom(2.0))
                work("pan right, zoomed in", lambda: view.action_pan(1))
            for _ in range(10):
                work("zoom out x2", lambda: view.action_zoom(0.5))
        for _ in range(5):
            work("end", lambda: view.action_edge(1))
            work("home", lambda: view.action_edge(0))
            work("fit", view.action_fit)
        # every thread expanded and collapsed, every NVTX depth shown and hidden, on each line
        for _ in range(2):
            for i, e in enumerate(list(view.entries)):
                if e.row is not None and e.row.kind != "gpu" and e.row.depth <= 0:
                    view.entry = i
                    work("expand / collapse a thread", view.action_expand)
                    work("expand / collapse a thread", view.action_expand)
            for _ in range(12):
                work("one more NVTX depth", lambda: view.action_depth(1))
            for _ in range(12):
                work("one less NVTX depth", lambda: view.action_depth(-1))
        for _ in range(5):
            work("page down", lambda: view.action_page(1))
            work("page up", lambda: view.action_page(-1))
        # z on the op under the cursor, on every row, from the whole trace
        for i, e in enumerate(list(view.entries)):
            if e.row is not None:
                view.entry = i
                work("fit", view.action_fit)
                if view.op_under_cursor() is not None:
                    work("z: zoom to the op under the cursor", view.action_zoom_op)
        app.exit()
    gc.callbacks.remove(on_gc)
    out["full GC collections during the keys (n, worst ms)"] = (len(full_gc), round(max(full_gc, default=0), 1))
    for name, xs in times.items():
        wall, cpu = [w for w, _ in xs], [c for _, c in xs]
        out[name] = (
            f"n={len(xs)} wall median/p95/max {statistics.median(wall):.1f}/{percentile(wall, 0.95):.1f}/{max(wall):.1f}"
            f" · cpu {statistics.median(cpu):.1f}/{percentile(cpu, 0.95):.1f}/{max(cpu):.1f} ms"
        )
    return out


def held_mb(tl) -> float:
    """The bytes a timeline's rows hold: their arrays, prefix sums and Idx."""
    arrays = {id(a): a.nbytes for r in tl.rows for a in (r.start, r.end, r.code, r.cls, r.ident) if a is not None}
    for r in tl.rows:
        arrays.update({id(a): a.nbytes for a in r.sums() if a is not None})
    return sum(arrays.values()) / 1e6


def memory(path: str, without_timeline: bool) -> None:
    from kview.analysis import timeline
    from kview.tui.loading import load

    if without_timeline:  # the app as it would be with no Timeline view
        empty = timeline.Timeline(0, (0, 1), [], {}, [])
        timeline.build = lambda trace, cpu=True: empty  # type: ignore[assignment]
        timeline.with_cpu_rows = lambda trace, tl: empty  # type: ignore[assignment]
        timeline.recolour = lambda tl, categories: empty  # type: ignore[assignment]
    t = time.perf_counter()
    print(f"start: RSS {rss_mb():.0f} MB", flush=True)
    last = rss_mb()
    for m in load(path, use_cache=True):
        now = rss_mb()
        what = type(m).__name__ + (f" ({m.text})" if hasattr(m, "text") else "")
        if hasattr(m, "timeline") and isinstance(m.timeline, timeline.Timeline) and m.timeline.rows:
            what += f" (rows + sums {held_mb(m.timeline):.0f} MB)"
        print(f"{time.perf_counter() - t:7.1f} s  {what:45s} RSS {now:7.0f} MB ({now - last:+.0f})", flush=True)
        last = now
    print(f"final RSS {rss_mb():.0f} MB, peak {peak_mb():.0f} MB", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("what", choices=["keys", "first-frame", "memory"])
    p.add_argument("--size", default="160x45,80x24")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--without-timeline", action="store_true")
    a = p.parse_args()
    if a.what == "first-frame":
        print(asyncio.run(first_frame(a.trace, not a.no_cache)), flush=True)
    elif a.what == "memory":
        memory(a.trace, a.without_timeline)
    else:
        for size in a.size.split(","):
            w, h = map(int, size.split("x"))
            for k, v in asyncio.run(keys(a.trace, (w, h), a.repeat)).items():
                print(f"{size} {k}: {v}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
