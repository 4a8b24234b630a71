"""The explorer on a large trace, headless (Textual's Pilot, 160x45), as issue 28 measures it:
the first frame's kernel table, then every view's document fetched (no view fetching, every
worker done and what it posted handled); with `--switch`, each view brought forward in turn.

    /usr/bin/time -f "%e s %U+%S CPU %M KiB" python bench/explorer_every_view.py TRACE cold|cached [--switch]

`cold` opens without the frame cache (--no-cache); `cached` reads and fills it (run it once
to fill, then again to measure). Times are from the interpreter's start. Memory: the line's
"app + workers" is the highest sum of the resident memory of this process and every process
under it (sampled every 50 ms from /proc, Linux only), which is what issue 28's target counts;
/usr/bin/time's peak is the largest single process (a large trace's worker where it is larger).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

T_START = time.perf_counter()
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def tree_pids() -> set[int]:
    """This process and every process under it (/proc; this process alone elsewhere)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    # the field after the command's closing parenthesis: state, then the parent's pid
                    parents[int(entry)] = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    mine = {os.getpid()}
    for pid in sorted(parents):  # a child's pid is usually above its parent's; two passes catch the rest
        if parents[pid] in mine:
            mine.add(pid)
    for pid in sorted(parents):
        if parents[pid] in mine:
            mine.add(pid)
    return mine


def rss_of(pids: set[int]) -> int:
    """Resident bytes of the processes `pids` (those that ended count 0)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, ValueError, IndexError):
            continue
    return total


def tree_rss() -> int:
    """Resident bytes of this process and every process under it (/proc; 0 elsewhere)."""
    return rss_of(tree_pids())


WALK_EVERY = 1.0  # seconds between two walks of /proc for the processes under this one


class PeakSampler(threading.Thread):
    """The highest tree_rss() seen, sampled every 50 ms until stopped. The processes under this
    one are found again every WALK_EVERY s, not on every sample: a walk reads every process's
    stat (1.3 ms of CPU, the GIL held, on a box of a hundred processes; 27 ms a second at 20
    walks, 1.5 ms now), taken from the explorer's threads it measures; a worker started since
    the last walk is counted within a second (while it imports, before it reads a row)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        pids: set[int] = set()
        walked = float("-inf")
        while not self.done.wait(0.05):
            if time.monotonic() - walked >= WALK_EVERY:
                pids, walked = tree_pids(), time.monotonic()
            self.peak = max(self.peak, rss_of(pids))


async def every_view(path: str, use_cache: bool, switch: bool) -> str:
    from kview.tui.app import KviewApp  # imported inside: a worker process re-imports this file

    app = KviewApp([path], use_cache=use_cache)
    sampler = PeakSampler()
    sampler.start()
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
        sampler.done.set()
        line += f", app + workers peak {sampler.peak / 1e9:.2f} GB"
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
