"""Tile a real nsys export N times along time, to benchmark at 1M-kernel scale.

Copy k (k = 1..N-1) of every kernel, runtime call, memcpy, memset, OSRT call and NVTX range is
shifted by k times the trace span (plus a gap), and correlation ids by k times (max id + 1),
so every GPU op still links to exactly one launch call. Everything else (strings, threads,
devices, metadata) is kept once. SQLite does the copying itself (INSERT .. SELECT).

    python bench/tile_trace.py sample_traces/lm-small_ctx256_train_nsys.sqlite 440 /tmp/tiled.sqlite
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import time

TILED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "1",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "1",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "1",
    "CUPTI_ACTIVITY_KIND_MEMSET": "1",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "1",
    "OSRT_API": "1",
    "NVTX_EVENTS": "eventType IN (59, 60, 70, 71)",
}
SHIFTED_TIME = {"start", "end"}
SHIFTED_CORR = {"correlationId"}


def tile(src: str, n: int, dst: str) -> dict[str, int]:
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute(f"ATTACH DATABASE 'file:{src}?mode=ro' AS src")
    tables = {r[0] for r in con.execute("SELECT name FROM src.sqlite_master WHERE type='table'")}
    lo, hi, corr = None, None, 0
    for t in TILED:
        if t not in tables:
            continue
        a, b = con.execute(f"SELECT min(start), max(coalesce(end, start)) FROM src.{t} WHERE {TILED[t]}").fetchone()
        if a is not None and t != "NVTX_EVENTS":  # NVTX domain rows can carry negative starts
            lo = a if lo is None else min(lo, a)
        if b is not None:
            hi = b if hi is None else max(hi, b)
        cols = [r[1] for r in con.execute(f"PRAGMA src.table_info({t})")]
        if "correlationId" in cols:
            corr = max(corr, con.execute(f"SELECT coalesce(max(correlationId), 0) FROM src.{t}").fetchone()[0])
    span = (hi - lo) + 1_000_000  # 1 ms gap between copies
    coff = corr + 1
    for t, where in TILED.items():
        if t not in tables:
            continue
        cols = [r[1] for r in con.execute(f"PRAGMA src.table_info({t})")]
        for k in range(1, n):
            sel = []
            for c in cols:
                if c in SHIFTED_TIME:
                    sel.append(f'"{c}" + {k * span}')
                elif c in SHIFTED_CORR:
                    sel.append(f'"{c}" + {k * coff}')
                else:
                    sel.append(f'"{c}"')
            con.execute(
                f"INSERT INTO main.{t} ({', '.join(chr(34) + c + chr(34) for c in cols)}) "
                f"SELECT {', '.join(sel)} FROM src.{t} WHERE {where}"
            )
        con.commit()
    counts = {t: con.execute(f"SELECT count(*) FROM main.{t}").fetchone()[0] for t in TILED if t in tables}
    con.execute("DETACH DATABASE src")
    con.close()
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source")
    p.add_argument("copies", type=int)
    p.add_argument("output")
    a = p.parse_args()
    t0 = time.perf_counter()
    counts = tile(a.source, a.copies, a.output)
    print(f"tiled {a.copies}x in {time.perf_counter() - t0:.1f} s:", counts)


if __name__ == "__main__":
    main()
