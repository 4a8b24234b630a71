"""The targets of the scale issue on a dense tiled trace, each in its own process.

Every figure is a whole process (interpreter start and imports included): wall seconds from
the parent's clock, CPU seconds (user + system) and peak RSS from os.wait4 (the child's own
high-water mark). On a shared machine the CPU seconds are the steadier figure. Groups:

  cold     kview kernels -f csv and the NVTX reports with --no-cache
  cached   the same and every other report after a first run filled an empty cache
  tui      the explorer headless (Textual's run_test): first kernel table, every view loaded,
           peak RSS of the app process (app peak RSS) and of it or the worker process that
           makes a large trace's tables (peak_rss_mib); cold (--no-cache) and from the cache
  writers  the 1.1M-row attributed table and the 5.6M-row nvtx_sum (from the cache) to CSV, TSV,
           JSON and Markdown, timed around the writer alone (wall and CPU), output to /dev/null

--cache DIR keeps the frame cache in DIR (XDG_CACHE_HOME) instead of a new empty folder; the
cached and writers groups then fill it only when it holds nothing yet.

    python bench/bench_scale.py /work/data/dense/dense_x25.sqlite [--groups cold,cached,tui,writers]
    python bench/bench_scale.py T10.sqlite T25.sqlite T50.sqlite --groups rss   # RSS against size
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

NVTX_REPORTS = ("nvtx_gpu_proj_sum", "nvtx_kern_sum", "nvtx_sum")

TUI = """
import asyncio, json, sys, time
from textual.worker import WorkerCancelled
from kview.tui.app import KviewApp

async def go():
    app = KviewApp([TRACE], use_cache=CACHE)
    async with app.run_test(size=(160, 45)) as pilot:
        while app.ready_at is None:
            await pilot.pause(0.02)
        first = app.ready_at - app.t0
        # every worker done (the load, then Compare and Ranks, which start once it is in) and
        # what they posted handled
        quiet = 0
        while quiet < 3:
            unfinished = [w for w in app.workers if not w.is_finished]
            if unfinished:
                try:
                    await app.workers.wait_for_complete(unfinished)
                except WorkerCancelled:  # a view's fetch the app replaced by a newer one
                    pass
            # every view of the trace has its document: none fetching, none waiting for its turn
            busy = unfinished or app.working or 0 not in app.loaded or app.fetching or app.waiting
            quiet = 0 if busy else quiet + 1
            await pilot.pause(0.05)
        views = {v: type(app.view(v)).__name__ for v in app.views}
        out = {"first kernel table (s)": round(first, 2), "every view loaded (s)": round(time.perf_counter() - app.t0, 1)}
        # the app process's own high-water mark (peak_rss_mib is the largest of it and the
        # worker process that makes a large trace's tables)
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")]
        out["app peak RSS (MiB)"] = round(int(hwm[0].split()[1]) / 1024) if hwm else None
        await pilot.press("q")
    print(json.dumps(out))

asyncio.run(go())
"""

WRITERS = """
import json, os, sys, time
from kview.analysis.attribution import attribute, shown
from kview.output import render
from kview.reports import REPORTS
from kview.trace import open_trace

trace = open_trace(TRACE)
tables = {"kernels": shown(attribute(trace)), "nvtx_sum": REPORTS["nvtx_sum"](trace).frame}
out = {}
for name, table in tables.items():
    out[name + " rows"] = table.height
    for fmt in ("csv", "tsv", "json", "md"):
        t, c = time.perf_counter(), time.process_time()
        with open(os.devnull, "wb") as f:
            render.write(table, fmt, f)  # as `kview kernels` / `kview stats` write it
        out[f"{name} {fmt} (s)"] = round(time.perf_counter() - t, 2)
        out[f"{name} {fmt} (CPU s)"] = round(time.process_time() - c, 2)
