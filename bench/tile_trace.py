"""Tile a real nsys export N times along time, to benchmark at 1M-kernel scale.

Copy k (k = 1..N-1) of every kernel, runtime call, memcpy, memset, OSRT call and NVTX range is
shifted by k times the trace span (plus a gap), and correlation ids by k times (max id + 1),
so every GPU op still links to exactly one launch call. Everything else (strings, threads,
devices, metadata) is kept once. SQLite does the copying itself (INSERT .. SELECT).

With --distinct-labels each copy reads like later steps of the same run rather than a replay:
PyTorch's op ranges get their `seq = N` and `op_id = N` (and the op ids in `input_op_ids` that
the trace itself produced) advanced by k times the trace's largest value, and `step_N` ranges
by k times the number of steps, so labels stay as distinct as in one long capture; module
ranges (`model.layers.3.mlp`) repeat, as they do in a real run.

    python bench/tile_trace.py sample_traces/lm-small_ctx256_train_nsys.sqlite 440 /tmp/tiled.sqlite
    python bench/tile_trace.py --distinct-labels dense.sqlite 25 /work/data/dense/dense_x25.sqlite
"""

from __future__ import annotations

import argparse
import re
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
SEQ = re.compile(r"\bseq = (\d+)")
OP_ID = re.compile(r"\bop_id = (\d+)")
INPUT_ID = re.compile(r"\((\d+),(-?\d+)\)")
STEP = re.compile(r"step_(\d+)")


def _label_offsets(con: sqlite3.Connection) -> tuple[int, int, int, int]:
    """Largest seq and op_id, smallest op_id and the number of steps of the source's NVTX text."""
    seq, op_hi, op_lo, steps = 0, 0, None, set()
    for (text,) in con.execute("SELECT text FROM src.NVTX_EVENTS WHERE text IS NOT NULL"):
        if (m := SEQ.search(text)) is not None:
            seq = max(seq, int(m.group(1)))
        if (m := OP_ID.search(text)) is not None:
            v = int(m.group(1))
            op_hi, op_lo = max(op_hi, v), v if op_lo is None else min(op_lo, v)
        if (m := STEP.fullmatch(text)) is not None:
            steps.add(int(m.group(1)))
    return seq + 1, op_hi + 1, op_lo or 0, max(len(steps), 1)


def _relabeller(seq_span: int, op_span: int, op_lo: int, n_steps: int):
    """SQLite function (text, k) -> the label copy k of that range would carry in a longer run."""

    def relabel(text: str | None, k: int) -> str | None:
        if text is None:
            return None
        if (m := STEP.fullmatch(text)) is not None:
            return f"step_{int(m.group(1)) + k * n_steps}"
        if "op_id = " not in text and "seq = " not in text:
            return text
        text = SEQ.sub(lambda m: f"seq = {int(m.group(1)) + k * seq_span}", text)
        text = OP_ID.sub(lambda m: f"op_id = {int(m.group(1)) + k * op_span}", text)
        head, sep, inputs = text.partition("input_op_ids = ")
        if sep:  # ids made before the capture (parameters) stay, ids made in it move with the copy
            inputs = INPUT_ID.sub(
                lambda m: m.group(0) if int(m.group(1)) < op_lo else f"({int(m.group(1)) + k * op_span},{m.group(2)})",
                inputs,
            )
        return head + sep + inputs

    return relabel


def tile(src: str, n: int, dst: str, distinct_labels: bool = False) -> dict[str, int]:
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
    if distinct_labels and "NVTX_EVENTS" in tables:
        con.create_function("relabel", 2, _relabeller(*_label_offsets(con)), deterministic=True)
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
                elif distinct_labels and t == "NVTX_EVENTS" and c == "text":
                    sel.append(f'relabel("text", {k})')
                else:
                    sel.append(f'"{c}"')
            con.execute(
                f"INSERT INTO main.{t} ({', '.join(chr(34) + c + chr(34) for c in cols)}) "
                f"SELECT {', '.join(sel)} FROM src.{t} WHERE {where}"
            )
        con.commit()
    # the session lasts as long as the copies do (its end bounds where rows may lie)
    if "ANALYSIS_DETAILS" in tables and "duration" in [
        r[1] for r in con.execute("PRAGMA main.table_info(ANALYSIS_DETAILS)")
    ]:
        con.execute(f"UPDATE main.ANALYSIS_DETAILS SET duration = duration + {(n - 1) * span}")
        con.commit()
    counts = {t: con.execute(f"SELECT count(*) FROM main.{t}").fetchone()[0] for t in TILED if t in tables}
    con.execute("DETACH DATABASE src")
    con.close()
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--distinct-labels",
        action="store_true",
        help="advance op seq/op_id and step_N in every copy, as a longer capture would",
    )
    p.add_argument("source")
    p.add_argument("copies", type=int)
    p.add_argument("output")
    a = p.parse_args()
    t0 = time.perf_counter()
    counts = tile(a.source, a.copies, a.output, a.distinct_labels)
    print(f"tiled {a.copies}x in {time.perf_counter() - t0:.1f} s:", counts)


if __name__ == "__main__":
    main()
