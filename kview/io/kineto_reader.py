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
import functools
import gc
import gzip
import itertools
import json
import math
import os
import re
import threading
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

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


def _inflated(path: Path) -> bytes:
    """The file's bytes, inflated if gzip'd, within the memory budget (see memory_budget)."""
    limit, why = memory_budget.json_text_limit()
    try:
        # unbuffered: a buffered reader's read() after a seek reads in pieces and joins them,
        # twice the CPU of one read into the bytes of the file's size
        with open(path, "rb", buffering=0) as f:
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
                return f.read()
            if limit is not None and size * MAX_DEFLATE_RATIO > limit and not _inflates_within(f, limit):
                raise TraceError(path, memory_budget.too_large(limit, why))
            f.seek(0)
            raw = f.read()
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(path, f"cannot be read as trace JSON ({type(e).__name__}: {str(e)[:80]})") from None


def _json_text(path: Path) -> str | bytes:
    """The JSON text: its bytes where they are plain ASCII (their characters, one byte each, so
    every position is the same; msgspec decodes bytes as they are and a str of 169 MB costs a
    fifth of a second), else the decoded str."""
    raw = _inflated(path)
    if raw.isascii() and raw[:1] != b"\x00" and raw[1:2] != b"\x00":  # not UTF-16 (a NUL beside a character)
        return raw
    try:
        return decoded(raw)
    except UnicodeDecodeError as e:
        raise TraceError(path, f"cannot be read as trace JSON ({type(e).__name__}: {str(e)[:80]})") from None


def _as_str(text: str | bytes) -> str:
    return text.decode("ascii") if isinstance(text, bytes) else text


def _text(path: Path) -> str:
    """The JSON text, inflated if gzip'd, within the memory budget (see memory_budget)."""
    return _as_str(_json_text(path))


_KEY_END = re.compile(r"\s*:\s*")
_KEY_END_BYTES = re.compile(rb"\s*:\s*")


def _key_value_at(text: str | bytes, key: str, lo: int = 0, hi: int | None = None) -> int | None:
    """Where the value of the first `"key":` in text[lo:hi] starts (re.search of `"key"\\s*:\\s*`,
    with the literal found by str.find: a regex scans a 169 MB text for an absent key slowly)."""
    if isinstance(text, bytes):
        lit: Any = f'"{key}"'.encode()
        end: Any = _KEY_END_BYTES
    else:
        lit, end = f'"{key}"', _KEY_END
    i = text.find(lit, lo, hi)
    while i >= 0:
        m = end.match(text, i + len(lit))
        if m:
            return m.end()
        i = text.find(lit, i + 1, hi)
    return None


# What a trace writes after its events list (traceName, baseTimeNanoseconds; some exporters
# schemaVersion and deviceProperties too) lies in this many characters at the text's end.
TAIL_CHARS = 1 << 22


def _header_key_at(text: str | bytes, key: str, at: int) -> int | None:
    """Where the value of a header key starts: its first `"key":` before the events list (which
    starts at `at`), else in the text's last TAIL_CHARS. The events are not searched: a key no
    event has would cost a scan of the whole text (0.07 s per 169 MB), a key one has is not
    the header's."""
    start = _key_value_at(text, key, 0, at)
    return start if start is not None else _key_value_at(text, key, max(at, len(text) - TAIL_CHARS))


def _stripped_ends(text: str | bytes) -> tuple[int, str]:
    """How many characters of whitespace lead the text, and its last character that is not
    whitespace ('' if none), as str.strip sees them, without copying the text."""
    window = 1 << 12
    head = _as_str(text[:window])
    body = head.lstrip()
    if not body and len(text) > window:
        head = _as_str(text)
        body = head.lstrip()
    tail = _as_str(text[-window:]).rstrip()
    if not tail and len(text) > window:
        tail = _as_str(text).rstrip()
    return len(head) - len(body), tail[-1:]


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


def events_start(path: Path, text: str | bytes) -> tuple[int, bool]:
    """Where the events list of a Chrome trace starts, and whether it is the legacy bare array
    (`[{...}, ...]`, whose closing bracket the format makes optional). Raises TraceError naming
    what the file is otherwise. Cheap: looks at structure only, never decodes the events."""
    lead, last = _stripped_ends(text)
    first = _as_str(text[lead : lead + 1])
    if first == "[":
        return lead + 1, True
    if first != "{":
        raise TraceError(path, "is not a torch.profiler trace (neither a JSON object nor a list of events)")
    at = _key_value_at(text, "traceEvents")
    if at is None:
        head = _as_str(text[: 1 << 16])
        for rx, what in OTHER_JSON:
            if what and rx.search(head):
                raise TraceError(path, what)
        raise TraceError(path, "is JSON but not a torch.profiler trace (no traceEvents list)")
    if _as_str(text[at : at + 1]) != "[":
        raise TraceError(path, "is not valid trace JSON (traceEvents is not a list)")
    if last != "}":
        raise TraceError(path, "is truncated trace JSON (it does not end with a closing brace)")
    return at + 1, False


def load_json(path: Path) -> dict:
    """Header keys of a Chrome trace plus an iterator over its events, decoded one at a time.

    The events array is walked with the C decoder object by object, so memory holds the text
    and the columns being built, never the whole tree of Python objects for every event.
    """
    text = _json_text(path)
    start = events_start(path, text)
    held = [text]
    del text
    return _doc(path, held, *start)


HEADER_WINDOW = 1 << 16  # characters of a header value decoded at first (doubled until it ends inside)


def _header_value(text: str | bytes, at: int) -> Any:
    """The JSON value at text[at:] (raw_decode's), decoding a window of the text that grows
    until the value ends inside it: a number that ends at the window's edge may go on past it."""
    n = HEADER_WINDOW
    while True:
        part = _as_str(text[at : at + n])
        whole = at + n >= len(text)
        try:
            value, end = _DECODER.raw_decode(part)
        except json.JSONDecodeError:
            if whole:
                raise
        else:
            if whole or end < len(part):
                return value
        n *= 2


