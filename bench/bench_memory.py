"""Time `kview memory` on a large allocator history: the LM small training history of
tests/fixtures/memory (18k events, Python frames on every allocation) repeated until it holds
N events (default 1,000,000: torch's default max_entries for _record_memory_history is 10x
less than that per device in kview capture), each copy shifted in time and address space.

    python bench/bench_memory.py [N]      # writes the snapshot to a temp folder, then times
                                          # `kview memory SNAPSHOT -f json` and the table format

Reports the snapshot's size, the wall time and peak RSS of each command (a child process).
"""

from __future__ import annotations

import lzma
import pickle
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "fixtures" / "memory" / "small_train_fp32.memory.pickle.xz"


def make(n: int, out: Path) -> int:
    data = pickle.loads(lzma.decompress(SOURCE.read_bytes()))
    events = data["device_traces"][0]
    span = events[-1]["time_us"] - events[0]["time_us"] + 1
    big = []
    k = 0
    while len(big) < n:
        for e in events:
            c = dict(e)
            c["time_us"] = e["time_us"] + k * span
            if e["action"] in ("alloc", "free_requested", "free_completed"):
                c["addr"] = e["addr"] + k * (1 << 40)  # each copy in its own address range
            big.append(c)
        k += 1
    data["device_traces"][0] = big[:n]
    data.pop("kview", None)
    with open(out, "wb") as f:
        pickle.dump(data, f, protocol=4)
    return len(data["device_traces"][0])


def timed(cmd: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return wall, rss


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        snap = Path(tmp) / "big.pickle"
        events = make(n, snap)
        print(f"snapshot: {events:,} events, {snap.stat().st_size / 2**20:,.0f} MiB")
        kview = [sys.executable, "-m", "kview.cli", "memory", str(snap), "--max-memory", "16G"]
        for fmt in (["-f", "json", "--table", "by-site"], ["--width", "120"]):
            wall, rss = timed(kview + fmt)
            print(f"kview memory {' '.join(fmt)}: {wall:.1f} s, children's peak RSS so far {rss:,.0f} MiB")


if __name__ == "__main__":
    main()
