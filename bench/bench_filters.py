"""Filter cost against the number of terms (it must grow linearly): parse and apply N terms
(negated kernel-name regexes that match nothing) to the attributed table of a trace.

    python bench/bench_filters.py sample_traces/lm-small_ctx256_train_nsys.sqlite
"""

from __future__ import annotations

import statistics
import sys
import time


def main() -> None:
    from kview.analysis import filters
    from kview.analysis.attribution import attribute
    from kview.trace import open_trace

    a = attribute(open_trace(sys.argv[1], use_cache=False))
    print(f"attributed table: {a.height:,} rows")
    for n in (1, 10, 100, 1000, 2000, 4000):
        expr = " ".join(f"-kernel:nomatch_{i}\\d+" for i in range(n))
        times = []
        for _ in range(3):
            t = time.perf_counter()
            rows = filters.apply(a, expr).height
            times.append(time.perf_counter() - t)
        med = statistics.median(times)
        print(f"{n:>5} terms: {med * 1000:8.1f} ms ({med / n * 1e6:6.1f} us per term), {rows:,} rows")


if __name__ == "__main__":
    main()
