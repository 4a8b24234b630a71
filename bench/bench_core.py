"""Benchmark the core on a (tiled) trace: cold and cached reports, peak RSS, and baselines.

Each measurement runs in its own process; wall time and peak RSS come from os.wait4, so
imports and interpreter start-up are included, as a user would feel them.

    python bench/bench_core.py /tmp/bench/tiled440.sqlite [--reports all] [--repeat 1]
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

KERNEL_SQL = (
    "SELECT demangledName, count(*), sum(end - start), avg(end - start), min(end - start), "
    "max(end - start) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY demangledName"
)
READ_SQL = "SELECT start, end, demangledName, correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"

SNIPPETS = {
    # stdlib sqlite3 running the plain kernel summary group-by (the target's baseline)
    "sqlite3_kernel_groupby": f"""
import sqlite3
con = sqlite3.connect('file:' + TRACE + '?mode=ro&immutable=1', uri=True)
rows = con.execute({KERNEL_SQL!r}).fetchall()
""",
    # three ways to bring the kernel columns into polars (the reader's path choice)
    "read_connectorx": f"""
import connectorx as cx
df = cx.read_sql('sqlite://' + TRACE, {READ_SQL!r}, return_type='polars')
""",
    "read_adbc": f"""
import adbc_driver_sqlite.dbapi as d, polars as pl
con = d.connect('file:' + TRACE + '?mode=ro&immutable=1')
cur = con.cursor(); cur.execute({READ_SQL!r}); df = pl.from_arrow(cur.fetch_arrow_table())
""",
    "read_sqlite3_fetchall": f"""
import sqlite3, polars as pl
con = sqlite3.connect('file:' + TRACE + '?mode=ro&immutable=1', uri=True)
rows = con.execute({READ_SQL!r}).fetchall()
df = pl.DataFrame(rows, schema=['start', 'end', 'demangledName', 'correlationId', 'globalPid'], orient='row')
""",
}


def run(code: str, env: dict) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"measurement failed: {code[:200]}")
    return wall, usage.ru_maxrss / 1024  # MiB


def kview_code(trace: str, report: str, cache: bool) -> str:
    args = ["stats", trace, "-r", report, "-f", "csv"] + ([] if cache else ["--no-cache"])
    # stdout to /dev/null inside the child: rendering counts, the terminal does not
    return f"import sys, os; sys.stdout = open(os.devnull, 'w'); from kview.cli import main; sys.exit(main({args!r}))"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--reports", default="all")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args()
    trace = os.path.abspath(a.trace)
    from kview.reports import REPORTS

    reports = list(REPORTS) if a.reports == "all" else a.reports.split(",")
    env = {**os.environ, "XDG_CACHE_HOME": tempfile.mkdtemp(prefix="kview-bench-cache-")}
    results = []

    def measure(name, code):
        best = None
        for _ in range(a.repeat):
            wall, rss = run(code, env)
            best = (wall, rss) if best is None or wall < best[0] else best
        results.append({"what": name, "seconds": round(best[0], 2), "peak_rss_mib": round(best[1])})
        print(f"{name:42s} {best[0]:8.2f} s {best[1]:8.0f} MiB", flush=True)

    for name, code in SNIPPETS.items():
        measure(name, f"TRACE = {trace!r}\n" + code)
    for r in reports:
        measure(f"kview {r} (cold, --no-cache)", kview_code(trace, r, cache=False))
    # populate the cache with every frame, then reopen to a report
    run(kview_code(trace, "all", cache=True), env)
    for r in ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum"):
        measure(f"kview {r} (cached)", kview_code(trace, r, cache=True))
    info = {
        "machine": f"{platform.node()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "trace": trace,
        "date": time.strftime("%Y-%m-%d"),
        "results": results,
    }
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=1)


if __name__ == "__main__":
    main()
