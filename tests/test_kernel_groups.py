"""Kernel statistics per group: equal to `cuda_gpu_kern_sum` when grouped by name, and to a
plain-Python computation over the attributed rows for any other grouping."""

from __future__ import annotations

import statistics

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.analysis.kernel_groups import STATS, group_stats
from kview.reports import cuda_gpu_kern_sum
from kview.trace import open_trace

from conftest import SAMPLES

TRACES = ["lm-small_ctx256_train_nsys.sqlite", "bert-2l_seq128_train_torch.json.gz"]


@pytest.mark.parametrize("name", TRACES)
def test_grouped_by_name_equals_the_kernel_summary_report(name):
    trace = open_trace(str(SAMPLES / name), use_cache=False)
    kernels = attribute(trace).filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    g = group_stats(kernels, "Kernel")
    rep = cuda_gpu_kern_sum(trace).frame
    assert g.select(*STATS, pl.col("Kernel").alias("Name")).equals(rep.select(*STATS, "Name"))


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("by", ["Category", "Direction", "Layer", "Op"])
def test_group_statistics_equal_a_plain_python_computation(name, by):
    rows = attribute(open_trace(str(SAMPLES / name), use_cache=False)).select(
        *dict.fromkeys([by, "Duration (ns)", "Category"])
    )
    durations: dict = {}
    categories: dict = {}
    for r in rows.iter_rows(named=True):
        key, d, cat = r[by], r["Duration (ns)"], r["Category"]
        durations.setdefault(key, []).append(d)
        categories.setdefault(key, []).append(cat)
    grand = sum(sum(v) for v in durations.values())
    g = group_stats(rows, by)
    # the report's order: total descending, then instances, then the key (None first)
    assert g[by].to_list() == sorted(
        durations, key=lambda k: (-sum(durations[k]), len(durations[k]), k is not None, k or "")
    )
    for r in g.iter_rows(named=True):
        v = durations[r[by]]
        assert r["Total Time (ns)"] == sum(v) and r["Instances"] == len(v)
        assert (r["Min (ns)"], r["Max (ns)"]) == (min(v), max(v))
        assert r["Med (ns)"] == pytest.approx(statistics.median(v))
        assert r["Avg (ns)"] == pytest.approx(statistics.mean(v), abs=0.051)
        assert r["StdDev (ns)"] == pytest.approx(statistics.stdev(v) if len(v) > 1 else 0, abs=0.051)
        assert r["Time (%)"] == pytest.approx(sum(v) * 100 / grand, abs=0.051)
        if by != "Category":  # the category with the most GPU time (ties: first by name)
            time = {}
            for c, d in zip(categories[r[by]], v):
                time[c] = time.get(c, 0) + d
            assert r["Category"] == min(c for c in time if time[c] == max(time.values()))
