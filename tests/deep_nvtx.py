"""A trace with a push never popped inside a loop: every iteration pushes `leak` (never popped),
then `work` around one kernel launch, so iteration i runs i + 1 ranges deep. Written with the
tables and columns of an nsys export (the ones kview reads).

    python tests/deep_nvtx.py OUT.sqlite DEPTH
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

VM, PID, TID = 1 << 48, 4242, 4243
GLOBAL_PID = VM | PID << 24
GLOBAL_TID = GLOBAL_PID | TID
STEP = 10_000  # ns per iteration
STRINGS = {1: "leak", 2: "work", 3: "void deep_kernel<float>(float*)", 4: "cudaLaunchKernel_v7000"}

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
  demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, gridX INTEGER, gridY INTEGER, gridZ INTEGER,
  blockX INTEGER, blockY INTEGER, blockZ INTEGER, registersPerThread INTEGER, staticSharedMemory INTEGER,
  dynamicSharedMemory INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, text TEXT,
  globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT NOT NULL);
"""


def iteration_start(i: int) -> int:
    return 1_000_000 + i * STEP


def make(path: str | Path, depth: int, leak: bool = True) -> Path:
    """`depth` iterations; without `leak` the `leak` ranges are popped at once (a flat trace)."""
    path = Path(path)
    con = sqlite3.connect(path)
    con.executescript(SCHEMA)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    nvtx, runtime, kernels = [], [], []
    for i in range(depth):
        t = iteration_start(i)
        nvtx.append((t, None if leak else t + 500, 59, GLOBAL_TID, 1))  # push("leak"), never popped
        nvtx.append((t + 1000, t + 5000, 59, GLOBAL_TID, 2))  # push("work") ... pop()
        runtime.append((t + 2000, t + 2500, 0, GLOBAL_TID, i + 1, 4, 0))
        kernels.append((t + 3000, t + 4000 + i % 7, 0, 1, 7, i + 1, GLOBAL_PID, 3, 3, 128, 1, 1, 256, 1, 1, 32, 0, 0))
    con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId) VALUES (?, ?, ?, ?, ?)", nvtx)
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?, ?, ?)", runtime)
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", kernels
    )
    con.executemany(
        "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
        [("EXPORT_PRODUCT_NAME", "deep NVTX test trace"), ("EXPORT_SCHEMA_VERSION", "3")],
    )
    con.commit()
    con.close()
    return path


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]))
