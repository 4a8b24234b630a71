"""The shared filter language, and the layer / phase reports, on real captures."""

from __future__ import annotations

import polars as pl
import pytest

from kview.analysis import filters
from kview.analysis.attribution import attribute
from kview.analysis.layers import layer_times, phase_times
from kview.trace import open_trace

from conftest import SAMPLES
from in_process import kview_here

LM = SAMPLES / "lm-small_ctx256_train_nsys.sqlite"
BERT = SAMPLES / "bert-2l_seq128_train_nsys.sqlite"


@pytest.fixture(scope="module")
def lm():
    return open_trace(LM, use_cache=False)


def test_filter_terms_select_what_they_say(lm):
    a = attribute(lm)
    g = filters.apply(a, "gemm")
    assert g.height and g["Kernel"].str.to_lowercase().str.contains("gemm").all()
    b = filters.apply(a, "dir:bprop cat:gemm layer:layer_3")
    assert b.height and set(b["Direction"]) == {"bprop"} and b["Layer"].str.contains("layer_3").all()
    long = filters.apply(a, "dur>50us")
    assert long.height and (long["Duration (ns)"] > 50_000).all()
    assert filters.apply(a, "dur<=2ms").height + filters.apply(a, "-dur<=2ms").height == a.height
    assert filters.apply(a, "-cat:memset")["Category"].ne("memset").all()
    assert (
        filters.apply(a, "grid>1024")["Grid"]
        .str.split("x")
        .list.eval(pl.element().cast(pl.Int64))
        .list.eval(pl.element().product())
        .list.first()
        > 1024
    ).all()
    assert filters.apply(a, 'range:"computing softmax" dir:fprop')["Op"].unique().to_list()
    assert filters.apply(a, "stream:7").height == a.filter(pl.col("Stream") == 7).height


def test_terms_typed_with_spaces_read_as_one(lm):
    """`dur > 1ms` is dur>1ms (it matched nothing: three kernel-name words), so are `dur >1ms`,
    `dur> 1ms` and `layer: layer_3`; a name word next to them stays a name word."""
    a = attribute(lm)
    want = a.filter(pl.col("Duration (ns)") > 100_000).height
    assert want > 0
    for text in ("dur > 100us", "dur >100us", "dur> 100us", "dur>100us"):
        assert filters.apply(a, text).height == want, text
    assert filters.apply(a, "-dur > 100us").height == a.height - want
    assert filters.apply(a, "layer: layer_3 gemm").equals(filters.apply(a, "layer:layer_3 gemm"))
    assert filters.apply(a, "gemm dur >= 50us").equals(filters.apply(a, "gemm dur>=50us"))


@pytest.mark.parametrize(
    "bad,msg",
    [
        ("dur>5parsecs", "unknown unit"),
        ("colour:red", "unknown field"),
        ("kernel:(", "bad regular expression"),
        ("stream:x", "takes a number"),
        ('layer:"unterminated', "cannot read filter"),
        ("dir:", "needs a value"),
    ],
)
def test_malformed_filters_give_a_clear_message(bad, msg):
    with pytest.raises(filters.FilterError, match=msg):
        filters.parse(bad)


def test_cli_filter_error_is_one_line_exit_2():
    r = kview_here("kernels", str(LM), "--filter", "dur>5parsecs")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1 and "unknown unit" in r.stderr


def test_lm_layers_and_phases(lm):
    layers = layer_times(lm)
    assert layers["Layer"].to_list() == [f"layer_{i}" for i in range(12)]
    assert (layers["Backward (ns)"] > layers["Forward (ns)"]).all()
    assert (layers["attention_sublayer (ns)"] + layers["ffn_sublayer (ns)"] == layers["Total (ns)"]).all()
    a = attribute(lm)
    l3 = a.filter(pl.col("Layer").str.contains(r"(^|:)layer_3(:|$)"))
    assert (
        layers.filter(pl.col("Layer") == "layer_3")["Total (ns)"][0]
        == l3.filter(pl.col("Direction").is_in(["fprop", "bprop"]))["Duration (ns)"].sum()
    )
    ph = phase_times(lm)
    assert ph["Phase"].to_list() == ["forward_pass", "backward_pass", "optimizer_step"]
    # autograd-thread kernels count in backward_pass: every kernel of the step is in some phase
    assert (
        ph["GPU ops"].sum()
        == a.filter(~pl.col("Kernel").str.starts_with("[CUDA mem")).height
        + a.filter(pl.col("Kernel").str.starts_with("[CUDA mem")).height
    )
    dirs = dict(a.group_by("Direction").agg(pl.col("Duration (ns)").sum()).iter_rows())
    assert ph.filter(pl.col("Phase") == "optimizer_step")["GPU Time (ns)"][0] == dirs["optim"]


def test_bert_layers_split_by_sublayer():
    layers = layer_times(open_trace(BERT, use_cache=False))
    assert layers["Layer"].to_list() == ["Enc_0", "Enc_1"]
    assert {"Attn (ns)", "FFN (ns)"} <= set(layers.columns)
