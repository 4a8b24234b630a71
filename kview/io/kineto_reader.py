"""torch.profiler (Kineto) Chrome-trace JSON -> the same normalized frames as an nsys export.

Kernels, memcpy/memset, runtime and driver calls keep their CUPTI correlation ids; user
`record_function` ranges become NVTX push/pop ranges on their real threads, and CPU ops become
ranges in the text nsys writes for `--pytorch=autograd-shapes-nvtx`
(`aten::linear, seq = N, op_id = K, sizes = [[...]]`), so one attribution serves both. The
module calls a `with_modules=True` / `with_stack=True` trace records (`python_function` events
`nn.Module: Linear_3`) become ranges of the NVTX domain `nn.Module`: layer ranges, so Layer names
the modules of a torch.profiler trace without NVTX.

Every era of the format is read: PyTorch <= 1.9 (`Kernel`, `Runtime`, `Memcpy`, `Memset`,
`Operator` categories, string thread ids, integer microseconds, even the legacy bare JSON
array of events), and current traces from NVIDIA, AMD (HIP calls under `cuda_runtime`) and
CPU-only runs. Timestamps are microseconds with up to three decimals; `ts` and `dur` are
converted from their decimal text to integer nanoseconds exactly (a float of epoch
microseconds is off by up to a few hundred ns), and end = start + duration.
"""

from __future__ import annotations

import codecs
import gzip
import json
import math
import os
import re
import threading
import zlib
from pathlib import Path

import polars as pl

from kview.errors import TraceError
from kview.io import cache, memory_budget
from kview.io.schema import KERNEL as KERNEL_TABLE
from kview.io.schema import KINETO_MEMORY, MEMCPY_KIND_LABELS, NVTX_DOMAIN_CREATE, NVTX_PUSHPOP, global_pid, global_tid
from kview.io.schema import MEMCPY as MEMCPY_TABLE
from kview.io.schema import MEMSET as MEMSET_TABLE
from kview.io.schema import NVTX as NVTX_TABLE
from kview.io.schema import RUNTIME as RUNTIME_TABLE

MEMCPY_KINDS = {
    "HtoD": 1,
    "DtoH": 2,
    "HtoA": 3,
    "AtoH": 4,
    "AtoA": 5,
    "AtoD": 6,
    "DtoA": 7,
    "DtoD": 8,
    "HtoH": 9,
    "PtoP": 10,
}


MAX_DEFLATE_RATIO = 1032  # deflate never inflates more than this: smaller files need no counting
_WS = re.compile(r"[\s,]*")
HEADER_KEYS = (
    "schemaVersion",
    "deviceProperties",
    "record_shapes",
    "cuda_runtime_version",
    "cuda_driver_version",
    "distributedInfo",
    "baseTimeNanoseconds",
)
# Floats stay as their decimal text, so timestamps convert to nanoseconds exactly.
_DECODER = json.JSONDecoder(parse_float=str)


def _inflates_within(f, limit: int) -> bool:
    """Whether the gzip stream `f` (every member) inflates to at most `limit` bytes, counted in
    constant memory: a bomb is refused without ever holding what it inflates to."""
    d = zlib.decompressobj(31)
    total, pending = 0, b""
    while True:
        if not pending:
            pending = f.read(1 << 16)
            if not pending:
                return True
        try:
            total += len(d.decompress(pending, 1 << 18))
        except zlib.error:  # damage (or zero padding): the real inflation reports what it is
            return True
        if total > limit:
            return False
        pending = d.unconsumed_tail
        if d.eof:  # the next member, if any
            pending = d.unused_data
            d = zlib.decompressobj(31)


def decoded(raw: bytes) -> str:
    """JSON text as RFC 8259 allows it to arrive: UTF-8 (a byte-order mark skipped) or UTF-16
    (with a byte-order mark, or without one: a NUL beside the first character)."""
    if raw.startswith(codecs.BOM_UTF8):
        return raw[len(codecs.BOM_UTF8) :].decode("utf-8")
    if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return raw.decode("utf-16")
    if raw[:1] == b"\x00":
        return raw.decode("utf-16-be")
    if raw[1:2] == b"\x00":
        return raw.decode("utf-16-le")
    return raw.decode("utf-8")


