"""kview's normalized trace schema, shared by both readers and the capture writer.

The logical tables (kernels, runtime, memcpy, memset, osrt) carry nsys's column names mapped to
kview's (`deviceId` -> `device`, all int64 ns timestamps); NVTX event types and memcpy kinds
are nsys's enum values; thread and process ids are nsys's packed globalTid. An nsys export is
read through these maps, a torch.profiler trace is built into them, and `kview capture` writes
them back as an nsys-shaped SQLite file.
"""

from __future__ import annotations

import polars as pl

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX = "NVTX_EVENTS"
OSRT = "OSRT_API"
# nsys --cuda-memory-usage=true: one row per CUDA allocation or free (cudaMalloc, cuMemAlloc, ...)
MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
# torch.profiler(profile_memory=True)'s `[memory]` events: not an nsys table, a Kineto frame
KINETO_MEMORY = "[memory]"

# ENUM_NSYS_EVENT_TYPE values (stable across versions; 2022.1 has no ENUM tables).
NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND = 59, 60, 70, 71
NVTX_RANGE_TYPES = (NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)
NVTX_DOMAIN_CREATE = 75

# globalTid packs VM id << 48 | pid << 24 | tid (nsys); kview's own traces use VM 1.
VM = 1 << 48
# globalTid -> globalPid (VM id and PID kept): bits 24-63, written as the signed 64-bit value of
# 0xFFFFFFFFFF000000 so `col & PID_MASK` stays Int64 (the unsigned literal made polars widen every
# such column to Int128, whose joins and hashes are several times slower); same bits on ids >= 0
PID_MASK = -(1 << 24)
PID_ONLY = 0x0000FFFFFF000000  # the PID bits alone (what nsys matches domains by)
ID_BITS = 0x1000000  # a pid or tid field holds 24 bits


def global_tid(pid: pl.Expr, tid: pl.Expr) -> pl.Expr:
    """nsys's globalTid of (pid, tid) in VM 1, for traces that carry plain ids."""
    # a null or empty id (a damaged trace) is thread 0 of process 0, not a null that every later step would carry
    pid, tid = pid.cast(pl.Int64).fill_null(0), tid.cast(pl.Int64).fill_null(0)
    return pl.lit(VM, dtype=pl.Int64) + (pid % ID_BITS) * ID_BITS + (tid % ID_BITS)


def global_pid(pid: int) -> int:
    """nsys's globalPid of a plain pid, in VM 1."""
    return VM + (pid % ID_BITS) * ID_BITS


# ENUM_CUDA_MEMCPY_OPER labels, for exports that predate the ENUM tables (2022.1).
MEMCPY_KIND_LABELS = {
    0: "Unknown",
    1: "Host-to-Device",
    2: "Device-to-Host",
    3: "Host-to-Array",
    4: "Array-to-Host",
    5: "Array-to-Array",
    6: "Array-to-Device",
    7: "Device-to-Array",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
    11: "Unified Host-to-Device",
    12: "Unified Device-to-Host",
    13: "Unified Device-to-Device",
}

# raw nsys column -> (kview's name, type), per logical table
KERNEL_COLUMNS = {
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "deviceId": ("device", pl.Int64),
    "contextId": ("context", pl.Int64),
    "streamId": ("stream", pl.Int64),
    "correlationId": ("correlation", pl.Int64),
    "globalPid": ("global_pid", pl.Int64),
    "demangledName": ("name_id", pl.Int64),
    "shortName": ("short_name_id", pl.Int64),
    "gridX": ("grid_x", pl.Int64),
    "gridY": ("grid_y", pl.Int64),
    "gridZ": ("grid_z", pl.Int64),
    "blockX": ("block_x", pl.Int64),
    "blockY": ("block_y", pl.Int64),
    "blockZ": ("block_z", pl.Int64),
    "registersPerThread": ("registers", pl.Int64),
    "staticSharedMemory": ("static_smem", pl.Int64),
    "dynamicSharedMemory": ("dynamic_smem", pl.Int64),
    "graphNodeId": ("graph_node", pl.Int64),
}
RUNTIME_COLUMNS = {
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "globalTid": ("global_tid", pl.Int64),
    "correlationId": ("correlation", pl.Int64),
    "nameId": ("name_id", pl.Int64),
    "eventClass": ("event_class", pl.Int64),
}
MEMCPY_COLUMNS = {
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "deviceId": ("device", pl.Int64),
    "streamId": ("stream", pl.Int64),
    "correlationId": ("correlation", pl.Int64),
    "globalPid": ("global_pid", pl.Int64),
    "bytes": ("bytes", pl.Int64),
    "copyKind": ("copy_kind", pl.Int64),
    "srcKind": ("src_kind", pl.Int64),
    "dstKind": ("dst_kind", pl.Int64),
}
MEMSET_COLUMNS = {
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "deviceId": ("device", pl.Int64),
    "streamId": ("stream", pl.Int64),
    "correlationId": ("correlation", pl.Int64),
    "globalPid": ("global_pid", pl.Int64),
    "bytes": ("bytes", pl.Int64),
    "memKind": ("mem_kind", pl.Int64),
}
NVTX_COLUMNS = {
    "rowid": ("id", pl.Int64),
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "eventType": ("event_type", pl.Int64),
    "text": ("text", pl.String),
    "textId": ("text_id", pl.Int64),
    "globalTid": ("global_tid", pl.Int64),
    "endGlobalTid": ("end_global_tid", pl.Int64),
    "domainId": ("domain_id", pl.Int64),
}
OSRT_COLUMNS = {
    "start": ("start", pl.Int64),
    "end": ("end", pl.Int64),
    "globalTid": ("global_tid", pl.Int64),
    "nameId": ("name_id", pl.Int64),
    "eventClass": ("event_class", pl.Int64),
}

MEMORY_USAGE_COLUMNS = {
    "start": ("start", pl.Int64),
    "globalPid": ("global_pid", pl.Int64),
    "deviceId": ("device", pl.Int64),
    "address": ("addr", pl.Int64),
    "bytes": ("bytes", pl.Int64),
    "memKind": ("mem_kind", pl.Int64),
    "memoryOperationType": ("mem_op", pl.Int64),
    "correlationId": ("correlation", pl.Int64),
}
# ENUM_CUDA_MEM_KIND / ENUM_CUDA_DEV_MEM_EVENT_OPER ids (nsys 2023-2026)
MEM_KIND_DEVICE, MEM_KIND_DEVICE_STATIC = 2, 5
MEM_OP_ALLOC, MEM_OP_FREE = 0, 1

# logical table -> (nsys table, column map)
TABLES = {
    "kernels": (KERNEL, KERNEL_COLUMNS),
    "runtime": (RUNTIME, RUNTIME_COLUMNS),
    "memcpy": (MEMCPY, MEMCPY_COLUMNS),
    "memset": (MEMSET, MEMSET_COLUMNS),
    "osrt": (OSRT, OSRT_COLUMNS),
    "memory_usage": (MEMORY_USAGE, MEMORY_USAGE_COLUMNS),
}


def pid_of(gtid: pl.Expr) -> pl.Expr:
    """The plain pid inside a globalTid or globalPid."""
    return (gtid // ID_BITS) % ID_BITS


def tid_of(gtid: pl.Expr) -> pl.Expr:
    """The plain tid inside a globalTid."""
    return gtid % ID_BITS
