"""PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot`) read without torch and without
running any code from the file.

A snapshot is a pickle of plain containers: a dict with `segments` (the allocator's segments and
their blocks at dump time), `device_traces` (per device, the allocator's history: alloc,
free_requested, free_completed, segment_alloc/free/map/unmap, oom, snapshot entries with addr,
size, stream, time_us and the Python frames that asked) and, on newer torch, `allocator_settings`
and `external_annotations` (record_function ranges). Nothing in it needs a class, so the loader
refuses every global the pickle names except two plain types (PLAIN), and persistent ids: a crafted
file can fail to load but never execute code. Snapshots compressed with gzip or xz (`.pickle.gz`,
`.pickle.xz`) are read as they are.

`kview capture --memory` adds one key, `kview`: the clock pair that aligns the snapshot's
`time_us` (the allocator's wall clock, CLOCK_REALTIME in microseconds) with the trace's clock,
and the peaks torch reported (see kview.capture.memory_history). Other readers ignore it.

Bounded before anything is built: the (decompressed) bytes are read up to the memory budget
(`--max-memory`, else the memory available), then one pass over the pickle's opcodes, without
making any object, refuses a memo index no pickler writes (a 9-byte pickle can otherwise ask
the C unpickler for a memo of 2^28 slots) and estimates the objects the stream makes; only a
stream whose bytes and objects fit the budget is unpickled. `check` then walks every field kview
reads once (a list shared by many entries, as a pickle's memo makes it, is checked once), so a
damaged snapshot is one line naming the field, never an error deep in the analysis.

Standard library only: `kview capture` finishes snapshots with it on GPU machines that have
torch but not kview's core dependencies.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import pickle
import pickletools
import struct
import zlib
from pathlib import Path
from typing import cast

from kview.errors import TraceError
from kview.io import memory_budget
from kview.io.paths import named
from kview.notation import binary_bytes

KVIEW_KEY = "kview"
SUFFIX = ".memory.pickle"  # the snapshot `kview capture --memory` writes beside TRACE: TRACE's stem + SUFFIX
# what makes a file a snapshot: a dict with these two lists
REQUIRED = ("segments", "device_traces")
# the most a pickle opcode makes in Python objects (an empty dict, its memo slot and its place in a
# list); the fixtures measure about 20 bytes per opcode
BYTES_PER_OPCODE = 48
INT64 = (-(1 << 63), (1 << 63) - 1)
READ_CHUNK = 1 << 24


# The only classes a snapshot may name, each read as the plain type it extends (a snapshot with the
# torch version as torch writes it names TorchVersion, a str subclass; older dumps an OrderedDict)
PLAIN = {("torch.torch_version", "TorchVersion"): str, ("collections", "OrderedDict"): dict}


class _NoGlobals(pickle.Unpickler):
    """An unpickler for plain data: any class or function the stream names other than PLAIN is refused."""

    def find_class(self, module: str, name: str):
        plain = PLAIN.get((module, name))
        if plain is None:
            raise pickle.UnpicklingError(f"it names {module}.{name}, and a memory snapshot names no code")
        return plain

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent id, and a memory snapshot holds none")


def _opener(path: Path):
    with open(path, "rb") as f:
        head = f.read(6)
    if head.startswith(b"\x1f\x8b"):
        return gzip.open, "gzip"
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.open, "xz"
    return open, None


def _budget() -> tuple[int | None, str]:
    limit, source = memory_budget.budget()
    return limit, source


def _over_budget(path: Path, what: str, limit: int, source: str) -> TraceError:
    return TraceError(
        path,
        f"{what}, more than {source} {binary_bytes(limit)} allows; "
        f"give --max-memory SIZE (or set {memory_budget.ENV}) to allow more",
    )


# how each opcode's argument is laid out (pickletools' table): a fixed byte count (>= 0) or one of these
NOARG, LINE, TWO_LINES, LEN1, LEN4, LEN8, LONG_PUT, TEXT_PUT, STOP = -1, -2, -3, -4, -5, -6, -7, -8, -9


def _opcode_kinds() -> list[int | None]:
    kinds: list[int | None] = [None] * 256
    lengths = {
        pickletools.TAKEN_FROM_ARGUMENT1: LEN1,
        pickletools.TAKEN_FROM_ARGUMENT4: LEN4,
        pickletools.TAKEN_FROM_ARGUMENT4U: LEN4,
        pickletools.TAKEN_FROM_ARGUMENT8U: LEN8,
    }
    for op in pickletools.opcodes:
        a = op.arg
        if a is None:
            k = NOARG
        elif a.n >= 0:
            k = a.n
        elif a.n == pickletools.UP_TO_NEWLINE:
            k = TWO_LINES if a.name == "stringnl_noescape_pair" else LINE
        else:
            k = lengths[a.n]
        kinds[ord(op.code)] = k
    kinds[ord(pickle.LONG_BINPUT)] = LONG_PUT
    kinds[ord(pickle.PUT)] = TEXT_PUT
    kinds[ord(pickle.STOP)] = STOP
    return kinds


KINDS = _opcode_kinds()
_U4 = struct.Struct("<I").unpack_from
_U8 = struct.Struct("<Q").unpack_from


class Scan:
    """One pass over a pickle's opcodes that makes none of its objects, fed the bytes as they are
    read: where the pickle ends (`end`) and the bytes of Python objects unpickling it can make at
    most (`objects`). UnpicklingError for a byte that is no opcode, or a memo index past the
    stream so far (each memo entry takes an opcode, so no pickler writes one)."""

    def __init__(self) -> None:
        self.i = self.ops = self.payload = self.memo = 0
        self.end: int | None = None

    @property
    def objects(self) -> int:
        return self.ops * BYTES_PER_OPCODE + self.payload + self.memo * 16

    def _memo(self, index: int, at: int) -> None:
        self.memo = max(self.memo, index)
        if index >= at:  # refused before a bomb's slots are ever asked for
            raise pickle.UnpicklingError(f"it asks for memo entry {index:,} at byte {at:,}")

    def feed(self, data: bytes | bytearray) -> None:
        """Go on over `data` (all the bytes so far) up to its end or the pickle's STOP."""
        n, i, ops, payload = len(data), self.i, self.ops, self.payload
        kinds = KINDS
        try:
            while i < n:
                at = i
                k = kinds[data[i]]
                i += 1
                ops += 1
                if k == NOARG:
                    continue
                if k is None:
                    raise pickle.UnpicklingError(f"byte {at:,} is no pickle opcode")
                if k >= 0:
                    i += k
                elif k == LEN1 or k == LEN4 or k == LEN8:
                    width = 1 if k == LEN1 else 4 if k == LEN4 else 8
                    if i + width > n:  # the length is not all here yet
                        i, ops = at, ops - 1
                        break
                    size = data[i] if k == LEN1 else _U4(data, i)[0] if k == LEN4 else _U8(data, i)[0]
                    i += width + size
                    payload += size
                elif k == STOP:
                    self.end = i
                    break
                elif k == LONG_PUT:
                    if i + 4 > n:
                        i, ops = at, ops - 1
                        break
                    self._memo(_U4(data, i)[0], at)
                    i += 4
                else:  # LINE, TEXT_PUT, TWO_LINES: up to a newline (two for GLOBAL and INST)
                    j = data.find(b"\n", i)
                    if k == TWO_LINES and j >= 0:
                        j = data.find(b"\n", j + 1)
                    if j < 0:
                        i, ops = at, ops - 1
                        break
                    if k == TEXT_PUT:
                        text = bytes(data[i:j])
                        self._memo(int(text) if text.isdigit() and len(text) < 20 else at, at)
                    payload += j - i
                    i = j + 1
        finally:
            self.i, self.ops, self.payload = i, ops, payload