def _doc(path: Path, held: list, at: int, bare: bool) -> dict:
    """load_json's document over text already read and checked (events_start), handed over as
    the one item of `held`: the text goes as soon as its events are read (the fast decoder's
    with its last chunk, the standard decoder's bytes once it has them as str), not when the
    frames are built from them."""
    text: str | bytes = held.pop()
    doc: dict = {}
    if not bare:
        for key in HEADER_KEYS:
            start = _header_key_at(text, key, at)
            if start is not None:
                try:
                    doc[key] = _header_value(text, start)
                except (ValueError, RecursionError):  # a header kview cannot read is one it does without
                    pass
    fast = FastEvents.of(path, text, at, bare)
    if fast is None:
        text = _as_str(text)  # (bytes: the only other copy goes)
    doc["traceEvents"] = fast if fast is not None else _events(path, cast(str, text), at, bare)
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
        obj, i = _decode_one(path, text, i)
        yield obj


def _decode_one(path: Path, text: str, i: int):
    """The JSON value at text[i:] and where it ends, or TraceError saying what is wrong."""
    try:
        return _DECODER.raw_decode(text, i)
    except json.JSONDecodeError as e:
        raise TraceError(path, f"is not valid trace JSON ({e.msg} at character {e.pos})") from None
    except RecursionError:  # the C decoder stops at the interpreter's depth limit: linear, bounded
        raise TraceError(
            path, f"is not a torch.profiler trace (an event nests deeper than {_depth()} levels)"
        ) from None
    except ValueError as e:  # an integer of more than Python's 4300 digits
        raise TraceError(path, f"is not a torch.profiler trace ({str(e)[:80]})") from None


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


# Microseconds as Kineto writes them (up to 15 digits, up to three decimals): ns_from_us_text's
# value in fewer string passes.
PLAIN_US = r"^[0-9]{1,15}(?:\.[0-9]{1,3})?$"


def ns_from_plain_us_text(c: pl.Expr) -> pl.Expr:
    """ns_from_us_text of a column of PLAIN_US text (or nulls): read as a decimal of three
    places, whose integer form is the ns (exact: PLAIN_US has no fourth decimal to round)."""
    return c.cast(pl.Decimal(18, 3)).to_physical().cast(pl.Int64)


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


def _collective_bytes(a: Args) -> int | None:
    """The buffer size of a collective kernel (PyTorch >= 2.1 writes its c10d arguments on it):
    the larger of its input and output element counts times the element size, as nccl-tests
    reports a collective's size (an AllGather's output, a ReduceScatter's input)."""
    size = DTYPE_BYTES.get(str(a.dtype))
    counts = [n for n in (_int(a.in_nelems), _int(a.out_nelems)) if n is not None]
    return max(counts) * size if size and counts else None


def _is_legacy_user_range(name: str, a: Args) -> bool:
    """PyTorch <= 1.9 filed record_function ranges (ProfilerStep#5, user labels) as `Operator`:
    they are the ones without a namespace, autograd sequence number or input tensors."""
    return "::" not in name and a.seq is None and not any(_value(_dims(a)) or [])


CHUNK_EVENTS = 1 << 14  # events decoded and sorted into columns at a time: memory holds one chunk's objects
_NONE3 = (None, None, None)
_I64 = (-(1 << 63), 1 << 63)
_INT_TYPES = {int, type(None)}
_TEXT_TYPES = {str, int, float, bool, type(None)}
# how a range's text is made: its name (record_function), the emit_nvtx form of a CPU op
# (`name, seq = N, op_id = K, sizes = [[...], ...]`), the module's name
_NAME, _OP, _MODULE = 0, 1, 2


class _Absent:
    """A key the event does not have (where that differs from a null)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()
# An event's fields the reader uses, as attributes: (attribute, JSON key, value where absent).
EVENT_FIELDS = (
    ("ph", "ph", None),
    ("cat", "cat", ""),
    ("name", "name", ""),
    ("pid", "pid", None),
    ("tid", "tid", None),
    ("ts", "ts", ABSENT),
    ("dur", "dur", 0),
)
ARG_FIELDS = (
    ("device", "device", ABSENT),
    ("context", "context", None),
    ("stream", "stream", ABSENT),
    ("correlation", "correlation", None),
    ("grid", "grid", None),
    ("block", "block", None),
    ("registers", "registers per thread", None),
    ("smem", "shared memory", None),
    ("collective", "Collective name", ABSENT),
    ("dtype", "dtype", None),
    ("in_nelems", "In msg nelems", None),
    ("out_nelems", "Out msg nelems", None),
    ("bytes", "bytes", None),
    ("seq", "Sequence number", None),
    ("ext", "External id", None),
    ("dims", "Input Dims", ABSENT),
    ("dims_old", "Input dims", None),  # before PyTorch 1.9
    ("name", "name", ""),
    ("device_type", "Device Type", None),
    ("device_id", "Device Id", None),
    ("alloc_bytes", "Bytes", None),
    ("total_allocated", "Total Allocated", None),
    ("total_reserved", "Total Reserved", None),
    ("addr", "Addr", None),
)


class Args:
    """An event's args, the fields of ARG_FIELDS, from a decoded dict (assigned one by one: a
    loop over ARG_FIELDS costs more than the rest of the event's reading)."""

    __slots__ = tuple(f[0] for f in ARG_FIELDS)

    def __init__(self, a: dict):
        get = a.get
        self.device = get("device", ABSENT)
        self.context = get("context")
        self.stream = get("stream", ABSENT)
        self.correlation = get("correlation")
        self.grid = get("grid")
        self.block = get("block")
        self.registers = get("registers per thread")
        self.smem = get("shared memory")
        self.collective = get("Collective name", ABSENT)
        self.dtype = get("dtype")
        self.in_nelems = get("In msg nelems")
        self.out_nelems = get("Out msg nelems")
        self.bytes = get("bytes")
        self.seq = get("Sequence number")
        self.ext = get("External id")
        self.dims = get("Input Dims", ABSENT)
        self.dims_old = get("Input dims")
        self.name = get("name", "")
        self.device_type = get("Device Type")
        self.device_id = get("Device Id")
        self.alloc_bytes = get("Bytes")
        self.total_allocated = get("Total Allocated")
        self.total_reserved = get("Total Reserved")
        self.addr = get("Addr")