def looks_like_json(head: bytes) -> bool:
    """Whether the first bytes of a file start a JSON document, in UTF-8 or UTF-16."""
    for bom in (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        head = head.removeprefix(bom)
    if b"\x00" in head[:2]:
        head = head.replace(b"\x00", b"")
    return head.lstrip()[:1] in (b"{", b"[")


def _text(path: Path) -> str:
    """The JSON text, inflated if gzip'd, within the memory budget (see memory_budget)."""
    limit, why = memory_budget.json_text_limit()
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            size = os.fstat(f.fileno()).st_size
            if gz and size >= 18:  # the trailer's length (mod 2**32) of the last member: a lower bound
                f.seek(size - 4)
                if limit is not None and int.from_bytes(f.read(4), "little") > limit:
                    raise TraceError(path, memory_budget.too_large(limit, why))
            f.seek(0)
            if not gz:
                if limit is not None and size > limit:
                    raise TraceError(path, memory_budget.too_large(limit, why))
                return decoded(f.read())
            if limit is not None and size * MAX_DEFLATE_RATIO > limit and not _inflates_within(f, limit):
                raise TraceError(path, memory_budget.too_large(limit, why))
            f.seek(0)
            raw = f.read()
        return decoded(gzip.decompress(raw))
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(path, f"cannot be read as trace JSON ({type(e).__name__}: {str(e)[:80]})") from None


# JSON files that are not torch.profiler traces but are often mistaken for one: what they are.
OTHER_JSON = (
    (re.compile(r'"rocprofiler-sdk-tool"\s*:'), "is a rocprofv3 trace (rocprofiler-sdk JSON): not supported yet"),
    (
        re.compile(r'"nodes"\s*:\s*\['),
        "is a PyTorch execution trace (ExecutionTraceObserver): it holds no timings; "
        "open the torch.profiler trace of the same run",
    ),
    (re.compile(r'"displayTimeUnit"|"systemTraceEvents"'), None),  # Chrome traces: judged by traceEvents below
)


def events_start(path: Path, text: str) -> tuple[int, bool]:
    """Where the events list of a Chrome trace starts, and whether it is the legacy bare array
    (`[{...}, ...]`, whose closing bracket the format makes optional). Raises TraceError naming
    what the file is otherwise. Cheap: looks at structure only, never decodes the events."""
    body = text.lstrip()
    lead = len(text) - len(body)
    if body[:1] == "[":
        return lead + 1, True
    if body[:1] != "{":
        raise TraceError(path, "is not a torch.profiler trace (neither a JSON object nor a list of events)")
    m = re.compile(r'"traceEvents"\s*:\s*').search(text)
    if not m:
        head = text[: 1 << 16]
        for rx, what in OTHER_JSON:
            if what and rx.search(head):
                raise TraceError(path, what)
        raise TraceError(path, "is JSON but not a torch.profiler trace (no traceEvents list)")
    if text[m.end() : m.end() + 1] != "[":
        raise TraceError(path, "is not valid trace JSON (traceEvents is not a list)")
    if text.rstrip()[-1:] != "}":
        raise TraceError(path, "is truncated trace JSON (it does not end with a closing brace)")
    return m.end() + 1, False


def load_json(path: Path) -> dict:
    """Header keys of a Chrome trace plus an iterator over its events, decoded one at a time.

    The events array is walked with the C decoder object by object, so memory holds the text
    and the columns being built, never the whole tree of Python objects for every event.
    """
    text = _text(path)
    return _doc(path, text, *events_start(path, text))


def _doc(path: Path, text: str, at: int, bare: bool) -> dict:
    """load_json's document over text already read and checked (events_start)."""
    doc: dict = {}
    if not bare:
        for key in HEADER_KEYS:
            m = re.search(rf'"{re.escape(key)}"\s*:\s*', text)
            if m:
                try:
                    doc[key] = _DECODER.raw_decode(text, m.end())[0]
                except (ValueError, RecursionError):  # a header kview cannot read is one it does without
                    pass
    doc["traceEvents"] = _events(path, text, at, bare)
    return doc


def _depth() -> int:
    import sys

    return sys.getrecursionlimit()


def _events(path: Path, text: str, i: int, bare: bool):
    n = len(text)
    while True:
        i = _WS.match(text, i).end()  # type: ignore[union-attr]  # [\s,]* matches everywhere
        if i >= n:
            if bare:  # the Trace Event Format lets a bare array end without its bracket
                return
            raise TraceError(path, "is truncated trace JSON (the events list never ends)")
        if text[i] == "]":
            return
        try:
            obj, i = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise TraceError(path, f"is not valid trace JSON ({e.msg} at character {e.pos})") from None
        except RecursionError:  # the C decoder stops at the interpreter's depth limit: linear, bounded
            raise TraceError(
                path, f"is not a torch.profiler trace (an event nests deeper than {_depth()} levels)"
            ) from None
        except ValueError as e:  # an integer of more than Python's 4300 digits
            raise TraceError(path, f"is not a torch.profiler trace ({str(e)[:80]})") from None
        yield obj


def ns_from_us_text(c: pl.Expr) -> pl.Expr:
    """Decimal text of microseconds ("1623142623531625", "4203669603771.648") -> integer ns,
    exactly: whole and fractional digits are read as integers (a fourth decimal rounds half
    up). Exponent forms, which Kineto never writes, go through a float."""
    body = c.str.strip_chars().str.strip_prefix("-")
    whole = body.str.extract(r"^(\d+)", 1).cast(pl.Int64).fill_null(0)
    frac = body.str.extract(r"^\d*\.(\d+)$", 1).fill_null("")
    ns = whole * 1000 + (frac + "000").str.slice(0, 3).cast(pl.Int64) + (frac.str.slice(3, 1) >= "5").cast(pl.Int64)
    ns = pl.when(c.str.strip_chars().str.starts_with("-")).then(-ns).otherwise(ns)
    sci = c.str.contains("[eE]")
    return (
        pl.when(c.is_null())
        .then(None)
        .when(sci)
        .then((c.cast(pl.Float64, strict=False) * 1000.0).round(0).cast(pl.Int64))
        .otherwise(ns)
    )


ID_DIGITS = 19  # the most digits of an id kview keeps (a 64-bit integer)


def _int(v) -> int | None:
    """An id as Kineto writes it: 7, "7" (older traces quote thread ids) or "stream 7"; None for
    anything else, an id over 64 bits included. Linear in the text (no regex that could rescan
    a long run of digits from each of its positions)."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, str):
        head = v.rstrip("0123456789")
        digits = len(v) - len(head)
        if not digits or digits > ID_DIGITS:
            return None
        n = int(v[len(head) :])
        n = -n if head.endswith("-") else n
        return n if -(1 << 63) <= n < (1 << 63) else None
    return None


SIZES_DEPTH = 8  # input dims nest two or three levels (a list of tensors' shapes, lists of those)


def _sizes(dims, depth: int = 0) -> str:
    """[[4, 256, 768], [768, 768], []]: nested lists as PyTorch prints them, scalars as []
    (deeper than SIZES_DEPTH: `[...]`)."""
    if isinstance(dims, list):
        if depth >= SIZES_DEPTH:
            return "[...]"
        return "[" + ", ".join(_sizes(x, depth + 1) for x in dims) + "]"
    if isinstance(dims, int) and not isinstance(dims, bool):
        return str(dims)
    if isinstance(dims, float) and math.isfinite(dims):
        return str(int(dims))
    return "[]"


def op_text(e: dict) -> str:
    """The emit_nvtx form of a CPU op: `name, seq = N, op_id = K, sizes = [[...], ...]`."""
    a = e.get("args") or {}
    parts = [str(e.get("name", ""))]
    seq, ext = _int(a.get("Sequence number")), _int(a.get("External id"))
    if seq is not None and seq >= 0:
        parts.append(f"seq = {seq}")
    if ext is not None:
        parts.append(f"op_id = {ext}")
    dims = a.get("Input Dims", a.get("Input dims"))  # "Input dims" before PyTorch 1.9
    if dims is not None:
        parts.append(f"sizes = {_sizes(dims)}")
    return ", ".join(parts)


# Event categories of every Kineto era, lower-cased: PyTorch <= 1.9 wrote `Kernel`, `Runtime`,
# `Memcpy`, `Memset` and `Operator` (record_function ranges included); later versions
# `kernel`, `cuda_runtime`, `cuda_driver`, `gpu_memcpy`, `gpu_memset`, `cpu_op`, `user_annotation`.
KERNEL, RUNTIME, DRIVER, MEMCPY, MEMSET, CPU_OP, USER = "kernel", "runtime", "driver", "memcpy", "memset", "op", "user"
CATEGORIES = {
    "kernel": KERNEL,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "cuda_driver": DRIVER,
    "driver": DRIVER,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "user_annotation": USER,
}
# Complete events kview does not read, counted so a view can say what else the trace holds.
# (python_function events are read only where they are module calls, MODULE_PREFIX.)
NOT_READ_SILENTLY = {"trace", "python_function", "gpu_user_annotation", "overhead", "cpu_instant_event"}
# torch.profiler(with_modules=True or with_stack=True) names each nn.Module call's event so;
# kview files them as NVTX ranges of domain MODULE_DOMAIN (label `nn.Module:Linear_3`).
MODULE_PREFIX = "nn.Module: "
MODULE_DOMAIN, MODULE_DOMAIN_ID = "nn.Module", 1


# bytes per element of the dtypes c10d names in a collective's arguments
DTYPE_BYTES = {
    "Float": 4,
    "Double": 8,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Long": 8,
    "Short": 2,
    "Char": 1,
    "Byte": 1,
    "Bool": 1,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
}


def _collective_bytes(a: dict) -> int | None:
    """The buffer size of a collective kernel (PyTorch >= 2.1 writes its c10d arguments on it):
    the larger of its input and output element counts times the element size, as nccl-tests
    reports a collective's size (an AllGather's output, a ReduceScatter's input)."""
    size = DTYPE_BYTES.get(str(a.get("dtype")))
    counts = [n for n in (_int(a.get("In msg nelems")), _int(a.get("Out msg nelems"))) if n is not None]
    return max(counts) * size if size and counts else None


def _is_legacy_user_range(name: str, a: dict) -> bool:
    """PyTorch <= 1.9 filed record_function ranges (ProfilerStep#5, user labels) as `Operator`:
    they are the ones without a namespace, autograd sequence number or input tensors."""
    return (
        "::" not in name
        and a.get("Sequence number") is None
        and not any(a.get("Input Dims", a.get("Input dims")) or [])
    )


class KinetoFrames:
    """All frames of one Kineto trace, built in one pass over its events."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        ev = doc["traceEvents"]
        kern, rt, cpy, mset, ranges, mem = [], [], [], [], [], []
        procs = {}
        unread: dict[str, int] = {}
        for e in ev:
            if not isinstance(e, dict):
                continue
            ph = e.get("ph")
            if ph == "M":
                pid = _int(e.get("pid"))
                if e.get("name") == "process_name" and pid is not None:
                    procs[pid] = str((e.get("args") or {}).get("name", ""))
                continue
            if ph == "i" and e.get("name") == KINETO_MEMORY and "ts" in e:
                # profile_memory=True: one instant per allocation (+) or free (-) of a device's allocator
                a = e.get("args") or {}
                if not isinstance(a, dict):
                    a = {}
                mem.append(
                    (
                        e["ts"],
                        None,
                        _int(e.get("pid")),
                        _int(e.get("tid")),
                        _int(a.get("Device Type")),
                        _int(a.get("Device Id")),
                        _int(a.get("Bytes")),
                        _int(a.get("Total Allocated")),
                        _int(a.get("Total Reserved")),
                        _int(a.get("Addr")),
                    )
                )
                continue
            if ph != "X" or "ts" not in e:
                continue
            raw_cat = str(e.get("cat", ""))
            cat = CATEGORIES.get(raw_cat.lower())
            a = e.get("args") or {}
            if not isinstance(a, dict):
                a = {}
            ts, dur = e["ts"], e.get("dur", 0)
            name = str(e.get("name", ""))
            if cat == KERNEL:
                grid, block = a.get("grid") or [None] * 3, a.get("block") or [None] * 3
                kern.append(
                    (
                        ts,
                        dur,
                        _int(a.get("device", e.get("pid"))),
                        _int(a.get("context")),
                        _int(a.get("stream", e.get("tid"))),
                        _int(a.get("correlation")),
                        name,
                        *[_int(g) for g in grid[:3]],
                        *[_int(b) for b in block[:3]],
                        _int(a.get("registers per thread")),
                        _int(a.get("shared memory")),
                        _collective_bytes(a) if "Collective name" in a else None,
                    )
                )
            elif cat in (RUNTIME, DRIVER):
                rt.append(
                    (
                        ts,
                        dur,
                        1 if cat == DRIVER else 0,
                        _int(e.get("pid")),
                        _int(e.get("tid")),
                        _int(a.get("correlation")),
                        name,
                    )
                )
            elif cat == MEMCPY:
                kind = next((v for k, v in MEMCPY_KINDS.items() if f" {k} " in f" {name} "), 0)
                cpy.append(
                    (
                        ts,
                        dur,
                        _int(a.get("device", e.get("pid"))),
                        _int(a.get("stream", e.get("tid"))),
                        _int(a.get("correlation")),
                        _int(a.get("bytes")),
                        kind,
                    )
                )
            elif cat == MEMSET:
                mset.append(
                    (
                        ts,
                        dur,
                        _int(a.get("device", e.get("pid"))),
                        _int(a.get("stream", e.get("tid"))),
                        _int(a.get("correlation")),
                        _int(a.get("bytes")),
                    )
                )
            elif cat in (USER, CPU_OP) and _int(e.get("tid")) is not None:
                user = cat == USER or (raw_cat == "Operator" and _is_legacy_user_range(name, a))
                ranges.append((ts, dur, _int(e.get("pid")), _int(e.get("tid")), name if user else op_text(e), 0))
            elif (
                raw_cat.lower() == "python_function"
                and name.startswith(MODULE_PREFIX)
                and _int(e.get("tid")) is not None
            ):
                # with_modules / with_stack traces: each nn.Module call, a layer range as
                # `kview capture --annotate` writes one (named `Linear_3`, as the profiler does),
                # in its own NVTX domain: layers, never phases
                ranges.append(
                    (ts, dur, _int(e.get("pid")), _int(e.get("tid")), name[len(MODULE_PREFIX) :], MODULE_DOMAIN_ID)
                )
            elif raw_cat.lower() not in NOT_READ_SILENTLY:
                unread[raw_cat] = unread.get(raw_cat, 0) + 1
        self.unread = unread
        i64 = pl.Int64
        self.runtime_raw = _timed(
            rt, {"event_class": i64, "pid": i64, "tid": i64, "correlation": i64, "name": pl.String}
        )
        names = pl.concat(
            [
                pl.DataFrame({"value": [k[6] for k in kern]}, schema={"value": pl.String}),
                self.runtime_raw.select(pl.col("name").alias("value")),
            ]
        ).unique(maintain_order=True)
        self.strings = names.with_row_index("id", offset=1).with_columns(pl.col("id").cast(pl.Int64))
        sid = self.strings.rename({"value": "name", "id": "name_id"})
        # The launching process of each correlation id: GPU events carry the device as pid.
        launch_pid = self.runtime_raw.group_by("correlation").agg(pl.col("pid").first())

        def with_pid(df):
            return (
                df.join(launch_pid, on="correlation", how="left")
                # no launch found: no process (null), not process 0 (a rank of its own)
                .with_columns(
                    pl.when(pl.col("pid").is_not_null()).then(global_tid(pl.col("pid"), pl.lit(0))).alias("global_pid")
                )
                .drop("pid")
            )

        k = _timed(
            kern,
            {
                "device": i64,
                "context": i64,
                "stream": i64,
                "correlation": i64,
                "name": pl.String,
                "grid_x": i64,
                "grid_y": i64,
                "grid_z": i64,
                "block_x": i64,
                "block_y": i64,
                "block_z": i64,
                "registers": i64,
                "smem": i64,
                "coll_bytes": i64,
            },
        )
        k = (
            with_pid(k)
            .join(sid, on="name", how="left")
            .with_columns(
                pl.col("name_id").alias("short_name_id"),
                pl.col("smem").alias("static_smem"),
                pl.lit(0, dtype=i64).alias("dynamic_smem"),
                pl.lit(None, dtype=i64).alias("graph_node"),
            )
        )
        self.kernels = k.drop("name", "smem")
        self.runtime = self.runtime_raw.join(sid, on="name", how="left").select(
            "start",
            "end",
            global_tid(pl.col("pid"), pl.col("tid")).alias("global_tid"),
            "correlation",
            "name_id",
            "event_class",
        )
        self.memcpy = with_pid(
            _timed(cpy, {"device": i64, "stream": i64, "correlation": i64, "bytes": i64, "copy_kind": i64})
        ).with_columns(pl.lit(None, dtype=i64).alias("src_kind"), pl.lit(None, dtype=i64).alias("dst_kind"))
        self.memset = with_pid(
            _timed(mset, {"device": i64, "stream": i64, "correlation": i64, "bytes": i64})
        ).with_columns(pl.lit(None, dtype=i64).alias("mem_kind"))
        m = _timed(
            mem,
            {
                "pid": i64,
                "tid": i64,
                "device_type": i64,
                "device": i64,
                "bytes": i64,
                "total_allocated": i64,
                "total_reserved": i64,
                "addr": i64,
            },
        )
        # in the file's order (Kineto writes them as the allocator reported them)
        self.memory_events = m.select(
            "start",
            global_tid(pl.col("pid"), pl.col("tid")).alias("global_tid"),
            pl.exclude("start", "end", "pid", "tid"),
        )
        r = _timed(ranges, {"pid": i64, "tid": i64, "text": pl.String, "domain_id": i64})
        # Chrome traces list events in no particular order: order ranges by thread and start,
        # outer before inner, as a push/pop stack would have emitted them.
        r = r.sort(["pid", "tid", "start", "end"], descending=[False, False, False, True])
        # The module domain's name, registered once per process that has module ranges (an
        # NVTX domain is per process), before its first range, as nvtxDomainCreate would be.
        doms = (
            r.filter(pl.col("domain_id") == MODULE_DOMAIN_ID)
            .group_by("pid", maintain_order=True)
            .agg(pl.col("start").min(), pl.col("tid").first())
            .select(
                "start",
                pl.col("start").alias("end"),
                "pid",
                "tid",
                pl.lit(MODULE_DOMAIN).alias("text"),
                pl.lit(MODULE_DOMAIN_ID, dtype=i64).alias("domain_id"),
                pl.lit(NVTX_DOMAIN_CREATE, dtype=i64).alias("event_type"),
            )
        )
        r = pl.concat([doms, r.with_columns(pl.lit(NVTX_PUSHPOP, dtype=i64).alias("event_type"))], how="diagonal")
        self.nvtx_events = r.with_row_index("id", offset=1).select(
            pl.col("id").cast(i64),
            "start",
            pl.when(pl.col("event_type") == NVTX_DOMAIN_CREATE).then(None).otherwise(pl.col("end")).alias("end"),
            "event_type",
            pl.col("text").cast(pl.Categorical(pl.Categories.random())),  # its own, freed with the trace
            pl.lit(None, dtype=i64).alias("text_id"),
            global_tid(pl.col("pid"), pl.col("tid")).alias("global_tid"),
            pl.lit(None, dtype=i64).alias("end_global_tid"),
            "domain_id",
        )
        # Processes that ran host code: GPU devices get a process_name row too (device 0 is pid 0)
        host = set(self.runtime_raw["pid"].drop_nulls().to_list()) | set(r["pid"].drop_nulls().to_list())
        procs = {p: n for p, n in procs.items() if p in host}
        self.processes = pl.DataFrame(
            {
                "global_pid": [global_pid(p) for p in procs],
                "pid": list(procs),
                "name": list(procs.values()),
            },
            schema={"global_pid": i64, "pid": i64, "name": pl.String},
        )
        props = doc.get("deviceProperties") or []
        self.devices = pl.DataFrame(
            [
                {
                    "id": d.get("id"),
                    "name": d.get("name"),
                    "totalMemory": d.get("totalGlobalMem"),
                    "smCount": d.get("numSms"),
                    "computeMajor": d.get("computeMajor"),
                    "computeMinor": d.get("computeMinor"),
                }
                for d in props
                if isinstance(d, dict)
            ],
            schema={
                "id": i64,
                "name": pl.String,
                "totalMemory": i64,
                "smCount": i64,
                "computeMajor": i64,
                "computeMinor": i64,
            },
            strict=False,
        )
        self.metadata = {
            "EXPORT_PRODUCT_NAME": "torch.profiler (Kineto)",
            "KINETO_SCHEMA_VERSION": str(doc.get("schemaVersion", "")),
            "CUDA_RUNTIME_VERSION": str(doc.get("cuda_runtime_version", "")),
            "RECORD_SHAPES": str(doc.get("record_shapes", "")),
        }
        base = _int(doc.get("baseTimeNanoseconds"))
        if base is not None:  # the clock the timestamps read (kept by kview capture's traces too)
            self.metadata["KINETO_BASE_TIME_NS"] = str(base)
        dist = doc.get("distributedInfo")
        if isinstance(dist, dict):  # which rank of how many wrote this trace
            for key, name in (("rank", "DIST_RANK"), ("world_size", "DIST_WORLD_SIZE"), ("backend", "DIST_BACKEND")):
                if dist.get(key) is not None:
                    self.metadata[name] = str(dist[key])
        if unread:  # e.g. MTIA device events: the trace holds them, kview does not read them
            self.metadata["KINETO_EVENTS_NOT_READ"] = ", ".join(
                f"{c} ({n:,})" for c, n in sorted(unread.items(), key=lambda kv: -kv[1])
            )


# torch.profiler timestamps past this many ns are readings of the system clock (UTC), as older
# profilers wrote them (2001 onwards); smaller ones are of a monotonic clock since boot
UTC_AFTER_NS = 10**18


def profiler_clock(base: str | None, origin: int) -> tuple[str, int]:
    """The clock of torch.profiler timestamps (time zero `origin`). Processes of one host stamp
    from one clock and write the same `baseTimeNanoseconds` (the UTC of its zero, which Kineto
    rounds to the second, too coarse to line hosts up by); without it, timestamps in the UTC
    range are UTC."""
    if base:
        return f"torch.profiler clock (base {base} ns)", origin
    if origin >= UTC_AFTER_NS:
        return "UTC", origin
    return "torch.profiler clock", origin


def _timed(rows: list[tuple], schema: dict) -> pl.DataFrame:
    """Rows (ts, dur, *columns) -> a frame with integer-ns start/end and the other columns."""
    raw = pl.DataFrame(rows, schema={"ts": pl.String, "dur": pl.String, **schema}, orient="row", strict=False)
    start = ns_from_us_text(pl.col("ts"))
    return raw.select(start.alias("start"), (start + ns_from_us_text(pl.col("dur")).fill_null(0)).alias("end"), *schema)


def read(path: str | Path) -> KinetoFrames:
    p = Path(path)
    return KinetoFrames(p, load_json(p))


# the frames a decode makes, cached together: a reopen skips the JSON entirely
FRAME_KEYS = (
    "kernels",
    "runtime",
    "memcpy",
    "memset",
    "nvtx_events",
    "memory_events",
    "strings",
    "processes",
    "devices",
    "_meta",
)
HAS = {KERNEL_TABLE: "kernels", RUNTIME_TABLE: "runtime", MEMCPY_TABLE: "memcpy", MEMSET_TABLE: "memset"}
HAS.update({NVTX_TABLE: "nvtx_events", "StringIds": "strings", KINETO_MEMORY: "memory_events"})


class KinetoSource:
    """A torch.profiler (Kineto) Chrome trace, `.json` or `.json.gz`, in kview's schema.

    Opening it reads (and inflates) the text once and checks its structure, unless the frame
    cache holds this trace's frames already; the events are decoded, in one pass, when a frame
    is first asked for, and the frames cached together."""

    persist_frames = False  # cached whole, as one decode

    def __init__(self, path: Path, use_cache: bool = True):
        self.path = path
        self.use_cache = use_cache
        found = cache.load_all(path, [f"json.{k}" for k in FRAME_KEYS]) if use_cache else None
        self._frames = None if found is None else {k: found[f"json.{k}"] for k in FRAME_KEYS}
        self._text: str | None = None
        self._decoding = threading.Lock()  # the explorer's views ask from several threads: one decode
        if self._frames is None:
            self._text = _text(path)
            self._start = events_start(path, self._text)

    @property
    def frames(self) -> dict[str, pl.DataFrame]:
        if self._frames is None:
            with self._decoding:
                if self._frames is None:
                    self._frames = self._decode()
        return self._frames

    def _decode(self) -> dict[str, pl.DataFrame]:
        assert self._text is not None
        text, self._text = self._text, None  # the text is not kept past its decode
        try:
            kf = KinetoFrames(self.path, _doc(self.path, text, *self._start))
        except TraceError:
            raise
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
            IndexError,
            OverflowError,
            pl.exceptions.PolarsError,
        ) as e:  # an event of the wrong shape: the file's damage
            msg = str(e).splitlines()[0][:80] if str(e) else ""
            raise TraceError(
                self.path, f"has an event kview cannot read ({type(e).__name__}{': ' + msg if msg else ''})"
            ) from None
        del text
        frames = {k: getattr(kf, k) for k in FRAME_KEYS if k != "_meta"}
        frames["_meta"] = pl.DataFrame(
            {"name": list(kf.metadata), "value": list(kf.metadata.values())},
            schema={"name": pl.String, "value": pl.String},
        )
        if self.use_cache:
            cache.store_all(self.path, {f"json.{k}": f for k, f in frames.items()})
        return frames

    def has(self, table: str) -> bool:
        key = HAS.get(table)
        return key is not None and self.frames[key].height > 0

    def metadata(self) -> dict[str, str]:
        return dict(self.frames["_meta"].iter_rows())

    def origin(self) -> int:
        """The earliest event: torch.profiler timestamps are clock readings, not offsets."""
        keys = ("kernels", "runtime", "memcpy", "memset", "nvtx_events")
        firsts = [v for k in keys if (v := self.frames[k].select(pl.col("start").min()).item()) is not None]
        return int(min(firsts)) if firsts else 0

    def clock(self) -> tuple[str, int] | None:
        return profiler_clock(self.metadata().get("KINETO_BASE_TIME_NS"), self.origin())

    def read_columns(self, key: str, names: list[str]) -> pl.DataFrame:
        return self.frames[key].select(names)

    def strings(self) -> pl.DataFrame:
        return self.frames["strings"]

    def string_count(self) -> int:
        return self.frames["strings"].height

    def strings_for(self, ids: pl.Series) -> pl.DataFrame:
        return self.frames["strings"].filter(pl.col("id").is_in(ids.implode()))

    def nvtx_events(self) -> pl.DataFrame:
        return self.frames["nvtx_events"]

    def nvtx_max_timestamp(self) -> int | None:
        ev = self.frames["nvtx_events"]
        found = [v for v in ev.select(pl.col("start").max(), pl.col("end").max()).row(0) if v is not None]
        return int(max(found)) if found else None

    def session_ns(self) -> int | None:
        return None  # a torch.profiler trace records no session bounds

    def memcpy_kind_labels(self) -> dict[int, str]:
        return dict(MEMCPY_KIND_LABELS)

    def threads(self) -> pl.DataFrame:
        return pl.DataFrame(schema={"global_tid": pl.Int64, "name_id": pl.Int64})

    def processes(self) -> pl.DataFrame:
        return self.frames["processes"]

    def devices(self) -> pl.DataFrame:
        return self.frames["devices"]

    def close(self) -> None:
        self._text = None