def _read(path: Path, opener, limit: int | None, source: str) -> tuple[bytearray, Scan]:
    """The pickle's bytes (decompressed) and their scan, refused as soon as the bytes and the
    objects they declare pass the budget: a 386 KB xz that inflates to 2 GB is refused at its
    first chunk, never holding more than the budget."""

    scan = Scan()
    buf = bytearray()
    with opener(path, "rb") as f:
        while scan.end is None and (chunk := f.read(READ_CHUNK)):
            buf += chunk
            scan.feed(buf)
            need = 2 * max(len(buf), scan.i) + scan.objects  # the bytes, their copy, the objects
            if limit is not None and need > limit:
                raise _over_budget(
                    path,
                    f"would take more than {binary_bytes(need)} to unpickle",
                    limit,
                    source,
                )
    if scan.end is None:
        raise EOFError
    return buf, scan


def memory_name(trace: Path) -> Path:
    """run.sqlite -> run.memory.pickle; run.rank0.sqlite -> run.rank0.memory.pickle."""
    return trace.with_name(trace.name[: -len(trace.suffix)] + SUFFIX if trace.suffix else trace.name + SUFFIX)


def is_snapshot_file(path: str | os.PathLike) -> bool:
    """Does the file start like a pickle (after an optional gzip/xz layer)? Cheap; no unpickling."""
    p = Path(path)
    try:
        opener, _ = _opener(p)
        with opener(p, "rb") as f:
            head = f.read(2)
    except (OSError, EOFError, lzma.LZMAError, zlib.error):
        return False
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def load(path: str | os.PathLike) -> dict:
    """The snapshot's dict, or TraceError naming the file and what is wrong with it."""
    p = named(path)
    if not p.exists():
        raise TraceError(p, "no such file")
    if p.is_dir():
        raise TraceError(p, "is a folder, not a memory snapshot")
    if p.stat().st_size == 0:
        raise TraceError(p, "is empty")
    try:
        opener, _ = _opener(p)
        limit, source = _budget()
        raw, scan = _read(p, opener, limit, source)
        del raw[cast(int, scan.end) :]
        stream = io.BytesIO(bytes(raw))  # shares the bytes; the bytearray goes before unpickling
        del raw
        data = _NoGlobals(stream).load()
    except TraceError:
        raise
    except pickle.UnpicklingError as e:
        raise TraceError(p, f"is not a PyTorch memory snapshot: {e}") from None
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(p, f"is truncated or damaged ({type(e).__name__}: {e or 'ends early'})") from None
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror or e})") from None
    except (
        ValueError,
        IndexError,
        KeyError,
        TypeError,
        AttributeError,
        OverflowError,
        RecursionError,
        struct.error,
    ) as e:
        raise TraceError(p, f"is not a PyTorch memory snapshot ({type(e).__name__}: {e})") from None
    except MemoryError:
        raise TraceError(p, "does not fit in memory to unpickle (give --max-memory SIZE to bound it)") from None
    check(p, data)
    return data


