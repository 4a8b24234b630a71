"""Tile a torch.profiler Chrome trace N times along time (ts shifted, correlation and External
ids offset), to benchmark the JSON reader at HTA's 0.56M-event scale and beyond.

    python bench/tile_json.py sample_traces/lm-small_ctx256_train_torch.json.gz 27 /tmp/bench/tiled.json
"""

from __future__ import annotations

import gzip
import json
import sys


def main() -> None:
    src, n, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    ev = doc["traceEvents"]
    ts = [e["ts"] for e in ev if isinstance(e.get("ts"), (int, float))]
    span = max(ts) - min(ts) + 1000.0
    corr = max((e.get("args") or {}).get("correlation", 0) or 0 for e in ev) + 1
    ext = max((e.get("args") or {}).get("External id", 0) or 0 for e in ev) + 1
    with open(dst, "w") as out:
        out.write("{\n")
        for k, v in doc.items():
            if k != "traceEvents":
                out.write(f"  {json.dumps(k)}: {json.dumps(v)},\n")
        out.write('  "traceEvents": [\n')
        first = True
        for c in range(n):
            for e in ev:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)):
                    e2["ts"] = round(e2["ts"] + c * span, 3)
                a = e2.get("args")
                if isinstance(a, dict):
                    a = dict(a)
                    if "correlation" in a:
                        a["correlation"] += c * corr
                    if "External id" in a:
                        a["External id"] += c * ext
                    e2["args"] = a
                if e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                    e2["id"] += c * corr
                out.write(("" if first else ",\n") + "  " + json.dumps(e2))
                first = False
        out.write("\n  ]\n}\n")
    print(f"{n} copies of {len(ev)} events -> {dst}")


if __name__ == "__main__":
    main()