NO_ARGS = Args({})


class Event:
    """A Complete, Metadata or Instant event, from a decoded dict: the fields of EVENT_FIELDS."""

    __slots__ = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")

    def __init__(self, e: dict):
        get = e.get
        self.ph, self.cat, self.name = get("ph"), get("cat", ""), get("name", "")
        self.pid, self.tid, self.ts, self.dur = get("pid"), get("tid"), get("ts", ABSENT), get("dur", 0)
        a = get("args")
        self.args = Args(a) if type(a) is dict else NO_ARGS  # args of another kind: none


def event(e) -> Event | None:
    """A decoded event as the reader reads it: None for anything but a JSON object."""
    return Event(e) if type(e) is dict else None


def _dims(a) -> Any:
    return a.dims if a.dims is not ABSENT else a.dims_old


def _raw_type() -> type | None:
    """msgspec.Raw, the fast decoder's undecoded JSON (of input dims), where it is installed."""
    fast = _fast_decoder()
    return fast[0].Raw if fast else None


def _value(v: Any) -> Any:
    """v, decoded where it is the fast decoder's undecoded JSON."""
    if type(v) is not _raw_type():
        return v
    try:
        return _DECODER.decode(bytes(cast(Any, v)).decode())
    except RecursionError:
        raise ValueError("an event nests too deep") from None


def _valid_id(v) -> bool:
    """_int(v) is not None, without the call for a plain integer."""
    return _I64[0] <= v < _I64[1] if type(v) is int else _int(v) is not None


def _ints(values: list) -> pl.Series:
    """_int over a column: one of plain integers (and nulls) goes to polars as it is."""
    if set(map(type, values)) <= _INT_TYPES:
        try:
            return pl.Series(values, dtype=pl.Int64)
        except (TypeError, OverflowError):  # an integer over 64 bits: _int reads it as no id
            pass
    return pl.Series([_int(v) for v in values], dtype=pl.Int64)


def _texts(values: list) -> pl.Series:
    """Timestamps and durations as their decimal text (integers as their digits)."""
    try:
        return pl.Series(values, dtype=pl.String)  # all text (or null): no check of each value's type
    except TypeError:
        pass
    odd = set(map(type, values)) - _TEXT_TYPES
    if odd:
        raise TypeError(f"a timestamp or duration of type {next(iter(odd)).__name__}")
    return pl.Series(values, dtype=pl.String, strict=False)


def _strs(values: list) -> pl.Series:
    """str() of each value: names as the reader has always read them."""
    try:
        s = pl.Series(values, dtype=pl.String)  # all text: no check of each value's type
        if not s.null_count():
            return s
    except TypeError:
        pass
    return pl.Series([v if type(v) is str else str(v) for v in values], dtype=pl.String)


def _triples(values: list) -> list[pl.Series]:
    """A kernel's grid or block ([x, y, z]) as three id columns."""
    values = [v or _NONE3 for v in values]
    if not set(map(type, values)) <= {list, tuple}:
        raise TypeError("a kernel's grid or block is not a list")
    if min(map(len, values)) < 3:
        raise ValueError("a kernel's grid or block has fewer than three sizes")
    return [_ints([v[i] for v in values]) for i in range(3)]


def _sizes_texts(dims: list) -> pl.Series:
    """_sizes over a column. Nested lists of integers print as Python prints them (repr, in C),
    which is PyTorch's form, and Kineto writes them so: the fast decoder's JSON text of them is
    that already. Polars checks each is only integers and brackets nested at most SIZES_DEPTH
    deep; the others (scalars, floats, -0, other spacing, deeper lists) go through _sizes."""
    sizes = _sizes_or_split(dims)
    return _split_sizes(sizes) if isinstance(sizes, bytes) else sizes


def _sizes_or_split(dims: list) -> pl.Series | bytes:
    """_sizes_texts(dims), or the joined text whose split (_split_sizes) it is where every one
    is in PyTorch's form already: the split, polars' alone, may be done on another thread."""
    raw_type = _raw_type()
    texts: list[str | None] = []
    slow = []
    types = set(map(type, dims))
    if dims and raw_type is not None and types <= {raw_type, type(None)}:  # the fast decoder's: one join, one split
        parts = (b"null" if d is None else d for d in dims) if type(None) in types else dims
        joined = _RAW_SEP.join(parts)
        nulls = dims.count(None) + dims.count(raw_type(b"null"))  # the ones whose text is `null`
        # every one in PyTorch's form, checked on the joined text at once: only integers,
        # brackets and ", " (the letters left are the nulls'), no -0
        form = (
            joined.translate(None, _SIZES_CHARS) == b"null" * nulls
            and b"-0" not in joined
            and joined.count(b",") == joined.count(b", ") == joined.count(b" ")
        )
        # none nested deeper than SIZES_DEPTH: each pass removes the innermost brackets of all
        nest = joined.translate(None, _NOT_BRACKETS)
        for _ in range(SIZES_DEPTH):
            nest = nest.replace(b"[]", b"")
        if form and not nest:
            return joined
        return _checked_sizes(_split_sizes(joined), dims, form=form, shallow=not nest)
    for i, d in enumerate(dims):
        t = type(d)
        if t is raw_type:
            b = bytes(d)
            texts.append(None if b == b"null" else b.decode())
        elif t is list:
            try:
                texts.append(repr(d))
            except (RecursionError, ValueError):  # nested past the interpreter's depth, an int of 4300+ digits
                texts.append(None)
                slow.append(i)
        else:
            texts.append(None)
            if d is not None:
                slow.append(i)
    return _checked_sizes(pl.Series(texts, dtype=pl.String), dims, slow)


_RAW_SEP = b"\x1f"  # in JSON text neither outside a string nor raw inside one