class Malformed(ValueError):
    """A field of the snapshot that kview reads holds something else than it should."""


def _int(value, where: str, optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or not INT64[0] <= value <= INT64[1]:
        shown = repr(value) if isinstance(value, (int, float)) and len(repr(value)) < 40 else type(value).__name__
        raise Malformed(f"{where} is {shown}, not a 64-bit integer")


def _str(value, where: str) -> None:
    if value is not None and not isinstance(value, str):
        raise Malformed(f"{where} is a {type(value).__name__}, not text")


def _dict(value, where: str) -> dict:
    if not isinstance(value, dict):
        raise Malformed(f"{where} is a {type(value).__name__}, not a dict")
    return value


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise Malformed(f"{where} is a {type(value).__name__}, not a list")
    return list(value) if isinstance(value, tuple) else value


def _check_frames(frames, seen: set[int]) -> None:
    if frames is None or id(frames) in seen:  # one frames list shared by many entries: checked once
        return
    seen.add(id(frames))
    for fr in _list(frames, "a history entry's frames"):
        if id(fr) in seen:
            continue
        seen.add(id(fr))
        _dict(fr, "a frame")
        _str(fr.get("filename"), "a frame's filename")
        _str(fr.get("name"), "a frame's name")
        if not isinstance(fr.get("line"), (int, str, type(None))):
            raise Malformed(f"a frame's line is a {type(fr.get('line')).__name__}")


def _check_fields(data: dict) -> None:
    """Every field kview reads, with the type it reads it as; one pass, shared objects once."""
    seen: set[int] = set()
    for seg in data["segments"]:
        _dict(seg, "a segment")
        for k in ("device", "total_size", "address"):
            _int(seg.get(k), f"a segment's {k}")
        _str(seg.get("segment_type"), "a segment's segment_type")
        for b in _list(seg.get("blocks"), "a segment's blocks"):
            _dict(b, "a block")
            _str(b.get("state"), "a block's state")
            for k in ("address", "size", "requested_size"):
                _int(b.get(k), f"a block's {k}")
    lo, hi = INT64
    plain: set[type] = {int, bool, type(None)}
    for t in data["device_traces"]:
        for e in t:  # the hot loop: a snapshot holds up to millions of entries
            if e.__class__ is not dict:
                _dict(e, "a history entry")
            g = e.get
            a, b, c, d = cast(int, g("time_us")), cast(int, g("addr")), cast(int, g("size")), cast(int, g("stream"))
            if (
                a.__class__ not in plain
                or b.__class__ not in plain
                or c.__class__ not in plain
                or d.__class__ not in plain
                or not lo <= (a or 0) <= hi
                or not lo <= (b or 0) <= hi
                or not lo <= (c or 0) <= hi
                or not lo <= (d or 0) <= hi
            ):
                for k in ("time_us", "addr", "size", "stream"):
                    _int(e.get(k), f"a history entry's {k}")
            if g("action").__class__ is not str:
                _str(g("action"), "a history entry's action")
            f = g("frames")
            if f is not None and id(f) not in seen:
                _check_frames(f, seen)
    for a in _list(data.get("external_annotations"), "external_annotations"):
        if isinstance(a, dict):
            _int(a.get("time_us"), "an annotation's time_us")
            _int(a.get("device"), "an annotation's device")
            _str(a.get("name"), "an annotation's name")
    settings = data.get("allocator_settings")
    if settings is not None:
        _dict(settings, "allocator_settings")
        _int(settings.get("max_split_size"), "allocator_settings' max_split_size")
        divisions = settings.get("roundup_power2_divisions")
        if isinstance(divisions, dict):
            for v in divisions.values():
                _int(v, "allocator_settings' roundup_power2_divisions")
    facts = data.get(KVIEW_KEY)
    if facts is not None:
        _dict(facts, f"the {KVIEW_KEY} entry")
        clock = facts.get("clock")
        if clock is not None:
            _dict(clock, f"the {KVIEW_KEY} clock")
            _int(clock.get("trace_ns"), f"the {KVIEW_KEY} clock's trace_ns")
            if clock.get("trace_ns") is not None:
                _int(clock.get("unix_ns"), f"the {KVIEW_KEY} clock's unix_ns", optional=False)
        for k in ("max_memory_allocated", "requested_bytes_peak", "max_memory_reserved"):
            _int(facts.get(k), f"the {KVIEW_KEY} entry's {k}")
        _str(facts.get("device"), f"the {KVIEW_KEY} entry's device")


def check(path: Path, data) -> None:
    """The shape kview reads; anything else is named in one line."""
    if not isinstance(data, dict):
        raise TraceError(
            path,
            f"is a pickle of a {type(data).__name__}, not a PyTorch memory snapshot "
            f"(a dict with segments and device_traces)",
        )
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise TraceError(path, f"is a pickle but not a PyTorch memory snapshot (no {' or '.join(missing)})")
    if (
        not isinstance(data["segments"], list)
        or not isinstance(data["device_traces"], list)
        or not all(isinstance(t, list) for t in data["device_traces"])
    ):
        raise TraceError(path, "is not a PyTorch memory snapshot (segments and device_traces must be lists)")
    if not any(data["device_traces"]):
        raise TraceError(
            path,
            "holds no allocator history (record it with "
            "torch.cuda.memory._record_memory_history() before the snapshot)",
        )
    try:
        _check_fields(data)
    except Malformed as e:
        raise TraceError(path, f"is not a PyTorch memory snapshot: {e}") from None


def dump(data: dict, path: str | os.PathLike) -> None:
    """Write a snapshot as torch does (an uncompressed pickle; protocol 4, readable by every
    Python kview supports), to a temporary beside it, then renamed into place."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(data, f, protocol=4)
    os.replace(tmp, p)
