"""torch.profiler (Kineto) JSON as a first-class input, checked against the JSON itself."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.reports import REPORTS
from kview.trace import JsonTrace, open_trace

from conftest import SAMPLES
from in_process import kview_here

JSONS = sorted(SAMPLES.glob("*_torch.json.gz"))


def _independent_kernel_summary(path):
    doc = json.loads(gzip.decompress(path.read_bytes()))
    per = defaultdict(list)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            start = round(e["ts"] * 1000)
            per[e["name"]].append(round(e["dur"] * 1000))
            assert round(e["dur"] * 1000) >= 0 and start > 0
    return {n: (len(d), sum(d), min(d), max(d)) for n, d in per.items()}


@pytest.mark.parametrize("path", JSONS, ids=lambda p: p.name)
def test_kernel_summary_matches_counts_and_totals_in_the_json(path):
    t = open_trace(path, use_cache=False)
    assert isinstance(t, JsonTrace)
    rep = REPORTS["cuda_gpu_kern_sum"](t).frame
    got = {
        r["Name"]: (r["Instances"], r["Total Time (ns)"], r["Min (ns)"], r["Max (ns)"])
        for r in rep.iter_rows(named=True)
    }
    assert got == _independent_kernel_summary(path)
    k = t.columns("kernels", ["start", "end"])
    assert (k["end"] >= k["start"]).all()


def test_json_and_its_nsys_schema_conversion_give_identical_reports():
    js = SAMPLES / "lm-small_ctx256_train_torch.json.gz"
    a, b = open_trace(js, use_cache=False), open_trace(SAMPLES / "lm-small_ctx256_train_torch.sqlite", use_cache=False)
    for name in ("cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "nvtx_gpu_proj_sum", "nvtx_kern_sum"):
        assert REPORTS[name](a).frame.equals(REPORTS[name](b).frame), name
    assert attribute(a).drop("Start (ns)").equals(attribute(b).drop("Start (ns)"))


def test_attribution_on_json_uses_sequence_numbers():
    a = attribute(open_trace(SAMPLES / "bert-2l_seq128_train_torch.json.gz", use_cache=False))
    q = a.filter((pl.col("Layer") == "Enc_1:Attn:SelfAttn:Q_Proj") & (pl.col("Category") == "gemm"))
    assert q["Direction"].to_list()[0] == "fprop" and "bprop" in q["Direction"].to_list()
    assert set(q["Params"]) == {"M=1024,N=(4,128),K=1024"}


@pytest.mark.parametrize(
    "cmd",
    [
        ["stats"],
        ["kernels", "--filter", "dir:bprop gemm"],
        ["layers"],
        ["phases"],
        ["compare", "--root", "profiled_step"],
        ["diff"],
    ],
)
def test_every_command_accepts_json(cmd, tmp_path):
    js = str(SAMPLES / "lm-small_ctx256_train_torch.json.gz")
    args = [cmd[0], js, *cmd[1:]]
    if cmd[0] in ("compare", "diff"):
        args = [cmd[0], js, str(SAMPLES / "lm-small_ctx256_forward_torch.json.gz"), *cmd[1:]]
    fmt = "json" if cmd[0] in ("stats", "diff") else "csv"  # several tables: one JSON document
    r = kview_here(*args, "-f", fmt, env={"XDG_CACHE_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("\n") > 3