def _split_sizes(joined: bytes) -> pl.Series:
    """The texts of input dims joined by _RAW_SEP, those of `null` as nulls."""
    s = _split_texts(joined)
    return s.scatter((s == "null").arg_true(), None)


_SIZES_CHARS = b"[]0123456789-, " + _RAW_SEP
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]")))


def _checked_sizes(
    s: pl.Series, dims: list, slow: list[int] | None = None, form: bool = False, shallow: bool = False
) -> pl.Series:
    """Sizes texts s of dims, those not in PyTorch's form (and the `slow` ones) made by _sizes
    (known already: `form`, all are in it; `shallow`, none is nested deeper than SIZES_DEPTH)."""
    slow = slow or []
    # PyTorch's form already (Kineto writes ", " between items): integers and brackets only, no -0
    ok = (
        pl.Series([True] * len(s))
        if form
        else s.str.contains(r"^(?:[\[\]0-9-]|, )*$") & ~s.str.contains(r"(?:^|[\[ ])-0")
    )
    deep = None if shallow else (s.str.count_matches("[", literal=True) > SIZES_DEPTH).fill_null(False)
    if deep is not None and deep.any():  # nested deeper than SIZES_DEPTH: each pass removes the innermost level
        nest = s.filter(deep).str.replace_all(r"[^\[\]]", "")
        for _ in range(SIZES_DEPTH):
            nest = nest.str.replace_all("[]", "", literal=True)
        ok = ok & pl.Series([True] * len(s)).scatter(deep.arg_true(), nest == "")
    slow += (s.is_not_null() & ~ok).arg_true().to_list()
    if slow:
        s = s.scatter(slow, [_sizes(_value(dims[i])) for i in slow])
    return s


def _timing(ev: list) -> dict[str, pl.Series | bytes]:
    """ts and dur (_texts), or the joined text whose split (_split_texts) they are."""
    return {"ts": _texts_or_joined([e.ts for e in ev]), "dur": _texts_or_joined([e.dur for e in ev])}


_NUMBER_CHARS = b"0123456789.-+eE" + _RAW_SEP  # of JSON's tokens, only numbers are made of these alone


def _texts_or_joined(values: list) -> pl.Series | bytes:
    """_texts of timestamps or durations, or where all are JSON numbers (the fast decoder's
    text of them, a number's text, an integer), their texts joined by _RAW_SEP: its split
    (polars) may be done on another thread."""
    raw_type = _raw_type()
    if raw_type is not None and values:
        types = set(map(type, values))
        if types <= {raw_type, str, int}:  # (bool is a type of its own)
            parts: list[Any] = (
                values if types == {raw_type} else [v if type(v) is raw_type else str(v).encode() for v in values]
            )
            joined = _RAW_SEP.join(parts)
            # numbers alone (no text of a string holds the separator)
            if not joined.translate(None, _NUMBER_CHARS) and joined.count(_RAW_SEP) == len(values) - 1:
                return joined
        if raw_type in types:  # the values the standard decoder reads (a number's text, null, ...)
            values = [_value(v) if type(v) is raw_type else v for v in values]
    return _texts(values)


def _split_texts(joined: pl.Series | bytes) -> pl.Series:
    """The texts joined by _RAW_SEP (a Series: the texts themselves)."""
    if isinstance(joined, bytes):
        return pl.Series([joined.decode()]).str.split(_RAW_SEP.decode()).explode()
    return joined


def _kernel_part(ev: list) -> tuple[pl.DataFrame, dict]:
    a = [e.args or NO_ARGS for e in ev]
    grid, block = _triples([x.grid for x in a]), _triples([x.block for x in a])
    timing = _timing(ev)
    return pl.DataFrame(
        {
            "device": _ints([x.device if x.device is not ABSENT else e.pid for e, x in zip(ev, a)]),
            "context": _ints([x.context for x in a]),
            "stream": _ints([x.stream if x.stream is not ABSENT else e.tid for e, x in zip(ev, a)]),
            "correlation": _ints([x.correlation for x in a]),
            "name": _strs([e.name for e in ev]),
            "grid_x": grid[0],
            "grid_y": grid[1],
            "grid_z": grid[2],
            "block_x": block[0],
            "block_y": block[1],
            "block_z": block[2],
            "registers": _ints([x.registers for x in a]),
            "smem": _ints([x.smem for x in a]),
            "coll_bytes": _ints([None if x.collective is ABSENT else _collective_bytes(x) for x in a]),
        }
    ), timing


def _runtime_part(ev: list, driver: list[int]) -> tuple[pl.DataFrame, dict]:
    timing = _timing(ev)
    return pl.DataFrame(
        {
            "event_class": pl.Series(driver, dtype=pl.Int64),
            "pid": _ints([e.pid for e in ev]),
            "tid": _ints([e.tid for e in ev]),
            "correlation": _ints([(e.args or NO_ARGS).correlation for e in ev]),
            "name": _strs([e.name for e in ev]),
        }
    ), timing


def _copy_kind(name: str) -> int:
    return next((v for k, v in MEMCPY_KINDS.items() if f" {k} " in f" {name} "), 0)


def _copy_part(ev: list, memcpy: bool) -> tuple[pl.DataFrame, dict]:
    a = [e.args or NO_ARGS for e in ev]
    timing = _timing(ev)
    cols = {
        "device": _ints([x.device if x.device is not ABSENT else e.pid for e, x in zip(ev, a)]),
        "stream": _ints([x.stream if x.stream is not ABSENT else e.tid for e, x in zip(ev, a)]),
        "correlation": _ints([x.correlation for x in a]),
        "bytes": _ints([x.bytes for x in a]),
    }
    if memcpy:
        cols["copy_kind"] = pl.Series([_copy_kind(n) for n in _strs([e.name for e in ev])], dtype=pl.Int64)
    return pl.DataFrame(cols), timing


