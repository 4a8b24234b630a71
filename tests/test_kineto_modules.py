"""torch.profiler traces made with `with_modules=True` or `with_stack=True` carry the module
hierarchy as `python_function` events (`nn.Module: Qwen2Attention_3`): they are layer ranges, so
Layer names the modules on users' existing Hugging Face traces, without NVTX. Checked against a
plain loop over the JSON: the module events around each kernel's launch call, outer to inner.
They are layers, never phases: the phases are those of the trace without them."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.analysis.layers import layer_times, phase_times
from kview.reports.nvtx import nvtx_sum
from kview.trace import open_trace

from conftest import FIXTURES, KINETO, kineto_events

HF = ["traces__mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz", "traces__b200__eager_trace.json.gz"]
VLLM = "traces__inference__vllm_decode_full__graph_execution.json.gz"  # one module event (LogitsProcessor_0)
PREFIX = "nn.Module: "


def _ns(v) -> int:
    return int(v * 1000)  # kineto_events keeps floats as Decimal: exact


def module_truth(path):
    """For every kernel (start ns, correlation): the names of the module events enclosing its
    launch call on the launching thread, outer to inner; and every module event (name, start, end)."""
    mods: dict[tuple, list] = {}
    launch, kernels = {}, []
    for e in kineto_events(path, ("python_function", "cuda_runtime", "cuda_driver", "kernel")):
        if e.get("ph") != "X":
            continue
        cat, s = e["cat"].lower(), _ns(e["ts"])
        t = s + _ns(e.get("dur", 0))
        if cat == "python_function":
            if str(e.get("name", "")).startswith(PREFIX):
                mods.setdefault((e["pid"], e["tid"]), []).append((s, t, e["name"][len(PREFIX) :]))
        elif cat == "kernel":
            kernels.append((s, _ns(e.get("dur", 0)), (e.get("args") or {}).get("correlation")))
        elif "correlation" in (e.get("args") or {}):
            launch[e["args"]["correlation"]] = (e["pid"], e["tid"], s, t)
    chains = {}
    for s, dur, corr in kernels:
        chain = []
        if corr in launch:
            pid, tid, ls, lt = launch[corr]
            around = [m for m in mods.get((pid, tid), []) if m[0] <= ls and lt <= m[1]]
            chain = [m[2] for m in sorted(around, key=lambda m: (m[0], -m[1]))]
        chains[(s, corr)] = (chain, dur)
    return chains, [m for ms in mods.values() for m in ms]


@pytest.fixture(scope="module")
def qwen():
    return open_trace(KINETO / HF[0], use_cache=False)


@pytest.mark.parametrize("name", HF + [VLLM])
def test_layer_is_the_module_chain_around_each_kernel(name, qwen):
    chains, mods = module_truth(KINETO / name)
    names = {m[2] for m in mods}
    t = qwen if name == HF[0] else open_trace(KINETO / name, use_cache=False)
    a = attribute(t).filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    # Start counts from the trace's zero; the file's own clock is Start + origin
    got = {(s + t.origin, c): lay for s, c, lay in a.select("Start (ns)", "Correlation", "Layer").iter_rows()}
    assert got.keys() == chains.keys()
    # the module components of Layer are exactly the modules around the launch, outer to inner
    wrong = [(got[k], ch) for k, (ch, _) in chains.items() if [c for c in got[k].split(":") if c in names] != ch]
    assert not wrong, wrong[:5]
    inside = sum(1 for ch, _ in chains.values() if ch)
    if name in HF:
        assert inside > 700
        fwd = a.filter(pl.col("Direction") == "fprop")
        assert fwd.height >= inside and (fwd["Layer"] != "-").mean() >= 0.95
    else:
        assert inside == 1


def test_layers_are_the_outermost_repeated_modules(qwen):
    """`kview layers` picks the decoder layers (not the Linear_N inside them): one row per
    `Qwen2DecoderLayer_N` event, its GPU time the kernels launched inside it."""
    chains, mods = module_truth(KINETO / HF[0])
    decoder = sorted({m[2] for m in mods if m[2].startswith("Qwen2DecoderLayer_")}, key=lambda n: int(n.split("_")[-1]))
    lay = layer_times(qwen)
    assert lay["Layer"].to_list() == decoder and len(decoder) == 24
    per_layer = {n: 0 for n in decoder}
    for ch, dur in chains.values():
        for n in ch:
            if n in per_layer:
                per_layer[n] += dur
    assert dict(zip(lay["Layer"], lay["Forward (ns)"])) == per_layer
    assert (lay["Backward (ns)"] == 0).all()
    # sublayers by kind: each layer's attention is one column, not one column per instance
    attn = {n: 0 for n in decoder}
    for ch, dur in chains.values():
        for i, n in enumerate(ch[:-1]):
            if n in attn and ch[i + 1].startswith("Qwen2Attention_"):
                attn[n] += dur
    assert dict(zip(lay["Layer"], lay["Qwen2Attention (ns)"])) == attn
    # sublayer columns in the order the model first runs them, on every run (a pivot's order is not)
    first = {}
    for (start, _), (ch, _) in sorted(chains.items()):
        for i, n in enumerate(ch[:-1]):
            if n in per_layer:
                first.setdefault(ch[i + 1].rsplit("_", 1)[0], start)
    subs = [c for c in lay.columns if c not in ("Layer", "Forward (ns)", "Backward (ns)", "Total (ns)", "GPU ops")]
    assert (
        subs
        == [f"{k} (ns)" for k in sorted(first, key=first.get)]
        == ["Qwen2RMSNorm (ns)", "Qwen2Attention (ns)", "Qwen2MLP (ns)"]
    )


def test_module_ranges_are_never_phases(qwen, tmp_path):
    """The phases (and their GPU times) are those of the same trace with its python_function
    events removed; the NVTX summary lists the module calls under their own domain."""
    doc = json.loads(gzip.decompress((KINETO / HF[0]).read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "python_function"]
    bare = tmp_path / "no_modules.json"
    bare.write_text(json.dumps(doc))
    assert phase_times(qwen).equals(phase_times(open_trace(bare, use_cache=False)))
    assert phase_times(qwen)["Phase"].to_list() == ["ProfilerStep#6"]
    _, mods = module_truth(KINETO / HF[0])
    s = nvtx_sum(qwen).frame
    mod_rows = s.filter(pl.col("Range").str.starts_with("nn.Module:"))
    assert mod_rows["Instances"].sum() == len(mods)
    assert mod_rows.filter(pl.col("Range") == "nn.Module:Qwen2Model_0")["Total Time (ns)"].item() == next(
        m[1] - m[0] for m in mods if m[2] == "Qwen2Model_0"
    )


@pytest.mark.parametrize("rank", [0, 1])
def test_capture_json_reads_as_the_trace_capture_wrote(rank, tmp_path):
    """The raw torch.profiler JSON of a `kview capture --annotate` run (record_function ranges
    per module path, no python_function module events) reads as the SQLite trace kview wrote
    from it on the GPU machine: the same kernels, the same Layer and Direction."""
    d = FIXTURES / "capture"
    db = tmp_path / f"ddp_torch.rank{rank}.sqlite"
    with lzma.open(d / f"{db.name}.xz") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    js = open_trace(d / f"ddp_torch.rank{rank}.json.gz", use_cache=False)
    cols = ["Start (ns)", "Kernel", "Direction", "Layer", "Op"]
    a, b = attribute(js).select(cols), attribute(open_trace(db, use_cache=False)).select(cols)
    assert a.height == b.height > 500
    assert a.equals(b)
    paths = set(a.filter(pl.col("Direction").is_in(["fprop", "bprop"]))["Layer"].str.extract(r"(module\.[\w.]+)$"))
    assert {f"module.encoder.layers.{i}.self_attn" for i in (0, 1)} | {"module.embed", "module.head"} <= paths
