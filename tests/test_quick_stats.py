"""The standard-library kernel summary (kview.quick_stats) prints exactly what the columnar report
prints, on every real trace it answers, and leaves the rest to it."""

from __future__ import annotations

import lzma
import random
import shutil
import sqlite3

import polars as pl
import pytest

from kview import quick_stats
from kview.analysis.sanity import warning
from kview.analysis.summary_stats import sqlite_round
from kview.output import render
from kview.reports import REPORTS
from kview.trace import open_trace

from conftest import FIXTURES, LM_TRACES, PUBLIC_TRACES, SAMPLES, TORCH_TRACES

# the quick path answers only while the cache holds none of a trace's kernel columns: an empty one each
pytestmark = pytest.mark.own_cache

CAPTURES = ["resnet50_nsys", "llama_nsys", "llama_ddp_nsys_1file"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list:
    folder = tmp_path_factory.mktemp("quick")
    out = list(LM_TRACES) + list(TORCH_TRACES) + list(PUBLIC_TRACES)
    for stem in CAPTURES:
        with lzma.open(FIXTURES / "capture" / f"{stem}.sqlite.xz") as src, open(folder / f"{stem}.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst)
        out.append(folder / f"{stem}.sqlite")
    return out


def _columnar(path, fmt: str, width: int) -> str:
    trace = open_trace(path, use_cache=False)
    r = REPORTS["cuda_gpu_kern_sum"](trace)
    assert warning(trace) is None  # the columnar path would say more on stderr
    if fmt == "table":
        return f"** {r.title} ({r.name}):\n\n" + render.render(r.frame, "table", r.decimals, width)
    return render.render(r.frame, fmt, r.decimals)


@pytest.mark.parametrize("quick_rows", [quick_stats.QUICK_ROWS, 0], ids=["small", "large"])
def test_quick_summary_equals_the_columnar_report(traces, quick_rows, monkeypatch):
    # large: every trace is read as a large one is (connectorx into polars, grouped there)
    monkeypatch.setattr(quick_stats, "QUICK_ROWS", quick_rows)
    answered = []
    for path in traces:
        for fmt, width in (("csv", 0), ("table", 0), ("table", 100), ("table", 60)):
            doc = quick_stats.document(path, fmt, width)
            if doc is None:
                continue
            answered.append(path.name)
            assert doc == _columnar(path, fmt, width), (path.name, fmt, width)
    # every nsys export here is answered (the torch captures count from their first event: left out)
    assert set(answered) >= {p.name for p in LM_TRACES} | {f"{s}.sqlite" for s in CAPTURES}
    assert not set(answered) & {p.name for p in TORCH_TRACES}


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_quick_summary_leaves_cached_damaged_and_impossible_traces(tmp_path, monkeypatch, large):
    src = SAMPLES / "lm-small_ctx256_forward_nsys.sqlite"
    small = quick_stats.document(src, "csv", use_cache=True)
    assert small is not None
    if large:  # 736 kernels read as a large trace's; once its kernel columns are cached, the columnar path's
        monkeypatch.setattr(quick_stats, "QUICK_ROWS", 10)
        assert quick_stats.document(src, "csv", use_cache=True) == small
        open_trace(src).columns("kernels", ["start", "end", "name_id"])  # cached as `kview stats` caches them
        assert quick_stats.document(src, "csv", use_cache=True) is None
        assert quick_stats.document(src, "csv") == small  # --no-cache
    for i, damage in enumerate(
        [
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1 WHERE rowid = 3",  # ends before it starts
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid = 3",  # text for a time
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = -5 WHERE rowid = 3",  # a name never recorded
            "UPDATE ANALYSIS_DETAILS SET duration = 10",  # outside the recorded session
            "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL",  # no rows
        ]
    ):
        bad = tmp_path / f"bad{i}.sqlite"
        shutil.copy(src, bad)
        with sqlite3.connect(bad) as con:
            con.execute(damage)
        con.close()
        assert quick_stats.document(bad, "csv") is None, damage
    assert quick_stats.document(tmp_path / "missing.sqlite", "csv") is None


def test_scalar_round_equals_the_vectorized_one():
    rng = random.Random(28)
    values = [rng.uniform(-1e6, 1e6) for _ in range(2000)]
    values += [k / 20 for k in range(-400, 400)]  # ties at every x.x5 and their neighbours
    values += [k / 10 + 0.05 for k in range(-200, 200)] + [0.15, 2.675, 1e14 + 0.25, 0.0, float("nan")]
    want = sqlite_round(pl.DataFrame({"x": values}), ["x"])["x"].to_list()
    got = [quick_stats.sqlite_round(v) for v in values]
    assert [repr(v) for v in got] == [repr(v) for v in want]
