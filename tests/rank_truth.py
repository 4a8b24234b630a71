"""An independent computation of the per-rank numbers of a distributed run, in plain Python over
the SQLite rows or the JSON events (no kview code):

- a rank is a process with GPU work: torch.profiler's distributedInfo.rank, else the RANK
  variable of the process nsys launched, else the processes in order of their device;
- iterations are the step ranges (`step_N`, `ProfilerStep#N`) of the rank's process, numbered
  by their label;
- an iteration owns the GPU ops whose launch call (the runtime call of the op's correlation id,
  else the op's own start) started inside its [start, end]; its wall runs from its start to the
  later of its end and its last op's end; busy is the length of the union of its ops, compute of
  its kernels not named nccl*, communication of its nccl* kernels, exposed communication the part
  of the communication union no compute kernel covers, memory of copies and sets;
- collectives: nccl kernels by the collective their name spells; a collective instance is the
  n-th kernel of one collective launched within an iteration; the rank with the shortest joined
  last.
"""

from __future__ import annotations

import re
import sqlite3
from decimal import ROUND_HALF_UP, Decimal

from conftest import kineto_events

STEP = re.compile(r"^(step_|ProfilerStep#)(\d+)$")
COLL = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|AllToAll|SendRecv|Send|Recv)", re.I)
# the iteration table's columns this computation gives (iteration_rows)
ITERATION_COLUMNS = [
    "Rank",
    "Iteration",
    "Wall (ns)",
    "Busy (ns)",
    "Compute (ns)",
    "Communication (ns)",
    "Exposed comm (ns)",
    "Memory (ns)",
    "Idle (ns)",
]
SIZES = {"Float": 4, "BFloat16": 2, "Half": 2, "Int": 4, "Long": 8, "Double": 8, "Char": 1, "Byte": 1, "Bool": 1}


class Rank:
    def __init__(self):
        self.ops: list[tuple[int, int, str, str, int | None]] = []  # start, end, kind, name, bytes
        self.steps: dict[int, tuple[int, int]] = {}
        self.by_kernel: dict[str, int] = {}  # kernel name (demangled) -> GPU time
        self.launched: list[tuple[int, int]] = []  # per op: (launch call's start, else the op's; duration)


def _kind(name: str) -> str:
    return "communication" if name.lower().startswith(("nccl", "rccl")) else "compute"


