"""Per-layer and per-phase GPU time, built on the attributed kernel table.

A layer is a repeated user range (layer_0..N, Enc_0..N, Embedding_0..25, ...): detected as the
numbered name family with the most members, or given by a pattern. Backward kernels count in
the layer of the forward op they differentiate (attribution's Layer). Phases are the top-level
user ranges (or, under a single step range such as profiled_step, its children); a kernel
counts in the phase open at its launch time, whichever thread launched it, so autograd-thread
work lands in backward_pass.
"""
from __future__ import annotations

import re

import polars as pl

from kview.errors import UsageError
from kview.analysis.filters import regex_problem

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute, launched_ops
from kview.trace import Trace

NUMBERED = re.compile(r"^(?P<prefix>.*?[A-Za-z_])(?P<index>\d+)$")


def detect_layer_pattern(trace: Trace) -> str | None:
    a = attribute(trace)
    comps = (a.select(pl.col("Layer").str.split(":").alias("c")).explode("c").unique()["c"].drop_nulls().to_list())
    families: dict[str, set[int]] = {}
    for c in comps:
        m = NUMBERED.match(c)
        if m:
            families.setdefault(m["prefix"], set()).add(int(m["index"]))
    families = {k: v for k, v in families.items() if len(v) >= 2}
    if not families:
        return None
    best = max(families, key=lambda k: (len(families[k]), k))
    return "^" + re.escape(best) + r"\d+$"


def layer_times(trace: Trace, pattern: str | None = None) -> pl.DataFrame:
    pattern = pattern or detect_layer_pattern(trace)
    schema = {"Layer": pl.String, "Forward (ns)": pl.Int64, "Backward (ns)": pl.Int64, "Total (ns)": pl.Int64,
              "Kernels": pl.UInt32}
    if pattern is None:
        return pl.DataFrame(schema=schema)
    why = regex_problem(pattern)  # by the engine that runs it (polars'), not Python's
    if why:
        raise UsageError(f"bad layer pattern {pattern!r}: {why}")
    a = attribute(trace).filter(pl.col("Direction").is_in(["fprop", "bprop"]))
    parts = a.select("Direction", "Duration (ns)", pl.col("Layer").str.split(":").alias("c"))
    # position of the first component that is a layer; the next one is the sublayer
    parts = parts.with_columns(
        pl.col("c").list.eval(pl.element().str.contains(pattern)).list.arg_max().alias("pos"),
        pl.col("c").list.eval(pl.element().str.contains(pattern)).list.any().alias("hit")).filter("hit")
    parts = parts.with_columns(pl.col("c").list.get(pl.col("pos")).alias("Layer"),
                               pl.col("c").list.get(pl.col("pos") + 1, null_on_oob=True).alias("Sublayer"))
    dur = pl.col("Duration (ns)")
    g = parts.group_by("Layer").agg(
        dur.filter(pl.col("Direction") == "fprop").sum().alias("Forward (ns)"),
        dur.filter(pl.col("Direction") == "bprop").sum().alias("Backward (ns)"),
        dur.sum().alias("Total (ns)"), pl.len().alias("Kernels"))
    subs = parts.filter(pl.col("Sublayer").is_not_null())
    if subs.height:
        top = subs.group_by("Sublayer").agg(dur.sum()).sort("Duration (ns)", descending=True)["Sublayer"].head(4)
        piv = (subs.filter(pl.col("Sublayer").is_in(top.implode())).group_by(["Layer", "Sublayer"]).agg(dur.sum())
               .pivot(on="Sublayer", index="Layer", values="Duration (ns)"))
        piv = piv.rename({c: f"{c} (ns)" for c in piv.columns if c != "Layer"})
        g = g.join(piv, on="Layer", how="left")
    idx = pl.col("Layer").str.extract(r"(\d+)$", 1).cast(pl.Int64)
    return g.with_columns(idx.alias("_i")).sort(["_i", "Layer"]).drop("_i")


def phase_ranges(trace: Trace) -> pl.DataFrame:
    """The phase ranges: top-level user ranges, or the children of a lone step-range family."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema={"id": pl.Int64, "start": pl.Int64, "end": pl.Int64, "Phase": pl.String})
    tree = nv.projection_tree(trace)
    users = tree.join(nv.labels(trace).filter(~pl.col("marker")).select("name_code", "label"),
                      on="name_code", how="inner")
    # parents among user ranges only (op markers are never phases)
    roots = users.filter(pl.col("parent").is_null() | ~pl.col("parent").is_in(users["id"].implode()))
    phases = roots
    if roots["label"].n_unique() == 1:
        kids = users.filter(pl.col("parent").is_in(roots["id"].implode()))
        if kids.height:
            phases = kids
    return phases.select("id", "start", "end", pl.col("label").alias("Phase")).sort("start")


def phase_times(trace: Trace) -> pl.DataFrame:
    """GPU time and op count per phase (computed once per trace: Overview, Compare and
    `kview phases` all ask for it)."""
    return trace.memo("phase_times", lambda: _phase_times(trace))


def _phase_times(trace: Trace) -> pl.DataFrame:
    phases = phase_ranges(trace)
    ops = launched_ops(trace)
    if ops.height == 0 or phases.height == 0:
        return pl.DataFrame(schema={"Phase": pl.String, "GPU Time (ns)": pl.Int64, "Kernels": pl.UInt32,
                                    "Share (%)": pl.Float64})
    ops = ops.filter(pl.col("r_start").is_not_null()).sort("r_start")
    j = ops.join_asof(phases.rename({"start": "p_start", "end": "p_end"}), left_on="r_start", right_on="p_start",
                      strategy="backward").filter(pl.col("r_start") <= pl.col("p_end"))
    g = j.group_by("Phase").agg((pl.col("end") - pl.col("start")).sum().alias("GPU Time (ns)"),
                                pl.len().alias("Kernels"), pl.col("p_start").min().alias("_first"))
    total = g["GPU Time (ns)"].sum()
    return g.sort("_first").drop("_first").with_columns(
        (pl.col("GPU Time (ns)") * 100.0 / total).round(1).alias("Share (%)"))
