"""An independent count of what the Layer column should say, in plain Python over the SQLite
rows (no kview code): for every kernel, its direction and module path, from the NVTX ranges
enclosing its launch call.

- fprop: launched inside a PyTorch op range (`aten::x, seq = N, op_id = K`); its layer is the
  path of user ranges (module ranges) around the launch, outer to inner, each left out when the
  next one starts with it plus "." or ":", joined with ":".
- bprop: launched inside a backward node `XBackward0, seq = N` (or after it, inside its
  `autograd::engine::evaluate_function`); its layer is the layer around the forward op with the
  same seq, the latest that started before the node.
- optim: inside `Optimizer.step#...` / `Optimizer.zero_grad#...`.

    python tests/layer_truth.py TRACE.sqlite ...   prints the share of fprop kernels with a module
                                                   path and of bprop kernels mapped to one
"""

from __future__ import annotations

import functools
import re
import sqlite3
import sys
from bisect import bisect_right

MARKER = re.compile(r", op_id = |, seq = |#|::|^\{'")
STEP = re.compile(r"^step_\d+$")
PHASES = {"warmup", "profiled_step", "forward_pass", "backward_pass", "optimizer_step"}


def _layer(names: list[str]) -> str | None:
    users = [n for n in names if not MARKER.search(n) and not STEP.match(n) and n not in PHASES]
    kept = [n for i, n in enumerate(users) if not (i + 1 < len(users) and users[i + 1].startswith((n + ".", n + ":")))]
    return ":".join(kept) or None


def truth(path, table: str = "CUPTI_ACTIVITY_KIND_KERNEL") -> list[tuple[int, str, str | None]]:
    """(kernel start, direction, layer or None) for every kernel (or every row of another GPU
    activity `table`: memcpy, memset), ordered by start."""
    return list(_truth(str(path), table))


# once per trace file and table in a test process (a second of CPU on the llama traces): the
# fixtures are opened immutable and never change during a run
@functools.cache
def _truth(path: str, table: str) -> tuple[tuple[int, str, str | None], ...]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    rows = con.execute(
        "SELECT start, end, globalTid, coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) "
        "FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL"
    ).fetchall()
    by_tid: dict[int, list] = {}
    for s, e, tid, name in rows:
        by_tid.setdefault(tid, []).append((s, -e, name or ""))
    starts = {}
    for tid, rs in by_tid.items():
        rs.sort()
        starts[tid] = [r[0] for r in rs]

    def enclosing(tid: int, s: int, e: int) -> list[tuple[int, int, str]]:
        rs = by_tid.get(tid, [])
        hi = bisect_right(starts.get(tid, []), s)
        return [(st, -ne, n) for st, ne, n in rs[:hi] if -ne >= e]  # outer to inner (start order)

    fwd_by_seq: dict[int, list[tuple[int, int]]] = {}
    for s, _e, tid, name in rows:
        m = re.match(r"^([^,]+), seq = (\d+)", name or "")
        if m and not re.search(r"Backward\d*$", m[1]) and not m[1].startswith("autograd::"):
            fwd_by_seq.setdefault(int(m[2]), []).append((s, tid))
    kern = con.execute(
        f"SELECT k.start, r.start, r.end, r.globalTid FROM {table} k JOIN "
        "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId ORDER BY k.start"
    ).fetchall()
    out = []
    for kstart, rs, re_, tid in kern:
        stack = enclosing(tid, rs, re_)
        bare = [n.split(",")[0] for _, _, n in stack]
        layer = None
        if any(b.startswith("Optimizer.") for b in bare):
            d = "optim"
        elif any(re.search(r"Backward\d*$", b) or b.startswith("autograd::engine") for b in bare):
            d = "bprop"
            seqs = [(s, int(m[1])) for s, _, n in stack if (m := re.search(r"Backward\d*, seq = (\d+)", n))]
            if not seqs:  # after the node's own range, inside evaluate_function: its first child node
                ev = [(s, e) for s, e, n in stack if n.startswith("autograd::engine::evaluate_function")]
                if ev:
                    s0, e0 = ev[-1]
                    kids = [
                        (s, int(m[1]))
                        for s, ne, n in by_tid[tid]
                        if s0 <= s and -ne <= e0 and (m := re.search(r"Backward\d*, seq = (\d+)", n))
                    ]
                    seqs = sorted(kids)[:1]
            if seqs:
                bstart, seq = seqs[-1]
                cands = [c for c in fwd_by_seq.get(seq, []) if c[0] <= bstart]
                if cands:
                    fs, ftid = max(cands)
                    layer = _layer([n for _, _, n in enclosing(ftid, fs, fs)])
        elif any(", op_id = " in n or ", seq = " in n for _, _, n in stack):
            d = "fprop"
            layer = _layer([n for _, _, n in stack])
        else:
            d = "-"
        out.append((kstart, d, layer))
    return tuple(out)


def coverage(path) -> dict[str, float | int]:
    t = truth(path)
    f = [x for x in t if x[1] == "fprop"]
    b = [x for x in t if x[1] == "bprop"]
    return {
        "kernels": len(t),
        "fprop": len(f),
        "bprop": len(b),
        "fprop_with_module": sum(x[2] is not None for x in f) / max(len(f), 1),
        "bprop_with_module": sum(x[2] is not None for x in b) / max(len(b), 1),
    }


if __name__ == "__main__":
    for p in sys.argv[1:]:
        c = coverage(p)
        print(
            f"{p}: {c['kernels']} kernels; fprop {c['fprop']}, {100 * c['fprop_with_module']:.1f}% with a module "
            f"path; bprop {c['bprop']}, {100 * c['bprop_with_module']:.1f}% mapped to their forward op's module"
        )
