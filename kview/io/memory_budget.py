"""How much memory kview may use, and what that allows a JSON trace to inflate to.

The budget is `--max-memory SIZE`, else the KVIEW_MAX_MEMORY environment variable, else the
memory the system reports available when the trace is opened. A torch.profiler JSON is held as
text while its events are decoded into columns; the peak measured on tiled traces is about
2.6 times the text (bench/RESULTS.md), so the text may be at most a quarter of the budget. A
`.json` larger than that is refused before it is read; a `.json.gz` is first inflated without
keeping anything (constant memory, about 4 s per GiB for a bomb) and refused as soon as it
passes the bound, so a 4 MB gzip bomb never takes many GB.
"""

from __future__ import annotations

import os
import re

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
    """Memory available to a new allocation now (MemAvailable on Linux), if the system says."""
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
