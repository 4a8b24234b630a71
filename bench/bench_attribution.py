"""Benchmark the attributed kernel table and filter latency on a (tiled) trace.

Cold build in a fresh process (wall time of the build itself and whole-process peak RSS),
then the median of 5 applications of each filter on the built table.

    python bench/bench_attribution.py /tmp/bench/tiled440.sqlite
"""

from __future__ import annotations

import resource
import statistics
import sys
import time


def main() -> None:
    path = sys.argv[1]
    t0 = time.perf_counter()
    from kview.analysis import filters
    from kview.analysis.attribution import attribute
    from kview.trace import open_trace

    a = attribute(open_trace(path, use_cache=False))
    build = time.perf_counter() - t0
    print(f"attributed table: {a.height:,} rows in {build:.2f} s (imports included)")
    for expr in (
        "gemm",
        "dir:bprop layer:layer_3",
        "dur>50us -cat:elementwise",
        "range:softmax op:matmul",
        "kernel:elementwise grid>1024",
    ):
        times = []
        for _ in range(5):
            t = time.perf_counter()
            n = filters.apply(a, expr).height
            times.append((time.perf_counter() - t) * 1000)
        print(f"filter {expr!r:34s} {n:>9,} rows  median {statistics.median(times):6.1f} ms")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
