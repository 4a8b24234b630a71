"""How much memory kview may use, and what that allows a JSON trace to inflate to.

The budget is `--max-memory SIZE`, else the KVIEW_MAX_MEMORY environment variable, else the
memory available when the trace is opened: the least of what the system reports available, what
the process's memory cgroup (a container's or a batch job's limit) still allows, and what its
address-space limit (`ulimit -v`) leaves. A torch.profiler JSON is held as
text while its events are decoded into columns; the peak measured on tiled traces is about
2.6 times the text (bench/RESULTS.md), so the text may be at most a quarter of the budget. A
`.json` larger than that is refused before it is read; a `.json.gz` is first inflated without
keeping anything (constant memory, about 4 s per GiB for a bomb) and refused as soon as it
passes the bound, so a 4 MB gzip bomb never takes many GB.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from kview.notation import binary_bytes
from kview.warning import warn_once

PEAK_PER_TEXT_BYTE = 4  # peak RSS / JSON text size, with headroom over the measured 2.6
ENV = "KVIEW_MAX_MEMORY"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_limit: int | None = None  # set from --max-memory


def parse_size(text: str) -> int:
    """'8G', '512M', '1.5GB', '2000000000' -> bytes (binary units); ValueError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m or float(m[1]) <= 0:
        raise ValueError(f"cannot read memory size {text!r} (e.g. 8G, 512M)")
    return int(float(m[1]) * _UNITS[m[2].upper()])


def set_limit(size: str | None) -> None:
    global _limit
    _limit = None if size is None else parse_size(size)


def available() -> int | None:
    """Memory available to a new allocation now: the least of the system's (MemAvailable on
    Linux), the memory cgroup's room and the address-space limit's, where each is known."""
    known = [b for b in (system_available(), cgroup_room(), address_space_room()) if b is not None]
    return min(known) if known else None


def system_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# cgroup v2's files, then v1's: limit, usage, and the memory.stat key of the file cache the kernel
# takes back before it kills (usage counts it; `docker stats` leaves it out the same way)
_V2 = ("memory.max", "memory.current", "inactive_file")
_V1 = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
NO_LIMIT = 1 << 60  # v1 writes "no limit" as a number near 2**63


def cgroup_room(root: Path = Path("/sys/fs/cgroup"), membership: Path = Path("/proc/self/cgroup")) -> int | None:
    """Bytes this process's memory cgroup and each cgroup above it still allow (the least), None
    where none sets a limit: MemAvailable is the host's, and a container or a batch job past its
    limit is killed however much the host has."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return None
    rooms = []
    for line in lines:
        fields = line.split(":", 2)  # hierarchy:controllers:path
        if len(fields) < 3:
            continue
        controllers, path = fields[1], fields[2]
        if controllers == "":
            base, files = root, _V2
        elif "memory" in controllers.split(","):
            base, files = root / "memory", _V1
        else:
            continue
        parts = [p for p in path.split("/") if p and p not in (".", "..")]
        rooms += [_room(base.joinpath(*parts[:k]), *files) for k in range(len(parts), -1, -1)]
    known = [r for r in rooms if r is not None]
    return min(known) if known else None


def _room(folder: Path, limit_file: str, usage_file: str, cache_key: str) -> int | None:
    try:
        limit = (folder / limit_file).read_text().strip()
        if limit == "max" or int(limit) >= NO_LIMIT:
            return None
        usage = int((folder / usage_file).read_text())
    except (OSError, ValueError):
        return None
    cache = 0
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == cache_key:
                cache = int(value)
                break
    except (OSError, ValueError):
        pass
    return max(int(limit) - usage + cache, 0)


def address_space_room() -> int | None:
    """What `ulimit -v` (RLIMIT_AS) leaves this process beyond the address space it holds now;
    None without such a limit."""
    try:
        import resource  # Unix only

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status") as f:
            held = next((int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:")), 0)
    except (ImportError, OSError, ValueError, IndexError):
        return None
    return max(soft - held, 0)


def budget() -> tuple[int | None, str]:
    """(bytes, where that number comes from) for messages."""
    if _limit is not None:
        return _limit, "--max-memory"
    env = os.environ.get(ENV, "").strip()
    if env:
        try:
            return parse_size(env), ENV
        except ValueError as e:  # no reason to refuse a trace: say so and use what is available
            warn_once(f"{ENV}: {e}; using the memory available")
    return available(), "the memory available"


def json_text_limit() -> tuple[int | None, str]:
    """The most JSON text (bytes) a trace may inflate to, and why (None: no bound known)."""
    total, why = budget()
    return (None if total is None else total // PEAK_PER_TEXT_BYTE), why


def too_large(limit: int, why: str) -> str:
    """The problem text of a TraceError for JSON over `limit`."""
    total = limit * PEAK_PER_TEXT_BYTE
    source = (
        f"--max-memory {binary_bytes(total)}"
        if why == "--max-memory"
        else f"{ENV}={binary_bytes(total)}"
        if why == ENV
        else f"the {binary_bytes(total)} of memory available"
    )
    return (
        f"inflates to more than {binary_bytes(limit)} of JSON, more than kview can decode within {source}; "
        f"give --max-memory SIZE (or set {ENV}) to allow more"
    )