def _range_part(ev: list, how: list[int]) -> tuple[pl.DataFrame, pl.Series | bytes, dict]:
    """Ranges' columns but their sizes and times, and those (_sizes_or_split, _timing); their
    texts made later (_range_part_ns)."""
    a = [e.args or NO_ARGS for e in ev]
    timing = _timing(ev)
    raw = pl.DataFrame(
        {
            "pid": _ints([e.pid for e in ev]),
            "tid": _ints([e.tid for e in ev]),
            "how": pl.Series(how, dtype=pl.Int8),
            "name": _strs([e.name for e in ev]),
            "seq": _ints([x.seq for x in a]),
            "ext": _ints([x.ext for x in a]),
        }
    )
    return raw, _sizes_or_split([x.dims if x.dims is not ABSENT else x.dims_old for x in a]), timing


def _range_texts(raw: pl.DataFrame) -> pl.DataFrame:
    """Ranges: user ranges by name, CPU ops in the emit_nvtx form (`name, seq = N, op_id = K,
    sizes = [[...], ...]`), modules."""
    name = pl.col("name")
    op = pl.concat_str(
        name,
        pl.when(pl.col("seq") >= 0).then(", seq = " + pl.col("seq").cast(pl.String)),
        ", op_id = " + pl.col("ext").cast(pl.String),
        ", sizes = " + pl.col("sizes"),
        ignore_nulls=True,  # a part without its value (null) is left out
    )
    module = pl.col("how") == _MODULE
    return raw.select(
        "ts",
        "dur",
        "pid",
        "tid",
        pl.when(pl.col("how") == _OP)
        .then(op)
        .when(module)
        .then(name.str.slice(len(MODULE_PREFIX)))
        .otherwise(name)
        .alias("text"),
        pl.when(module).then(MODULE_DOMAIN_ID).otherwise(0).cast(pl.Int64).alias("domain_id"),
    )


def _range_part_ns(raw: pl.DataFrame, sizes: pl.Series | bytes, timing: dict) -> pl.DataFrame:
    sizes = _split_sizes(sizes) if isinstance(sizes, bytes) else sizes
    return _ns_part(_range_texts(_timed_part(raw, timing).with_columns(sizes.alias("sizes"))))


class _Parts:
    """The frames of each table, one part per chunk of events, and what else the trace holds.

    A part's polars work (times to ns, ranges' texts) runs on a thread of its own while the
    next chunk is decoded: polars lets go of the interpreter's lock, the decoding holds it."""

    def __init__(self):
        self.kern: list[Future] = []
        self.rt: list[Future] = []
        self.cpy: list[Future] = []
        self.mset: list[Future] = []
        self.ranges: list[Future] = []
        self._polars = ThreadPoolExecutor(1, thread_name_prefix="kview-kineto")
        self.mem: list[tuple] = []
        self.procs: dict = {}
        self.unread: dict[str, int] = {}
        self.cats: dict[str, tuple] = {}  # raw category -> (kind, lower-cased, raw category)

    def add(self, chunk: list) -> None:
        """Sorts a chunk's events (Event or the fast decoder's like of it; None: not an event)
        into tables, cheap per event, then builds each table's part column by column."""
        kern, rt, driver, cpy, mset, rng, how = [], [], [], [], [], [], []
        cats, unread = self.cats, self.unread
        fast = _fast_decoder()
        kinds = fast[4] if fast else {}  # the fast decoder's complete events typed by category
        skip, op_t, kern_t, rt_t = _lanes(kinds)
        lo, hi = _I64
        for e in chunk:
            # the commonest events first (flows, CPU ops, launches, kernels), each as below reads it
            t = type(e)
            if t in skip:
                continue
            if t is op_t and e.ts is not ABSENT and type(tid := e.tid) is int and lo <= tid < hi:
                rng.append(e)
                how.append(_OP)
                continue
            if t is rt_t and e.ts is not ABSENT:
                rt.append(e)
                driver.append(0)
                continue
            if t is kern_t and e.ts is not ABSENT:
                kern.append(e)
                continue
            if e is None:
                continue
            known = kinds.get(t)
            if known is None:
                ph = e.ph
                if ph != "X":
                    if ph == "M" or ph == "i":
                        self._other(e)
                    continue
                raw_cat = e.cat
                if type(raw_cat) is not str:
                    raw_cat = str(raw_cat)
                known = cats.get(raw_cat)
                if known is None:
                    low = raw_cat.lower()
                    cats[raw_cat] = known = (CATEGORIES.get(low), low, raw_cat)
            elif known is SKIP:
                continue
            if e.ts is ABSENT:
                continue
            cat, low, raw_cat = known
            if cat == KERNEL:
                kern.append(e)
            elif cat == RUNTIME or cat == DRIVER:
                rt.append(e)
                driver.append(1 if cat == DRIVER else 0)
            elif cat == MEMCPY:
                cpy.append(e)
            elif cat == MEMSET:
                mset.append(e)
            elif (cat == USER or cat == CPU_OP) and (
                (lo <= tid < hi) if type(tid := e.tid) is int else _int(tid) is not None  # _valid_id, inline
            ):
                rng.append(e)
                if cat == USER or (raw_cat == "Operator" and _is_legacy_user_range(str(e.name), e.args or NO_ARGS)):
                    how.append(_NAME)
                else:
                    how.append(_OP)
            elif low == "python_function":
                # with_modules / with_stack traces: each nn.Module call, a layer range as
                # `kview capture --annotate` writes one (named `Linear_3`, as the profiler does),
                # in its own NVTX domain: layers, never phases
                if str(e.name).startswith(MODULE_PREFIX) and _valid_id(e.tid):
                    rng.append(e)
                    how.append(_MODULE)
            elif low not in NOT_READ_SILENTLY:
                unread[raw_cat] = unread.get(raw_cat, 0) + 1
        later = self.later
        if kern:
            self.kern.append(later(_ns_part, *_kernel_part(kern)))
        if rt:
            self.rt.append(later(_ns_part, *_runtime_part(rt, driver)))
        if cpy:
            self.cpy.append(later(_ns_part, *_copy_part(cpy, memcpy=True)))
        if mset:
            self.mset.append(later(_ns_part, *_copy_part(mset, memcpy=False)))
        if rng:
            self.ranges.append(later(_range_part_ns, *_range_part(rng, how)))

    def later(self, fn, *args) -> Future:
        """fn(*args) on the parts' thread, after the work given it before."""
        return self._polars.submit(fn, *args)

    def close(self, cancel: bool = False) -> None:
        """Waits for the parts' polars work to end (`cancel`: what has not begun is not begun)."""
        self._polars.shutdown(wait=True, cancel_futures=cancel)

    def _other(self, e) -> None:
        """Process names and allocator instants: few, read one by one."""
        a = e.args or NO_ARGS
        if e.ph == "M":
            pid = _int(e.pid)
            if e.name == "process_name" and pid is not None:
                self.procs[pid] = str(a.name)
        elif e.name == KINETO_MEMORY and e.ts is not ABSENT:
            # profile_memory=True: one instant per allocation (+) or free (-) of a device's allocator
            self.mem.append(
                (
                    e.ts,
                    None,
                    _int(e.pid),
                    _int(e.tid),
                    _int(a.device_type),
                    _int(a.device_id),
                    _int(a.alloc_bytes),
                    _int(a.total_allocated),
                    _int(a.total_reserved),
                    _int(a.addr),
                )
            )


