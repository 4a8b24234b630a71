"""torch.profiler (Kineto) Chrome-trace JSON -> the same normalized frames as an nsys export.

Kernels, memcpy/memset, runtime and driver calls keep their CUPTI correlation ids; user
`record_function` ranges become NVTX push/pop ranges on their real threads, and CPU ops become
ranges in the text nsys writes for `--pytorch=autograd-shapes-nvtx`
(`aten::linear, seq = N, op_id = K, sizes = [[...]]`), so one attribution serves both.
Microsecond timestamps carry three decimals; they are converted to integer nanoseconds by
rounding start and duration separately (end = start + duration), never producing negative
durations.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from pathlib import Path

import polars as pl

from kview.errors import TraceError
from kview.io import memory_budget

VM = 1 << 48  # nsys packs globalTid as VM id << 48 | pid << 24 | tid; kview captures use VM 1

MEMCPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8,
                "HtoH": 9, "PtoP": 10}


def global_tid(pid: pl.Expr, tid: pl.Expr) -> pl.Expr:
    return pl.lit(VM, dtype=pl.Int64) + (pid.cast(pl.Int64) % 0x1000000) * 0x1000000 + (tid.cast(pl.Int64) % 0x1000000)


MAX_DEFLATE_RATIO = 1032  # deflate never inflates more than this: smaller files need no counting
_WS = re.compile(r"[\s,]*")
HEADER_KEYS = ("schemaVersion", "deviceProperties", "record_shapes", "cuda_runtime_version", "cuda_driver_version",
               "distributedInfo", "baseTimeNanoseconds")


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
                return f.read().decode("utf-8")
            if limit is not None and size * MAX_DEFLATE_RATIO > limit and not _inflates_within(f, limit):
                raise TraceError(path, memory_budget.too_large(limit, why))
            f.seek(0)
            raw = f.read()
        return gzip.decompress(raw).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(path, f"cannot be read as trace JSON ({type(e).__name__}: {str(e)[:80]})") from None


def load_json(path: Path) -> dict:
    """Header keys of a Chrome trace plus an iterator over its events, decoded one at a time.

    The events array is walked with the C decoder object by object, so memory holds the text
    and the columns being built, never the whole tree of Python objects for every event.
    """
    text = _text(path)
    head = text.lstrip()[:1]
    if head != "{":
        raise TraceError(path, "is not a torch.profiler trace (not a JSON object)")
    dec = json.JSONDecoder()
    at = text.find('"traceEvents"')
    if at < 0:
        raise TraceError(path, "is JSON but not a torch.profiler trace (no traceEvents list)")
    doc: dict = {}
    for key in HEADER_KEYS:
        m = re.search(r'"%s"\s*:\s*' % re.escape(key), text)
        if m:
            try:
                doc[key] = dec.raw_decode(text, m.end())[0]
            except json.JSONDecodeError:
                pass
    m = re.compile(r'"traceEvents"\s*:\s*\[').match(text, at)
    if not m:
        raise TraceError(path, "is not valid trace JSON (traceEvents is not a list)")
    doc["traceEvents"] = _events(path, text, dec, m.end())
    return doc


def _events(path: Path, text: str, dec: json.JSONDecoder, i: int):
    n = len(text)
    while True:
        i = _WS.match(text, i).end()
        if i >= n:
            raise TraceError(path, "is truncated trace JSON (the events list never ends)")
        if text[i] == "]":
            return
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise TraceError(path, f"is not valid trace JSON ({e.msg} at character {e.pos})") from None
        yield obj


def _ns(us) -> int:
    return int(round(float(us) * 1000.0))


def _sizes(dims) -> str:
    """[[4, 256, 768], [768, 768], []]: nested lists as PyTorch prints them, scalars as []."""
    if isinstance(dims, list):
        return "[" + ", ".join(_sizes(x) for x in dims) + "]"
    if isinstance(dims, (int, float)) and not isinstance(dims, bool):
        return str(int(dims))
    return "[]"


def op_text(e: dict) -> str:
    """The emit_nvtx form of a CPU op: `name, seq = N, op_id = K, sizes = [[...], ...]`."""
    a = e.get("args") or {}
    parts = [e.get("name", "")]
    if a.get("Sequence number") is not None and int(a["Sequence number"]) >= 0:
        parts.append(f"seq = {int(a['Sequence number'])}")
    if a.get("External id") is not None:
        parts.append(f"op_id = {int(a['External id'])}")
    if "Input Dims" in a:
        parts.append(f"sizes = {_sizes(a['Input Dims'])}")
    return ", ".join(parts)


class KinetoFrames:
    """All frames of one Kineto trace, built in one pass over its events."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        ev = doc["traceEvents"]
        kern, rt, cpy, mset, ranges = [], [], [], [], []
        procs = {}
        for e in ev:
            if not isinstance(e, dict):
                continue
            cat = e.get("cat")
            ph = e.get("ph")
            if ph == "M":
                if e.get("name") == "process_name" and isinstance(e.get("pid"), int):
                    procs[e["pid"]] = (e.get("args") or {}).get("name", "")
                continue
            if ph != "X" or "ts" not in e:
                continue
            a = e.get("args") or {}
            start = _ns(e["ts"])
            end = start + _ns(e.get("dur", 0))
            if cat == "kernel":
                grid, block = a.get("grid") or [0, 0, 0], a.get("block") or [0, 0, 0]
                kern.append((start, end, a.get("device", e.get("pid")), a.get("context"), a.get("stream", e.get("tid")),
                             a.get("correlation"), e.get("name", ""), *grid[:3], *block[:3],
                             a.get("registers per thread"), a.get("shared memory")))
            elif cat in ("cuda_runtime", "cuda_driver"):
                rt.append((start, end, 1 if cat == "cuda_driver" else 0, e.get("pid"), e.get("tid"),
                           a.get("correlation"), e.get("name", "")))
            elif cat == "gpu_memcpy":
                name = e.get("name", "")
                kind = next((v for k, v in MEMCPY_KINDS.items() if f" {k} " in f" {name} "), 0)
                cpy.append((start, end, a.get("device", e.get("pid")), a.get("stream", e.get("tid")),
                            a.get("correlation"), a.get("bytes"), kind))
            elif cat == "gpu_memset":
                mset.append((start, end, a.get("device", e.get("pid")), a.get("stream", e.get("tid")),
                             a.get("correlation"), a.get("bytes")))
            elif cat == "user_annotation" and isinstance(e.get("tid"), int):
                ranges.append((start, end, e.get("pid"), e.get("tid"), e.get("name", "")))
            elif cat == "cpu_op" and isinstance(e.get("tid"), int):
                ranges.append((start, end, e.get("pid"), e.get("tid"), op_text(e)))
        i64 = pl.Int64
        self.runtime_raw = pl.DataFrame(rt, schema={"start": i64, "end": i64, "event_class": i64, "pid": i64,
                                                    "tid": i64, "correlation": i64, "name": pl.String}, orient="row")
        names = pl.concat([pl.DataFrame({"value": [k[6] for k in kern]}, schema={"value": pl.String}),
                           self.runtime_raw.select(pl.col("name").alias("value"))]).unique(maintain_order=True)
        self.strings = names.with_row_index("id", offset=1).with_columns(pl.col("id").cast(pl.Int64))
        sid = self.strings.rename({"value": "name", "id": "name_id"})
        # The launching process of each correlation id: GPU events carry the device as pid.
        launch_pid = self.runtime_raw.group_by("correlation").agg(pl.col("pid").first())
        def with_pid(df):
            return (df.join(launch_pid, on="correlation", how="left")
                    .with_columns(global_tid(pl.col("pid").fill_null(0), pl.lit(0)).alias("global_pid")).drop("pid"))
        k = pl.DataFrame(kern, orient="row", schema={
            "start": i64, "end": i64, "device": i64, "context": i64, "stream": i64, "correlation": i64,
            "name": pl.String, "grid_x": i64, "grid_y": i64, "grid_z": i64, "block_x": i64, "block_y": i64,
            "block_z": i64, "registers": i64, "smem": i64})
        k = with_pid(k).join(sid, on="name", how="left").with_columns(
            pl.col("name_id").alias("short_name_id"), pl.col("smem").alias("static_smem"),
            pl.lit(0, dtype=i64).alias("dynamic_smem"), pl.lit(None, dtype=i64).alias("graph_node"))
        self.kernels = k.drop("name", "smem")
        self.runtime = self.runtime_raw.join(sid, on="name", how="left").select(
            "start", "end", global_tid(pl.col("pid"), pl.col("tid")).alias("global_tid"), "correlation",
            "name_id", "event_class")
        self.memcpy = with_pid(pl.DataFrame(cpy, orient="row", schema={
            "start": i64, "end": i64, "device": i64, "stream": i64, "correlation": i64, "bytes": i64,
            "copy_kind": i64})).with_columns(pl.lit(None, dtype=i64).alias("src_kind"),
                                             pl.lit(None, dtype=i64).alias("dst_kind"))
        self.memset = with_pid(pl.DataFrame(mset, orient="row", schema={
            "start": i64, "end": i64, "device": i64, "stream": i64, "correlation": i64, "bytes": i64})
        ).with_columns(pl.lit(None, dtype=i64).alias("mem_kind"))
        r = pl.DataFrame(ranges, orient="row", schema={"start": i64, "end": i64, "pid": i64, "tid": i64,
                                                       "text": pl.String})
        # Chrome traces list events in no particular order: order ranges by thread and start,
        # outer before inner, as a push/pop stack would have emitted them.
        r = r.sort(["pid", "tid", "start", "end"], descending=[False, False, False, True])
        self.nvtx_events = r.with_row_index("id", offset=1).select(
            pl.col("id").cast(i64), "start", "end", pl.lit(59, dtype=i64).alias("event_type"),
            pl.col("text").cast(pl.Categorical), pl.lit(None, dtype=i64).alias("text_id"),
            global_tid(pl.col("pid"), pl.col("tid")).alias("global_tid"),
            pl.lit(None, dtype=i64).alias("end_global_tid"), pl.lit(0, dtype=i64).alias("domain_id"))
        self.processes = pl.DataFrame(
            {"global_pid": [VM + (p % 0x1000000) * 0x1000000 for p in procs], "pid": list(procs),
             "name": list(procs.values())}, schema={"global_pid": i64, "pid": i64, "name": pl.String})
        props = doc.get("deviceProperties") or []
        self.devices = pl.DataFrame(
            [{"id": d.get("id"), "name": d.get("name"), "totalMemory": d.get("totalGlobalMem"),
              "smCount": d.get("numSms"), "computeMajor": d.get("computeMajor"),
              "computeMinor": d.get("computeMinor")} for d in props if isinstance(d, dict)],
            schema={"id": i64, "name": pl.String, "totalMemory": i64, "smCount": i64, "computeMajor": i64,
                    "computeMinor": i64})
        self.metadata = {"EXPORT_PRODUCT_NAME": "torch.profiler (Kineto)",
                         "KINETO_SCHEMA_VERSION": str(doc.get("schemaVersion", "")),
                         "CUDA_RUNTIME_VERSION": str(doc.get("cuda_runtime_version", "")),
                         "RECORD_SHAPES": str(doc.get("record_shapes", ""))}


def read(path: str | Path) -> KinetoFrames:
    p = Path(path)
    return KinetoFrames(p, load_json(p))
