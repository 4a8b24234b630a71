"""Traces that `kview capture -- COMMAND` made on the GPU machine (tests/fixtures/capture/README.md):
models nobody in this project wrote, captured with --annotate under both backends, have a module
path as Layer on >= 95% of forward kernels and the forward op's module on >= 95% of backward
kernels, counted independently (tests/layer_truth.py), and kview's Layer equals that count."""

from __future__ import annotations

import lzma
import re
import shutil
import sqlite3

import polars as pl
import pytest

from kview.analysis.attribution import attribute
from kview.trace import open_trace

from conftest import ROOT
from layer_truth import coverage, truth

FIXTURES = ROOT / "tests" / "fixtures" / "capture"
ACCEPTANCE = ["resnet50_nsys", "resnet50_torch", "llama_nsys", "llama_torch"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("gpu")
    out = {}
    for xz in sorted(FIXTURES.glob("*.sqlite.xz")):
        path = d / xz.name[: -len(".xz")]
        with lzma.open(xz) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out[path.name[: -len(".sqlite")]] = path
    return out


@pytest.mark.parametrize("name", ACCEPTANCE)
def test_module_paths_cover_forward_and_backward_kernels(traces, name):
    c = coverage(traces[name])
    assert c["fprop"] > 500 and c["bprop"] > 800
    assert c["fprop_with_module"] >= 0.95 and c["bprop_with_module"] >= 0.95, c


@pytest.mark.parametrize("name", ACCEPTANCE)
def test_kview_layer_equals_the_independent_count(traces, name):
    a = attribute(open_trace(traces[name], use_cache=False)).filter(~pl.col("Kernel").str.starts_with("[CUDA mem"))
    t = truth(traces[name])
    assert len(t) == a.height
    assert [x[1] for x in t] == a["Direction"].to_list()
    pairs = [(x[2] or "-", lay) for x, lay in zip(t, a["Layer"]) if x[1] in ("fprop", "bprop")]
    assert sum(x == y for x, y in pairs) == len(pairs), [p for p in pairs if p[0] != p[1]][:5]


def test_layer_names_the_module_once(traces):
    a = attribute(open_trace(traces["llama_nsys"], use_cache=False))
    layers = a["Layer"].unique().to_list()
    assert "LlamaForCausalLM:model.layers.3.self_attn.q_proj" in layers  # not ...:model:model.layers.3:...
    for lay in layers:
        parts = lay.split(":")
        assert not any(b.startswith(a_ + ".") for a_, b in zip(parts, parts[1:])), lay
    q = a.filter(pl.col("Layer") == "LlamaForCausalLM:model.layers.3.self_attn.q_proj")
    assert set(q["Direction"]) == {"fprop", "bprop"} and set(q["Op"]) == {"linear"}
    r = attribute(open_trace(traces["resnet50_torch"], use_cache=False))
    conv = r.filter(pl.col("Layer") == "ResNet:layer4.2.conv3")
    assert set(conv["Op"]) == {"conv2d"} and set(conv["Direction"]) == {"fprop", "bprop"}


@pytest.mark.parametrize("model", ["resnet50", "llama"])
def test_both_backends_see_the_same_kernels_and_steps(traces, model):
    a, b = open_trace(traces[f"{model}_nsys"], use_cache=False), open_trace(traces[f"{model}_torch"], use_cache=False)
    assert a.columns("kernels", ["start"]).height == b.columns("kernels", ["start"]).height

    def steps(p):
        con = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        return [
            r[0]
            for r in con.execute(
                "SELECT coalesce(text, (SELECT value FROM StringIds WHERE id = textId)) t "
                "FROM NVTX_EVENTS WHERE t LIKE 'step_%' ORDER BY start"
            )
        ]

    assert (
        steps(traces[f"{model}_nsys"])
        == steps(traces[f"{model}_torch"])
        == (["step_4", "step_5"] if model == "resnet50" else ["step_3", "step_4"])
    )


def test_ddp_traces_one_per_rank_and_one_for_both(traces):
    for backend in ("nsys", "torch"):
        for rank in (0, 1):
            t = open_trace(traces[f"ddp_{backend}.rank{rank}"], use_cache=False)
            k = t.columns("kernels", ["device"])
            assert k.height == 542 and k["device"].unique().to_list() == [rank]
            steps = (
                sqlite3.connect(f"file:{traces[f'ddp_{backend}.rank{rank}']}?mode=ro", uri=True)
                .execute("SELECT text FROM NVTX_EVENTS WHERE text GLOB 'step_[0-9]*' ORDER BY start")
                .fetchall()
            )
            assert [r[0] for r in steps] == ["step_2", "step_3", "step_4"]
    con = sqlite3.connect(f"file:{traces['ddp_nsys_1file']}?mode=ro", uri=True)
    assert con.execute(
        "SELECT count(DISTINCT deviceId), count(DISTINCT globalPid) FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ).fetchone() == (2, 2)
    assert con.execute("SELECT count(*) FROM NVTX_EVENTS WHERE text GLOB 'step_[0-9]*'").fetchone()[0] == 10


@pytest.mark.parametrize(
    ("name", "family", "count", "sublayers"),
    [
        ("llama_nsys", r"model\.layers\.\d+", 8, {"input_layernorm", "self_attn", "post_attention_layernorm", "mlp"}),
        ("resnet50_torch", r"layer\d+", 4, {"[0]", "[1]", "[2]", "[3]"}),
    ],
)
def test_layers_of_module_hook_names_equal_the_independent_count(traces, name, family, count, sublayers):
    """Module hooks name ranges by qualified name (`model.layers.3.mlp`, `layer4.2.conv3`): the
    layers are the outermost numbered family of the module tree (Hugging Face's decoder layers,
    torchvision's ResNet stages), each kernel counted in the layer holding its module, with the
    same per-layer time in `kview layers` and `compare --by layer`."""
    from kview.analysis.compare import Window, side_by_side
    from kview.analysis.layers import layer_times

    con = sqlite3.connect(f"file:{traces[name]}?mode=ro", uri=True)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ops = []  # kernels, copies and memsets: a layer's GPU time counts every op it launched
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table not in tables:
            continue
        durations = [
            r[0]
            for r in con.execute(
                f"SELECT k.end - k.start FROM {table} k JOIN "
                "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId ORDER BY k.start"
            )
        ]
        t = truth(traces[name], table)
        assert len(t) == len(durations)
        ops += [(x[1], x[2], d) for x, d in zip(t, durations)]
    expected: dict[str, list[int]] = {}
    for direction, layer, dur in ops:
        if direction not in ("fprop", "bprop") or layer is None:
            continue
        # the module holding it: a prefix of one of its path's qualified names, ending at a dot
        holders = [
            ".".join(c.split(".")[: i + 1])
            for c in layer.split(":")
            for i in range(c.count(".") + 1)
            if re.fullmatch(family, ".".join(c.split(".")[: i + 1]))
        ]
        if holders:
            row = expected.setdefault(holders[0], [0, 0])
            row[direction == "bprop"] += dur
    trace = open_trace(traces[name], use_cache=False)
    got = layer_times(trace)
    assert got["Layer"].to_list() == sorted(expected, key=lambda n: [int(x) for x in re.findall(r"\d+", n)])
    assert len(expected) == count
    assert {r["Layer"]: [r["Forward (ns)"], r["Backward (ns)"]] for r in got.iter_rows(named=True)} == expected
    assert {c.removesuffix(" (ns)") for c in got.columns[5:]} == sublayers
    sub = got.select(pl.sum_horizontal(got.columns[5:]))
    assert (sub.to_series() <= got["Total (ns)"]).all() and sub.to_series().sum() > 0.9 * got["Total (ns)"].sum()
    by_layer = side_by_side([Window(trace, "t")], by="layer")
    per = dict(by_layer.select(by_layer.columns[0], "t").iter_rows())
    assert all(per[k] == v[0] + v[1] for k, v in expected.items())