# Categories the fast decoder types by their `cat` (a tagged union): complete events of a table,
# each a struct of the args its table reads, so the decode makes fewer objects and their sorting
# needs no lookup. Those of another category, another phase or no category (metadata) make the
# union fail on their piece, which is decoded into FastEvent as before.
TABLE_ARGS = {
    ("device", "context", "stream", "correlation", "grid", "block", "registers", "smem", "collective", "dtype")
    + ("in_nelems", "out_nelems"): ("kernel", "Kernel"),
    ("correlation",): ("cuda_runtime", "runtime", "Runtime", "cuda_driver", "driver"),
    ("device", "stream", "correlation", "bytes"): ("gpu_memcpy", "memcpy", "Memcpy", "gpu_memset", "memset", "Memset"),
    ("seq", "ext", "dims", "dims_old"): ("cpu_op", "operator", "Operator", "user_annotation", "python_function"),
}
# Categories whose events the reader skips (the flows between a launch and its kernel, between
# forward and backward ops), of any phase but X (counted as not read), M and i (read one by one)
FLOW_CATEGORIES = ("ac2g", "fwdbwd", "async")
# Categories of NOT_READ_SILENTLY as Kineto writes them, of any phase but M and i
SILENT_CATEGORIES = ("gpu_user_annotation", "overhead", "Trace")
# Chrome trace phases but X, M and i; None: an event without one
OTHER_PHASES = (None, "B", "E", "b", "e", "n", "s", "t", "f", "C", "P", "N", "O", "D", "I", "R", "c", "V", "v")
SKIP = "skip"  # the kind of a flow event: not read


@functools.lru_cache(maxsize=1)
def _fast_decoder():
    """msgspec (the optional `fast` extra), the types it decodes events into and the kind of
    each typed category's events ({type: (table, lower-cased, category) or SKIP}): None where
    it is not installed."""
    try:
        import msgspec
    except ImportError:
        return None
    from typing import Literal, Optional, Union

    # input dims stay JSON text (nested lists cost most of a decode); _sizes_texts reads them,
    # the old key's absence as the text of a null (a column of them all joins as it is)
    types = {"dims": msgspec.Raw, "dims_old": msgspec.Raw}
    absence = {"dims_old": msgspec.Raw(b"null")}

    def struct(name, fields, extra=(), **kw):
        rename = {attr: key for attr, key, _ in fields}
        # gc=False: plain values, never cycles, so the collector never walks them
        return msgspec.defstruct(
            name,
            [(a, types.get(a, Any), absence.get(a, absent)) for a, _, absent in fields] + list(extra),
            rename=rename,
            gc=False,
            **kw,
        )

    args = struct("FastArgs", ARG_FIELDS)
    ev = struct("FastEvent", EVENT_FIELDS, [("args", Optional[args], None)])  # noqa: UP045  (a runtime type)
    doc = msgspec.defstruct("FastDoc", [("traceEvents", list[msgspec.Raw])])
    members: list = []
    kinds: dict = {}
    top = [f for f in EVENT_FIELDS if f[0] not in ("ph", "cat")]
    # a typed event's times stay JSON text too (_texts_or_joined reads them)
    timing = {"ts": msgspec.Raw, "dur": msgspec.Raw}
    timing_absent = {"dur": msgspec.Raw(b"0")}
    for names, cats in TABLE_ARGS.items():
        table_args = struct("FastArgs_" + names[0], [f for f in ARG_FIELDS if f[0] in names])
        for cat in cats:
            # the category as the tag, and as a class attribute where the reader reads e.cat
            t = msgspec.defstruct(
                "Fast_" + cat,
                [("ph", Literal["X"])]
                + [(a, timing.get(a, Any), timing_absent.get(a, absent)) for a, _, absent in top]
                + [("args", Optional[table_args], None)],  # noqa: UP045
                rename={a: key for a, key, _ in EVENT_FIELDS},
                tag_field="cat",
                tag=cat,
                namespace={"cat": cat},
                gc=False,
            )
            members.append(t)
            kinds[t] = (CATEGORIES.get(cat.lower()), cat.lower(), cat)
    for cat in FLOW_CATEGORIES + SILENT_CATEGORIES:
        # phases the reader skips events of: a silent category's complete events too
        phase = OTHER_PHASES[1:] + (("X",) if cat in SILENT_CATEGORIES else ())
        ph: Any = Optional[Literal[phase]]  # noqa: UP045  (a runtime type)
        t = msgspec.defstruct("Fast_" + cat, [("ph", ph, None)], tag_field="cat", tag=cat, gc=False)
        members.append(t)
        kinds[t] = SKIP
    by_cat = Union[tuple(members)]  # noqa: UP007
    return msgspec, ev, doc, by_cat, kinds


