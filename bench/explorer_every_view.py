"""The explorer on a large trace, headless (Textual's Pilot, 160x45), as issue 28 measures it:
the first frame's kernel table, then every view's document fetched (no view fetching, every
worker done and what it posted handled); with `--switch`, each view brought forward in turn.

    /usr/bin/time -f "%e s %U+%S CPU %M KiB" python bench/explorer_every_view.py TRACE cold|cached [--switch]

`cold` opens without the frame cache (--no-cache); `cached` reads and fills it (run it once
to fill, then again to measure). Times are from the interpreter's start; the peak RSS is
/usr/bin/time's (the largest process of the tree: a large trace's worker where it is larger).
"""

from __future__ import annotations

import asyncio
import sys
import time

T_START = time.perf_counter()


async def every_view(path: str, use_cache: bool, switch: bool) -> str:
    from kview.tui.app import KviewApp  # imported inside: a worker process re-imports this file

    app = KviewApp([path], use_cache=use_cache)
    async with app.run_test(size=(160, 45)) as pilot:
        while app.ready_at is None:
            await pilot.pause(0.02)
        first = app.ready_at - T_START
        while True:
            unfinished = [w for w in app.workers if not w.is_finished]
            if not unfinished and not app.fetching and not app.waiting:
                break
            if unfinished:
                await app.workers.wait_for_complete(unfinished)
            await pilot.pause(0.02)
        line = f"first kernel table {first:.2f} s, every view {time.perf_counter() - T_START:.2f} s"
        if switch:
            t = time.perf_counter()
            for vid in list(app.views):
                app.action_show_view(vid)
                await pilot.pause()
            line += f", every view brought forward {time.perf_counter() - t:.2f} s"
        await pilot.press("q")
    return line


def main() -> None:
    if len(sys.argv) < 3 or sys.argv[2] not in ("cold", "cached"):
        sys.exit(__doc__)
    print(asyncio.run(every_view(sys.argv[1], sys.argv[2] == "cached", "--switch" in sys.argv[3:])))


if __name__ == "__main__":
    main()
