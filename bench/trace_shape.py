"""The shape of nsys-schema traces, counted with sqlite3 alone (no kview): kernels, devices and
processes, runtime rows, NVTX push/pop ranges, ranges per kernel, distinct labels, op ranges
with seq/op_id, deepest nesting on one thread, and the step_N ranges.

    python bench/trace_shape.py TRACE.sqlite ...
"""

from __future__ import annotations

import sqlite3
import sys


def shape(path: str) -> dict:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    q = lambda sql: con.execute(sql).fetchone()  # noqa: E731
    kernels, devices, procs = q(
        "SELECT count(*), count(DISTINCT deviceId), count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    )
    label = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))"
    ranges, labels = q(f"SELECT count(*), count(DISTINCT {label}) FROM NVTX_EVENTS WHERE eventType = 59")
    ops = q(
        "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND (text LIKE '%, seq = %' OR text LIKE '%op_id = %')"
    )[0]
    deepest, stack, tid_now = 0, [], None
    for tid, s, e in con.execute(
        "SELECT globalTid, start, coalesce(end, 9223372036854775807) FROM NVTX_EVENTS "
        "WHERE eventType = 59 ORDER BY globalTid, start, end DESC"
    ):
        if tid != tid_now:
            stack, tid_now = [], tid
        while stack and stack[-1] <= s:
            stack.pop()
        stack.append(e)
        deepest = max(deepest, len(stack))
    steps = [
        r[0]
        for r in con.execute(
            f"SELECT {label} t FROM NVTX_EVENTS WHERE eventType = 59 AND t GLOB 'step_[0-9]*' ORDER BY start"
        )
    ]
    return {
        "trace": path,
        "kernels": kernels,
        "devices": devices,
        "processes": procs,
        "runtime": q("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0],
        "nvtx_ranges": ranges,
        "ranges_per_kernel": round(ranges / kernels, 2) if kernels else None,
        "distinct_labels": labels,
        "op_ranges": ops,
        "deepest": deepest,
        "steps": steps,
    }


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(shape(p))