def _lanes(kinds: dict) -> tuple[set, type | None, type | None, type | None]:
    """Of the fast decoder's types (kinds): those skipped (and None's), and those of `cpu_op`,
    `kernel` and `cuda_runtime` events."""
    by_cat = {k[2]: t for t, k in kinds.items() if k is not SKIP}
    skip = {t for t, k in kinds.items() if k is SKIP} | {type(None)}
    return skip, by_cat.get("cpu_op"), by_cat.get("kernel"), by_cat.get("cuda_runtime")


# Text decoded per msgspec call, cut between two events: small enough for the text and the
# objects made from it to stay in the processor's cache (a call per event costs a third more).
DECODE_BYTES = 1 << 18
# Where one event ends and the next begins: `}`, a comma, `{`. A newline is never inside a JSON
# string, and a cut anywhere but between two events of the list leaves a piece that is not
# JSON: it fails to decode and the rest is split event by event instead (FastEvents._rest).
_CUT = re.compile(r"\}\s*,(\s*)\{")
_CUT_BYTES = re.compile(rb"\}\s*,(\s*)\{")


class FastEvents:
    """The events list decoded by msgspec straight into the fields the reader uses (no dict per
    event, nothing of the events' args it does not read), a piece of the text at a time: the
    list is cut between events and each piece decoded as a list in one call. Events it cannot
    type (not an object, args not an object) are decoded one by one by the standard decoder, as
    the standard path reads them; text msgspec does not read as JSON (a trailing comma, NaN, a
    bare array without its closing bracket, damage) is read from there on as the standard path
    reads it, which reports what is wrong where it reads it."""

    def __init__(self, path: Path, text: str | bytes, at: int, bare: bool, types):
        self.text: str | bytes | None = text
        self.path, self.at, self.bare, self.types = path, at, bare, types

    @classmethod
    def of(cls, path: Path, text: str | bytes, at: int, bare: bool) -> FastEvents | None:
        """None where msgspec is not installed."""
        types = _fast_decoder()
        return None if types is None else cls(path, text, at, bare, types)

    def _named_once(self, text: str | bytes, a: int) -> bool:
        """Whether msgspec, decoding the document from text[a:] on, reads the events list the
        standard path reads (from the first `"traceEvents":`): no other `"traceEvents"` there,
        where a second key of that name (msgspec keeps the last) would be. Before the last
        piece no key can be the document's: a piece holding one is not a list of events."""
        if self.bare:
            return True
        key: Any = b'"traceEvents"' if isinstance(text, bytes) else '"traceEvents"'
        return text.count(key) == 1 if a == self.at else text.find(key, a) < 0

    def chunks(self):
        """Lists of at least CHUNK_EVENTS events (the last one shorter), in the file's order."""
        chunk: list = []
        for part in self._parts():
            chunk += part
            if len(chunk) >= CHUNK_EVENTS:
                yield chunk
                chunk = []
        if chunk:
            yield chunk

    def _parts(self):
        msgspec, ev, _, by_cat, _ = self.types
        text: Any = self.text
        self.text = None  # the text goes with the last piece
        if isinstance(text, bytes):
            cut, left, right, opening = _CUT_BYTES, b"[", b"]", self._opening.encode()
        else:
            cut, left, right, opening = _CUT, "[", "]", self._opening

        def decoders(t):  # a piece's, and the last piece's: the rest of the list and of the document
            last = list[t] if self.bare else msgspec.defstruct("FastTail", [("traceEvents", list[t])])
            return msgspec.json.Decoder(list[t], float_hook=str), msgspec.json.Decoder(last, float_hook=str)

        # floats as their decimal text, as the standard path reads them
        typed, plain = decoders(by_cat), decoders(ev)
        a, piece = self.at, None
        while True:
            m = cut.search(text, a + DECODE_BYTES) if len(text) - a > 2 * DECODE_BYTES else None
            if m is None and len(text) - a > 4 * DECODE_BYTES:  # no cut found: never all events at once
                break
            last = m is None
            if last and not self._named_once(text, a):
                break
            piece = opening + text[a:] if last else left + text[a : m.start() + 1] + right
            # by category, else (an event that names none: metadata) as FastEvent; trying costs
            # less than counting the piece's keys twice first (the few pieces with metadata)
            tries = (typed, plain)
            got = None
            try:
                for decs in tries:
                    try:
                        got = decs[last].decode(piece)
                        break
                    except msgspec.ValidationError:  # JSON, but an event it cannot type
                        pass
                    except msgspec.DecodeError:  # (a ValueError too) not JSON: the next decoder fails alike
                        raise
                    except (RecursionError, ValueError):
                        pass
            except msgspec.DecodeError:  # not JSON msgspec reads (or not cut between events)
                break
            if got is None:
                got = self._raws(piece, last)
                if got is None:
                    break
                got = [self._one(r, msgspec) for r in got]
            elif last and not self.bare:
                got = got.traceEvents
            yield got
            if last:
                return
            a = m.start(1)
        self.text = text
        text = piece = None
        yield from self._rest(a)

    @property
    def _opening(self) -> str:
        """What makes the text from an event on a JSON document msgspec reads."""
        return "[" if self.bare else '{"traceEvents":['

    def _raws(self, piece, last: bool) -> list | None:
        """A piece's events as their JSON text each; None if the piece is not JSON msgspec reads."""
        msgspec, _, doc, _, _ = self.types
        try:
            got = msgspec.json.decode(
                piece, type=doc if last and not self.bare else list.__class_getitem__(msgspec.Raw)
            )
        except (msgspec.MsgspecError, RecursionError, ValueError):
            return None
        return got.traceEvents if last and not self.bare else got

    def _rest(self, a: int):
        """The events from self.text[a:] (a is the list's start or between two events): split by
        msgspec if it reads the rest of the document as JSON, else read by the standard path."""
        text: Any = self.text
        self.text = None
        if not self._named_once(text, a):
            raws = None
        elif a == self.at:  # the whole document: msgspec reads it as it is
            raws = self._raws(text, True)
        else:
            opening = self._opening.encode() if isinstance(text, bytes) else self._opening
            raws = self._raws(opening + text[a:], True)
        msgspec = self.types[0]
        if raws is not None:
            del text
            for i in range(0, len(raws), CHUNK_EVENTS):
                yield [self._one(r, msgspec) for r in raws[i : i + CHUNK_EVENTS]]
            return
        text = _as_str(text)  # (bytes: the only other copy goes)
        yield from _chunks(map(event, _events(self.path, text, a, self.bare)))

    def _one(self, raw, msgspec):
        try:
            return self._dec.decode(raw)
        except (msgspec.MsgspecError, RecursionError, ValueError):
            return event(_decode_one(self.path, bytes(raw).decode("utf-8"), 0)[0])

    @functools.cached_property
    def _dec(self):
        msgspec, ev = self.types[:2]
        return msgspec.json.Decoder(ev, float_hook=str)


