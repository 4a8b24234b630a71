"""torch.profiler traces of every era, from other projects' test data: counts and totals equal
a plain count over the file, timestamps are exact to the nanosecond, and files that are not
torch.profiler traces are named in one line."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from decimal import Decimal

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.errors import TraceError
from kview.io import kineto_reader as kr
from kview.reports import REPORTS
from kview.trace import open_trace, validate

from conftest import KINETO, KINETO_TRACES, MTIA, kineto_events, nightly_for
from in_process import kview_here

READABLE = [p for p in KINETO_TRACES if not p.name.startswith("rocprof")]


def _ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


def _plain_kernel_summary(path):
    """Kernels as the file lists them: category `kernel` in any capitalisation, ts/dur in µs;
    and the first complete event's start, of any category (one pass over the file)."""
    per = defaultdict(list)
    starts = []
    first = None
    for e in kineto_events(path):
        if e.get("ph") != "X":
            continue
        if "ts" in e:
            first = _ns(e["ts"]) if first is None else min(first, _ns(e["ts"]))
        if str(e.get("cat", "")).lower() == "kernel":
            per[e["name"]].append(_ns(e.get("dur", 0)))
            starts.append(_ns(e["ts"]))
    return {n: (len(d), sum(d), min(d), max(d)) for n, d in per.items()}, sorted(starts), first or 0


@pytest.mark.parametrize("path", nightly_for(READABLE, {MTIA}), ids=lambda p: p.name.split(".")[0])
def test_kernel_counts_totals_and_starts_equal_a_plain_count_over_the_file(path):
    t = open_trace(path, use_cache=False)
    want, starts, first_event = _plain_kernel_summary(path)
    rep = REPORTS["cuda_gpu_kern_sum"](t)
    got = {
        r["Name"]: (r["Instances"], r["Total Time (ns)"], r["Min (ns)"], r["Max (ns)"])
        for r in rep.frame.iter_rows(named=True)
    }
    assert got == want
    a = attribute(t)
    kernels = a.filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    assert kernels.height == sum(c for c, *_ in want.values())
    # exact: no float of epoch microseconds; counted from the trace's first event
    assert sorted((kernels["Start (ns)"] + t.origin).to_list()) == starts
    assert t.origin >= first_event and (not starts or t.origin <= starts[0])


def test_pytorch_1_8_capitalised_categories_keep_kernels_runtime_copies_and_ranges():
    path = KINETO / "resnet50_nw0_2021.pt.trace.json.gz"
    n = {"runtime": 0, "memcpy": 0, "memset": 0}
    for e in kineto_events(path, tuple(n)):
        n[e["cat"].lower()] += e.get("ph") == "X"
    t = open_trace(path, use_cache=False)
    api = REPORTS["cuda_api_sum"](t).frame
    assert api["Num Calls"].sum() == n["runtime"] > 10_000
    mem = REPORTS["cuda_gpu_mem_time_sum"](t).frame
    assert mem["Count"].sum() == n["memcpy"] + n["memset"] == 324
    steps = REPORTS["nvtx_sum"](t).frame.filter(pl.col("Range").str.contains("ProfilerStep#"))
    assert sorted(steps["Range"].to_list()) == sorted(f":ProfilerStep#{i}" for i in range(5, 11))
    a = attribute(t)
    # kernels launched by an aten op carry it (old traces quote thread ids: "25738")
    assert (a["Op"] != "-").sum() > 0.9 * a.height


def test_legacy_bare_array_opens_in_the_cli_and_the_tui_check_alike(tmp_path):
    path = KINETO / "resnet50_plugin_oldest.pt.trace.json.gz"
    validate(path)  # what `kview TRACE` checks before the TUI starts
    assert REPORTS["cuda_gpu_kern_sum"](open_trace(path, use_cache=False)).frame["Instances"].sum() == 9538
    # the format lets a bare array end without its closing bracket
    text = gzip.decompress(path.read_bytes()).decode().rstrip().removesuffix("]")
    cut = tmp_path / "unclosed.json"
    cut.write_text(text)
    validate(cut)
    assert REPORTS["cuda_gpu_kern_sum"](open_trace(cut, use_cache=False)).frame["Instances"].sum() == 9538


def test_events_without_args_or_dur_are_read(tmp_path):
    p = tmp_path / "bare.json"
    p.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25},
                    {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20},
                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 9, "dur": 3},
                ]
            }
        )
    )
    t = open_trace(p, use_cache=False)
    k = t.columns("kernels", ["start", "end", "stream"])
    assert t.origin == 9000  # the first event (aten::mm at 9 µs): the trace's zero
    assert k.rows() == [(1500, 3750, 7), (11000, 11000, 7)]
    assert REPORTS["nvtx_sum"](t).frame["Range"].to_list() == [":aten::mm"]


@pytest.mark.parametrize(
    "content,words",
    [
        (
            '{"rocprofiler-sdk-tool": [{"metadata": {}}]}',
            "is a rocprofv3 trace (rocprofiler-sdk JSON): not supported yet",
        ),
        (
            '{"schema": "1.0.3-chakra.0.0.4", "pid": 1, "time": "x", "start_ts": 1, "nodes": [{"id": 1}]}',
            "is a PyTorch execution trace",
        ),
        ('{"foo": 1}', "is JSON but not a torch.profiler trace (no traceEvents list)"),
    ],
)
def test_other_json_is_named_in_one_line_by_cli_and_tui_check(tmp_path, content, words):
    p = tmp_path / "x.json"
    p.write_text(content)
    with pytest.raises(TraceError, match=words.replace("(", r"\(").replace(")", r"\)")):
        validate(p)
    with pytest.raises(TraceError, match=words.replace("(", r"\(").replace(")", r"\)")):
        open_trace(p, use_cache=False)
    r = kview_here("stats", str(p))
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and words in r.stderr


def test_the_public_rocprof_file_is_refused_with_its_name():
    p = KINETO / "rocprof__908_results.json.gz"
    r = kview_here("kernels", str(p))
    assert (
        r.returncode == 2
        and r.stderr == f"kview: {p}: is a rocprofv3 trace (rocprofiler-sdk JSON): not supported yet\n"
    )


def test_events_and_args_read_the_fields_their_tables_name():
    """Event and Args assign their fields one by one (a loop over the tables costs more than the
    rest of an event's reading); EVENT_FIELDS and ARG_FIELDS, which the fast decoder's types are
    made from, say the same: every attribute from its key, its value where the key is absent."""
    for cls, fields, extra in ((kr.Event, kr.EVENT_FIELDS, {"args"}), (kr.Args, kr.ARG_FIELDS, set())):
        assert set(cls.__slots__) == {attr for attr, _, _ in fields} | extra
        values = {key: object() for _, key, _ in fields}
        given, empty = cls(values), cls({})
        for attr, key, absent in fields:
            assert getattr(given, attr) is values[key], attr
            assert getattr(empty, attr) == absent, attr