print(json.dumps(out))
"""


def child(argv: list[str], env: dict) -> dict:
    """Run one process; its wall time, peak RSS and the JSON line it printed last, if any."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = [], []
    # drain both pipes (stdout of kview kernels is ~500 MB: count it, keep only the tail)
    import threading

    def drain(stream, keep):
        tail = b""
        n = 0
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            n += len(chunk)
            tail = (tail + chunk)[-4096:]
        keep.append((n, tail))

    ts = [threading.Thread(target=drain, args=(p.stdout, out)), threading.Thread(target=drain, args=(p.stderr, err))]
    for t in ts:
        t.start()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    for t in ts:
        t.join()
    res = {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "rc": os.waitstatus_to_exitcode(status),
        "stdout_bytes": out[0][0],
    }
    if res["rc"] != 0:
        res["stderr"] = err[0][1].decode(errors="replace")[-600:]
    last = out[0][1].decode(errors="replace").strip().splitlines()
    if last and last[-1].startswith("{"):
        try:
            res.update(json.loads(last[-1]))
        except ValueError:
            pass
    return res


def kview(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from kview.cli import main; sys.exit(main(sys.argv[1:]))", *args]


def snippet(code: str, trace: str, cache: bool = True) -> list[str]:
    return [sys.executable, "-c", f"TRACE = {trace!r}; CACHE = {cache!r}\n" + code]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--groups", default="cold,cached,tui,writers")
    ap.add_argument("--json", default=None, help="append the results here (one JSON object per line)")
    ap.add_argument("--cache", default=None, help="XDG_CACHE_HOME for every run (default: a new empty folder)")
    a = ap.parse_args()
    groups = a.groups.split(",")
    results = []

    def record(trace, what, argv, env):
        r = {"trace": os.path.basename(trace), "what": what, **child(argv, env)}
        print(json.dumps(r), flush=True)
        results.append(r)

    for trace in map(os.path.abspath, a.traces):
        cache = a.cache or tempfile.mkdtemp(prefix="kview-scale-cache-")
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        filled = os.path.isdir(os.path.join(cache, "kview", "frames")) and bool(
            os.listdir(os.path.join(cache, "kview", "frames"))
        )
        if "rss" in groups:
            record(trace, "kernels -f csv, cold", kview("kernels", trace, "-f", "csv", "--no-cache"), env)
            record(
                trace,
                "nvtx_gpu_proj_sum, cold",
                kview("stats", trace, "-r", "nvtx_gpu_proj_sum", "-f", "csv", "--no-cache"),
                env,
            )
        if "cold" in groups:
            record(trace, "kernels -f csv, cold", kview("kernels", trace, "-f", "csv", "--no-cache"), env)
            for r in NVTX_REPORTS + ("cuda_gpu_kern_sum",):
                record(trace, f"{r}, cold", kview("stats", trace, "-r", r, "-f", "csv", "--no-cache"), env)
        if "cached" in groups:
            from kview.reports import REPORTS

            if not filled:
                record(trace, "kernels -f csv, filling the cache", kview("kernels", trace, "-f", "csv"), env)
                record(trace, "every report, filling the cache", kview("stats", trace, "-r", "all", "-f", "json"), env)
                filled = True
            for fmt in ("csv", "tsv", "json", "md"):
                record(trace, f"kernels -f {fmt}, cached", kview("kernels", trace, "-f", fmt), env)
            for r in REPORTS:
                record(trace, f"{r}, cached", kview("stats", trace, "-r", r, "-f", "csv"), env)
        if "tui" in groups:
            record(trace, "TUI, cold (--no-cache)", snippet(TUI, trace, cache=False), env)
            record(trace, "TUI, cache filled by that run's siblings", snippet(TUI, trace, cache=True), env)
            record(trace, "TUI, cached", snippet(TUI, trace, cache=True), env)
        if "writers" in groups:
            if not filled:
                record(trace, "kernels -f csv, filling the cache", kview("kernels", trace, "-f", "csv"), env)
                record(trace, "nvtx_sum, filling the cache", kview("stats", trace, "-r", "nvtx_sum", "-f", "csv"), env)
                filled = True
            record(trace, "writers of the attributed table and nvtx_sum", snippet(WRITERS, trace), env)
    if a.json:
        with open(a.json, "a") as f:
            meta = {
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "machine": platform.processor() or platform.machine(),
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load": os.getloadavg(),
            }
            for r in results:
                f.write(json.dumps({**meta, **r}) + "\n")


if __name__ == "__main__":
    main()