def _chunks(events):
    events = iter(events)
    while chunk := list(itertools.islice(events, CHUNK_EVENTS)):
        yield chunk


class KinetoFrames:
    """All frames of one Kineto trace, built from its events a chunk at a time."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        parts = _Parts()
        events = doc["traceEvents"]
        chunks = events.chunks() if isinstance(events, FastEvents) else _chunks(map(event, events))
        # The events are acyclic and freed by reference counts as each chunk is done; the cyclic
        # collector would walk every live chunk's objects over and over (a third of the standard
        # decoder's time)
        collecting = gc.isenabled()
        gc.disable()
        try:
            for chunk in chunks:
                parts.add(chunk)
        except BaseException:
            parts.close(cancel=True)  # the file's damage: its parts are not needed
            raise
        finally:
            if collecting:
                gc.enable()
        chunk = chunks = events = None  # the events (and the text) go before the frames are built
        try:
            self._tables(parts, doc)
        finally:
            parts.close()

    def _tables(self, parts: _Parts, doc: dict) -> None:
        """The frames from the parts; the NVTX events made beside the others."""
        nvtx = parts.later(_nvtx_table, parts.ranges)
        procs, unread = parts.procs, parts.unread
        self.unread = unread
        i64 = pl.Int64
        self.runtime_raw = _joined(
            parts.rt, {"event_class": i64, "pid": i64, "tid": i64, "correlation": i64, "name": pl.String}
        )
        k = _joined(
            parts.kern,
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
        names = pl.concat(
            [
                k.select(pl.col("name").alias("value")),
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
            _joined(parts.cpy, {"device": i64, "stream": i64, "correlation": i64, "bytes": i64, "copy_kind": i64})
        ).with_columns(pl.lit(None, dtype=i64).alias("src_kind"), pl.lit(None, dtype=i64).alias("dst_kind"))
        self.memset = with_pid(
            _joined(parts.mset, {"device": i64, "stream": i64, "correlation": i64, "bytes": i64})
        ).with_columns(pl.lit(None, dtype=i64).alias("mem_kind"))
        m = _timed(
            parts.mem,
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
        self.nvtx_events, range_pids = nvtx.result()
        # Processes that ran host code: GPU devices get a process_name row too (device 0 is pid 0)
        host = set(pl.concat([self.runtime_raw["pid"], range_pids]).drop_nulls().unique().to_list())
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


def _nvtx_table(ranges: list[Future]) -> tuple[pl.DataFrame, pl.Series]:
    """The ranges' parts as NVTX events (nvtx_events), and the process of each."""
    i64 = pl.Int64
    r = _joined(ranges, {"pid": i64, "tid": i64, "text": pl.String, "domain_id": i64})
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
    nvtx = r.with_row_index("id", offset=1).select(
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
    return nvtx, r["pid"]


def _timed(rows: list[tuple], schema: dict) -> pl.DataFrame:
    """Rows (ts, dur, *columns) -> a frame with integer-ns start/end and the other columns."""
    return _ns_part(
        pl.DataFrame(rows, schema={"ts": pl.String, "dur": pl.String, **schema}, orient="row", strict=False)
    )


def _timed_part(raw: pl.DataFrame, timing: dict) -> pl.DataFrame:
    """A part's columns and its ts and dur (_timing's)."""
    return raw.with_columns(*[_split_texts(v).alias(k) for k, v in timing.items()])


def _ns_part(raw: pl.DataFrame, timing: dict | None = None) -> pl.DataFrame:
    """A part (ts, dur as decimal text, else given as _timing's, and its columns) -> integer-ns
    start/end and the columns. Both conversions give the same ns of plain text: a part may take
    either."""
    raw = raw if timing is None else _timed_part(raw, timing)
    plain = raw.select(pl.col("ts", "dur").str.contains(PLAIN_US).all()).row(0)
    ns = ns_from_plain_us_text if all(plain) else ns_from_us_text
    start = ns(pl.col("ts"))
    return raw.select(
        start.alias("start"), (start + ns(pl.col("dur")).fill_null(0)).alias("end"), pl.exclude("ts", "dur")
    )


def _joined(parts: list[Future], schema: dict) -> pl.DataFrame:
    """A table's parts (_ns_part's, to come) as one frame: start, end and the schema's columns."""
    if not parts:
        return _ns_part(pl.DataFrame(schema={"ts": pl.String, "dur": pl.String, **schema}))
    return pl.concat([p.result() for p in parts]).select("start", "end", *schema)


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
        self._text: str | bytes | None = None
        self._decoding = threading.Lock()  # the explorer's views ask from several threads: one decode
        if self._frames is None:
            self._text = _json_text(path)
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
        held = [self._text]  # the text is not kept past its decode (_doc)
        self._text = None
        try:
            kf = KinetoFrames(self.path, _doc(self.path, held, *self._start))
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

    def read_columns(self, key: str, names: list[str], where: tuple[str, list[int]] | None = None) -> pl.DataFrame:
        f = self.frames[key]
        return (f if where is None else f.filter(pl.col(where[0]).is_in(where[1]))).select(names)

    def row_count(self, key: str) -> int:
        return self.frames[key].height

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
