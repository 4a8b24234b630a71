"""The floor of `kview stats -r nvtx_sum TRACE -f csv --no-cache`: what no change after the read
can remove, each part timed alone in a process of its own.

  read        the NVTX read alone: the connectorx queries `nsys_reader.nvtx_events` makes (the
              same SQL, rowid parts and threads, on the same file), timed around those calls only
              (the casts between them excluded)
  read+types  `nvtx_events` whole: the read with its casts to kview's types
  write       the report's frame (built first, not timed) through polars' CSV writer to /dev/null
              with the options kview writes nsys's CSV with (minimal quoting, no header, '\\n'),
              the names first copied in row order (not timed), as the writer reads them best
  write as made  the same frame with the names as the report leaves them (their bytes in the
              order the names were made, not the rows'), for comparison

Each figure: wall seconds and CPU seconds (user + system, every thread of the process) around
the part alone, and the process's peak RSS (for the write, that of building the frame too).
The command itself is timed last, a whole process, for the share the floor is of it.

    python bench/nvtx_sum_floor.py /tmp/perf/dense_x25.sqlite [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

PARTS = ("read", "read+types", "write", "write as made")


def _clock() -> tuple[float, float]:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), use.ru_utime + use.ru_stime


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _read(path: str, whole: bool) -> dict:
    from kview.io import nsys_reader
    from kview.io.sqlite_source import read_threads

    src = nsys_reader.NsysSource(Path(path)).db
    spent = [0.0, 0.0]
    query = src.query

    def timed(sql, **kw):
        w, c = _clock()
        out = query(sql, **kw)
        w2, c2 = _clock()
        spent[0] += w2 - w
        spent[1] += c2 - c
        return out

    if not whole:
        src.query = timed  # type: ignore[method-assign]
    w, c = _clock()
    frame = nsys_reader.nvtx_events(src)
    w2, c2 = _clock()
    wall, cpu = (w2 - w, c2 - c) if whole else spent
    return {"wall_s": wall, "cpu_s": cpu, "rows": frame.height, "threads": read_threads()}


def _write(path: str, copied: bool) -> dict:
    import polars as pl

    from kview.output import render
    from kview.reports.nvtx import nvtx_sum
    from kview.trace import open_trace

    trace = open_trace(path, use_cache=False)
    trace.one_command = True
    report = nvtx_sum(trace)
    del trace
    # the cells as kview's CSV writer hands them to polars (numbers as they are, the style's
    # names as polars writes an enum's)
    frame = render._cells(render.as_data(report.frame), report.decimals, odd=('"', "\r"))
    if copied:
        frame = frame.with_columns(
            pl.Series(c, frame[c].to_arrow(compat_level=pl.CompatLevel.oldest()), dtype=pl.String)
            for c, t in frame.schema.items()
            if t == pl.String
        )
    with open(os.devnull, "wb") as out:
        w, c = _clock()
        frame.write_csv(out, quote_style="necessary", include_header=False, line_terminator="\n")
        w2, c2 = _clock()
    return {"wall_s": w2 - w, "cpu_s": c2 - c, "rows": frame.height}


def _child(part: str, path: str) -> None:
    if part in ("read", "read+types"):
        got = _read(path, part == "read+types")
    else:
        got = _write(path, part == "write")
    got["peak_rss_mib"] = round(_peak_mib())
    print(json.dumps(got))


def _run(args: list[str]) -> dict:
    env = {**os.environ, "KVIEW_UNSUPERVISED": "1"}
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _command(path: str) -> dict:
    """The command, a whole process: wall from here, CPU and peak RSS from wait4."""
    kview = Path(sys.executable).with_name("kview")
    t = time.perf_counter()
    with open(os.devnull, "wb") as null:
        proc = subprocess.Popen(
            [str(kview), "stats", "-r", "nvtx_sum", path, "-f", "csv", "--no-cache"],
            stdout=null,
            stderr=subprocess.DEVNULL,
        )
        _, status, use = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"kview failed on {path}")
    return {
        "wall_s": time.perf_counter() - t,
        "cpu_s": use.ru_utime + use.ru_stime,
        "peak_rss_mib": round(use.ru_maxrss / 1024),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each part (each figure: every run's)")
    ap.add_argument("--child", choices=PARTS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.trace)
        return
    print(f"# {args.trace}; load {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores")
    for _ in range(args.repeat):
        for part in PARTS:
            got = _run([sys.executable, __file__, args.trace, "--child", part])
            print(f"{part:14s} {got['wall_s']:6.2f} s wall {got['cpu_s']:6.2f} s CPU {got['peak_rss_mib']:6d} MiB")
        got = _command(args.trace)
        print(f"{'command':14s} {got['wall_s']:6.2f} s wall {got['cpu_s']:6.2f} s CPU {got['peak_rss_mib']:6d} MiB")
    print(f"# load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
