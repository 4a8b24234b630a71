"""TUI responsiveness on a large trace, headless (Textual's Pilot), as a user would feel it.

Time to the first kernel table (cold: no cache; warm: cache filled by the cold run), then the
latency of single keystrokes once everything is loaded: filter, sort, scroll, group switch,
toggle to per-kernel rows. Each latency is the key press plus the refresh it causes.

    python bench/bench_tui.py /tmp/bench/tiled440.sqlite
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time


async def session(path: str, use_cache: bool, keys: bool) -> dict:
    from kview.tui.app import KviewApp
    from kview.tui.views.kernels import GROUPINGS

    app = KviewApp([path], use_cache=use_cache)
    out = {}
    async with app.run_test(size=(160, 45)) as pilot:
        while app.ready_at is None:
            await pilot.pause(0.02)
        out["first kernel table (s)"] = round(app.ready_at - app.t0, 2)
        if not keys:
            return out
        # every worker done (loading, then Compare) and what they posted handled
        while unfinished := [w for w in app.workers if not w.is_finished]:
            await app.workers.wait_for_complete(unfinished)
            await pilot.pause()
        out["everything loaded (s)"] = round(time.perf_counter() - app.t0, 1)
        await pilot.press("2")
        kv = app.view("kernels")
        table = kv.table

        def work(fn):
            """The app's own work for one key: the handler plus formatting every visible line."""
            t = time.perf_counter()
            fn()
            for y in range(45):
                table.render_line(y)
            return round((time.perf_counter() - t) * 1000, 1)

        out["filter 'dir:bprop gemm'"] = work(lambda: kv.set_filter("dir:bprop gemm"))
        out["scroll one row"] = work(lambda: table.action_cursor(1))
        out["page down"] = work(lambda: table.action_page(1))
        out["move column"] = work(lambda: table.action_column(1))
        out["sort by column, descending"] = work(lambda: table.sort_by_cursor(True))
        for _ in range(len(GROUPINGS)):
            ms = work(kv.action_cycle_grouping)
            out[f"group switch -> {GROUPINGS[kv.grouping][0]}"] = ms
        out["toggle to per-kernel rows"] = work(kv.action_toggle_rows)
        out["clear filter (all rows)"] = work(lambda: kv.set_filter(""))
        n = table.frame.height
        out[f"rows: page down ({n:,} rows)"] = work(lambda: table.action_page(1))
        out[f"rows: sort {n:,} rows by duration"] = work(
            lambda: (setattr(table, "cursor_col", table.columns.index("Duration (ns)")), table.sort_by_cursor(True))
        )
        out["rows: filter 'layer:layer_3 dur>10us'"] = work(lambda: kv.set_filter("layer:layer_3 dur>10us"))
        out["rows: filter 'range:backward_pass cat:gemm'"] = work(lambda: kv.set_filter("range:backward_pass cat:gemm"))
        # end to end through Textual (includes Pilot's own wait per key, ~100 ms here)
        t = time.perf_counter()
        await pilot.press("down")
        await pilot.pause()
        out["(pilot) one key end to end"] = round((time.perf_counter() - t) * 1000, 1)
        await pilot.press("q")
    return out


def main() -> None:
    path = sys.argv[1]
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="kview-tui-bench-")
    cold = asyncio.run(session(path, use_cache=True, keys=False))
    warm = asyncio.run(session(path, use_cache=True, keys=True))
    print(f"first kernel table, cold: {cold['first kernel table (s)']} s")
    for k, v in warm.items():
        print(f"{k}: {v}" + ("" if "(s)" in k else " ms"))


if __name__ == "__main__":
    main()
