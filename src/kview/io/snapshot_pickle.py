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

Standard library only: `kview capture` finishes snapshots with it on GPU machines that have
torch but not kview's core dependencies.
"""

from __future__ import annotations

import gzip
import io
import lzma
import os
import pickle
import zlib
from pathlib import Path

from kview.errors import TraceError

KVIEW_KEY = "kview"
SUFFIX = ".memory.pickle"  # the snapshot `kview capture --memory` writes beside TRACE: TRACE's stem + SUFFIX
# what makes a file a snapshot: a dict with these two lists
REQUIRED = ("segments", "device_traces")
# a snapshot unpickles to about this many times its (uncompressed) size in Python objects
OBJECTS_PER_BYTE = 12


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


def _budget_check(path: Path, compressed: str | None) -> None:
    """Refuse a snapshot whose objects would not fit the memory budget (`--max-memory`)."""
    from kview.io import memory_budget

    limit, source = memory_budget.budget()
    if limit is None:
        return
    size = path.stat().st_size * (8 if compressed else 1)  # a compressed pickle: a rough guess
    if size * OBJECTS_PER_BYTE > limit:
        raise TraceError(
            path,
            f"is a {'compressed ' if compressed else ''}snapshot of {size / 2**20:,.0f} MiB, more "
            f"than kview can unpickle within {source} {limit / 2**30:.1f} GiB; give --max-memory SIZE "
            f"(or set {memory_budget.ENV}) to allow more",
        )


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
    except (OSError, EOFError, lzma.LZMAError):
        return False
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def load(path: str | os.PathLike) -> dict:
    """The snapshot's dict, or TraceError naming the file and what is wrong with it."""
    p = Path(path).expanduser()
    if not p.exists():
        raise TraceError(p, "no such file")
    if p.is_dir():
        raise TraceError(p, "is a folder, not a memory snapshot")
    if p.stat().st_size == 0:
        raise TraceError(p, "is empty")
    try:
        opener, compressed = _opener(p)
        _budget_check(p, compressed)
        with opener(p, "rb") as f:
            raw = f.read() if compressed else None
            data = _NoGlobals(io.BytesIO(raw) if raw is not None else f).load()
    except TraceError:
        raise
    except pickle.UnpicklingError as e:
        raise TraceError(p, f"is not a PyTorch memory snapshot: {e}") from None
    except (EOFError, lzma.LZMAError, gzip.BadGzipFile, zlib.error) as e:
        raise TraceError(p, f"is truncated or damaged ({type(e).__name__}: {e or 'ends early'})") from None
    except OSError as e:
        raise TraceError(p, f"cannot be read ({e.strerror or e})") from None
    except (ValueError, IndexError, KeyError, TypeError, AttributeError, MemoryError, RecursionError) as e:
        raise TraceError(p, f"is not a PyTorch memory snapshot ({type(e).__name__}: {e})") from None
    check(p, data)
    return data


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
    for t in data["device_traces"]:
        for e in t[:1] + t[-1:]:
            if not isinstance(e, dict) or not isinstance(e.get("action"), str) or not isinstance(e.get("size"), int):
                raise TraceError(path, "is not a PyTorch memory snapshot (a history entry without action and size)")


def dump(data: dict, path: str | os.PathLike) -> None:
    """Write a snapshot as torch does (an uncompressed pickle; protocol 4, readable by every
    Python kview supports), to a temporary beside it, then renamed into place."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(data, f, protocol=4)
    os.replace(tmp, p)