def from_nsys(path: str, first_rank: int | None = None) -> dict[int, Rank]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    s = dict(con.execute("SELECT id, value FROM StringIds"))
    by_pid: dict[int, Rank] = {}
    device: dict[int, int] = {}
    launch: dict[tuple[int, int], int] = {}  # (pid, correlation id) -> the launch call's start
    for st, tid, corr in con.execute("SELECT start, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        launch.setdefault(((tid >> 24) & 0xFFFFFF, corr), st)
    for st, en, dev, gpid, nid, full, corr in con.execute(
        "SELECT start, end, deviceId, globalPid, shortName, demangledName, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        pid = (gpid >> 24) & 0xFFFFFF
        r = by_pid.setdefault(pid, Rank())
        r.ops.append((st, en, _kind(s[nid]), s[nid], None))
        r.by_kernel[s[full]] = r.by_kernel.get(s[full], 0) + en - st
        r.launched.append((launch.get((pid, corr), st), en - st))
        device[pid] = dev
    for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        for st, en, gpid, nbytes, corr in con.execute(
            f"SELECT start, end, globalPid, bytes, correlationId FROM {table}"
        ):
            pid = (gpid >> 24) & 0xFFFFFF
            by_pid.setdefault(pid, Rank()).ops.append((st, en, "memory", "mem", nbytes))
            by_pid[pid].launched.append((launch.get((pid, corr), st), en - st))
    for st, en, tid, label in con.execute(
        "SELECT start, end, globalTid, coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) "
        "FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL"
    ):
        m = STEP.match(label or "")
        pid = (tid >> 24) & 0xFFFFFF
        if m and pid in by_pid:
            by_pid[pid].steps[int(m.group(2))] = (st, en)
    env = (
        [
            v
            for (v,) in con.execute(
                "SELECT value FROM META_DATA_CAPTURE WHERE name = "
                "'PROCESS_0:ENVIRONMENT_VARIABLE' AND value LIKE 'RANK=%'"
            )
        ]
        if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'META_DATA_CAPTURE'").fetchone()
        else []
    )
    if env and len(by_pid) == 1:
        return {int(env[0].split("=")[1].strip('"')): next(iter(by_pid.values()))}
    if first_rank is not None and len(by_pid) == 1:
        return {first_rank: next(iter(by_pid.values()))}
    return {r: by_pid[pid] for r, pid in enumerate(sorted(by_pid, key=lambda p: (device[p], p)))}


def _ns(v) -> int:
    return int((Decimal(v) * 1000).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def from_kineto(path) -> dict[int, Rank]:
    import gzip
    import json

    raw = open(path, "rb").read()
    head = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)["distributedInfo"]
    r = Rank()
    launch: dict[int, int] = {}  # correlation id -> the launch call's start
    for e in kineto_events(path, ("cuda_runtime", "cuda_driver")):
        corr = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and corr is not None:
            launch.setdefault(corr, _ns(e["ts"]))
    for e in kineto_events(path, ("kernel", "gpu_memcpy", "gpu_memset", "user_annotation")):
        if e.get("ph") != "X":
            continue
        st = _ns(e["ts"])
        en = st + _ns(e.get("dur", 0))
        a = e.get("args") or {}
        if e["cat"] == "user_annotation":
            m = STEP.match(e["name"])
            if m:
                r.steps[int(m.group(2))] = (st, en)
            continue
        r.launched.append((launch.get(a.get("correlation"), st), en - st))
        if e["cat"] == "kernel":
            nbytes = None
            if "Collective name" in a and a.get("dtype") in SIZES:
                nbytes = max(a["In msg nelems"], a["Out msg nelems"]) * SIZES[a["dtype"]]
            r.ops.append((st, en, _kind(e["name"]), e["name"], nbytes))
            r.by_kernel[e["name"]] = r.by_kernel.get(e["name"], 0) + en - st
        else:
            r.ops.append((st, en, "memory", "mem", a.get("bytes")))
    return {int(head["rank"]): r}


def union_within(intervals, lo: int, hi: int) -> int:
    """Length of the union of `intervals` clipped to [lo, hi]."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0)


def owned(r: Rank, lo: int, hi: int) -> list[tuple[int, int, str, str, int | None]]:
    """The ops of `r` whose launch started inside [lo, hi]."""
    return [op for op, (t, _) in zip(r.ops, r.launched) if lo <= t <= hi]


def iteration_rows(ranks: dict[int, Rank]) -> list[tuple]:
    """(rank, iteration, wall, busy, compute, communication, exposed, memory, idle), sorted."""
    rows = []
    for rank, r in ranks.items():
        for it, (lo, hi) in r.steps.items():
            mine = owned(r, lo, hi)
            top = max([e for _, e, *_ in mine] + [hi])

            def of(kinds, ops=mine):
                return [(s, e) for s, e, k, _, _ in ops if k in kinds]

            busy = union_within(of({"compute", "communication", "memory"}), lo, top)
            comp = union_within(of({"compute"}), lo, top)
            comm = union_within(of({"communication"}), lo, top)
            either = union_within(of({"compute", "communication"}), lo, top)
            mem = union_within(of({"memory"}), lo, top)
            rows.append((rank, it, top - lo, busy, comp, comm, either - comp, mem, top - lo - busy))
    return sorted(rows)


def collectives(ranks: dict[int, Rank]) -> dict[tuple[int, str], tuple[int, int, int | None]]:
    """(rank, collective) -> (count, time, bytes or None)."""
    out: dict[tuple[int, str], list] = {}
    for rank, r in ranks.items():
        for s, e, k, name, nbytes in r.ops:
            if k == "communication":
                m = COLL.search(name)
                c = out.setdefault((rank, m.group(1) if m else "other"), [0, 0, None])
                c[0] += 1
                c[1] += e - s
                if nbytes is not None:
                    c[2] = (c[2] or 0) + nbytes
    return {k: tuple(v) for k, v in out.items()}


def stragglers(ranks: dict[int, Rank]) -> dict[tuple[int, str, int], tuple[int, int, int]]:
    """(iteration, collective, n) -> (last rank, others' wait, longest wait) for the instances
    seen on two or more ranks."""
    inst: dict[tuple[int, str, int], dict[int, int]] = {}
    for rank, r in ranks.items():
        seen: dict[tuple[int, str], int] = {}
        for (s, e, k, name, _), (t, _) in sorted(zip(r.ops, r.launched)):
            if k != "communication":
                continue
            its = [it for it, (lo, hi) in r.steps.items() if lo <= t <= hi]
            if not its:
                continue
            m = COLL.search(name)
            key = (its[0], m.group(1) if m else "other")
            seen[key] = seen.get(key, 0) + 1
            inst.setdefault((*key, seen[key]), {})[rank] = e - s
    out = {}
    for key, durs in inst.items():
        if len(durs) < 2:
            continue
        least = min(durs.values())
        last = min(r for r, d in durs.items() if d == least)
        waits = [d - least for d in durs.values()]
        out[key] = (last, sum(waits), max(waits))
    return out


def step_gpu(r: Rank) -> dict[str, int]:
    """step_N -> GPU time of the rank's ops launched while its step range was open."""
    return {f"step_{it}": sum(d for t, d in r.launched if lo <= t <= hi) for it, (lo, hi) in r.steps.items()}
