"""Write normalized trace frames into a SQLite file with the tables and columns of an nsys
export, so traces captured without Nsight Systems open with the same reader and reports.

Only the tables kview reads are written: StringIds, CUPTI_ACTIVITY_KIND_{KERNEL,RUNTIME,
MEMCPY,MEMSET}, NVTX_EVENTS, ThreadNames, PROCESSES, TARGET_INFO_GPU, ENUM_CUDA_MEMCPY_OPER
and META_DATA_EXPORT (EXPORT_SCHEMA_VERSION marks the file as kview-made).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import polars as pl

from kview.io.kineto_reader import read
from kview.io.schema import (
    KERNEL_COLUMNS,
    MEMCPY_COLUMNS,
    MEMCPY_KIND_LABELS,
    MEMSET_COLUMNS,
    NVTX_COLUMNS,
    RUNTIME_COLUMNS,
    VM,
)

SCHEMA = """
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
  shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER,
  gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,
  staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, localMemoryPerThread INTEGER, localMemoryTotal INTEGER,
  gridId INTEGER, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL,
  copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,
  srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER,
  virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, value INTEGER,
  bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
  int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT,
  isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
  smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER,
  computeMajor INTEGER, computeMinor INTEGER);
CREATE TABLE ENUM_CUDA_MEMCPY_OPER (id INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, label TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT NOT NULL);
"""


def _insert(con: sqlite3.Connection, table: str, frame: pl.DataFrame, spec: dict | None = None) -> None:
    """Insert a normalized frame; `spec` maps raw nsys column -> (normalized name, dtype)."""
    if frame.height == 0:
        return
    if spec:
        pairs = [(raw, name) for raw, (name, _) in spec.items() if name in frame.columns and raw != "rowid"]
        frame = frame.select([pl.col(name).alias(raw) for raw, name in pairs])
    cols = frame.columns
    sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
    con.executemany(sql, frame.iter_rows())


def write(
    path: str | os.PathLike,
    *,
    strings: pl.DataFrame,
    kernels: pl.DataFrame,
    runtime: pl.DataFrame,
    memcpy: pl.DataFrame,
    memset: pl.DataFrame,
    nvtx_events: pl.DataFrame,
    processes: pl.DataFrame,
    devices: pl.DataFrame,
    metadata: dict[str, str],
) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(SCHEMA)
        _insert(con, "StringIds", strings.select("id", "value"))
        _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL", kernels, KERNEL_COLUMNS)
        rt = runtime.with_columns(pl.lit(0).alias("returnValue"))
        _insert(
            con,
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            rt.select([pl.col(n).alias(raw) for raw, (n, _) in RUNTIME_COLUMNS.items()] + ["returnValue"]),
        )
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", memcpy, MEMCPY_COLUMNS)
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", memset, MEMSET_COLUMNS)
        _insert(con, "NVTX_EVENTS", nvtx_events.with_columns(pl.col("text").cast(pl.String)), NVTX_COLUMNS)
        _insert(con, "PROCESSES", processes.select(pl.col("global_pid").alias("globalPid"), "pid", "name"))
        if devices.height:
            _insert(con, "TARGET_INFO_GPU", devices.select(pl.lit(VM).alias("vmId"), *[c for c in devices.columns]))
        _insert(
            con,
            "ENUM_CUDA_MEMCPY_OPER",
            pl.DataFrame(
                {
                    "id": list(MEMCPY_KIND_LABELS),
                    "name": [f"CUDA_MEMCPY_OPER_{k}" for k in MEMCPY_KIND_LABELS],
                    "label": list(MEMCPY_KIND_LABELS.values()),
                }
            ),
        )
        _insert(
            con,
            "META_DATA_EXPORT",
            pl.DataFrame(
                {"name": list(metadata), "value": list(metadata.values())},
                schema={"name": pl.String, "value": pl.String},
            ),
        )
        con.commit()
    finally:
        con.close()
    os.replace(tmp, path)
    return path


def convert_kineto(js: Path, out: Path, info: dict, command: str) -> Path:
    """A torch.profiler trace (JSON) -> an nsys-schema SQLite trace, with the capture facts."""
    k = read(js)
    meta = {
        **k.metadata,
        "EXPORT_PRODUCT_NAME": "kview capture (torch.profiler)",
        "EXPORT_SCHEMA_VERSION": "kview-1",
        "CAPTURE_BACKEND": "torch",
        **{f"CAPTURE_{key.upper()}": str(v) for key, v in info.items()},
        "CAPTURE_COMMAND": command,
    }
    return write(
        out,
        strings=k.strings,
        kernels=k.kernels,
        runtime=k.runtime,
        memcpy=k.memcpy,
        memset=k.memset,
        nvtx_events=k.nvtx_events,
        processes=k.processes,
        devices=k.devices,
        metadata=meta,
    )
