"""Per-layer and per-phase GPU time, built on the attributed kernel table.

A layer is a repeated user range (layer_0..N, Enc_0..N, Embedding_0..25, ...): detected as the
numbered name family with the most members, or given by a pattern. Backward kernels count in
the layer of the forward op they differentiate (attribution's Layer). Phases are the top-level
user ranges (or, under one family of step ranges such as profiled_step or ProfilerStep#N,
their children); a GPU op counts in every phase open at its launch time, whichever thread
launched it, so autograd-thread work lands in backward_pass.
"""

from __future__ import annotations

import re

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.attribution import attribute
from kview.analysis.filters import regex_problem
from kview.derived import derived
from kview.errors import UsageError
from kview.trace import Trace

NUMBERED = re.compile(r"^(?P<prefix>.*?[A-Za-z_])(?P<index>\d+)$")


def detect_layer_pattern(trace: Trace) -> str | None:
    """The outermost numbered family that repeats: the family with at least two members at the
    shallowest position of the Layer paths, the largest such family on a tie. Outermost, so a
    torch.profiler trace's `Qwen2DecoderLayer_N` wins over the `Linear_N` inside each of them."""
    a = attribute(trace)
    comps = (
        a.select(pl.col("Layer").str.split(":").alias("c"))
        .unique()
        .with_columns(pl.int_ranges(pl.col("c").list.len()).alias("pos"))
        .explode("c", "pos")
        .unique()
        .drop_nulls()
    )
    families: dict[tuple[int, str], set[int]] = {}
    for c, pos in comps.iter_rows():  # one row per distinct (component, position)
        m = NUMBERED.match(c)
        if m:
            families.setdefault((pos, m["prefix"]), set()).add(int(m["index"]))
    families = {k: v for k, v in families.items() if len(v) >= 2}
    if not families:
        return None
    best = min(families, key=lambda k: (k[0], -len(families[k]), k[1]))
    return "^" + re.escape(best[1]) + r"\d+$"


def layer_times(trace: Trace, pattern: str | None = None) -> pl.DataFrame:
    pattern = pattern or detect_layer_pattern(trace)
    schema = {
        "Layer": pl.String,
        "Forward (ns)": pl.Int64,
        "Backward (ns)": pl.Int64,
        "Total (ns)": pl.Int64,
        "Kernels": pl.UInt32,
    }
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
        pl.col("c").list.eval(pl.element().str.contains(pattern)).list.any().alias("hit"),
    ).filter("hit")
    parts = parts.with_columns(
        pl.col("c").list.get(pl.col("pos")).alias("Layer"),
        pl.col("c").list.get(pl.col("pos") + 1, null_on_oob=True).alias("Sublayer"),
    )
    dur = pl.col("Duration (ns)")
    g = parts.group_by("Layer").agg(
        dur.filter(pl.col("Direction") == "fprop").sum().alias("Forward (ns)"),
        dur.filter(pl.col("Direction") == "bprop").sum().alias("Backward (ns)"),
        dur.sum().alias("Total (ns)"),
        pl.len().alias("Kernels"),
    )
    subs = _sublayer_kinds(parts.filter(pl.col("Sublayer").is_not_null()))
    if subs.height:
        # the four largest, in the model's order (where each first ran), the same on every run
        first = subs.with_row_index("_r").group_by("Sublayer").agg(dur.sum(), pl.col("_r").min())
        top = first.sort(["Duration (ns)", "_r"], descending=[True, False]).head(4).sort("_r")["Sublayer"]
        piv = (
            subs.filter(pl.col("Sublayer").is_in(top.implode()))
            .group_by(["Layer", "Sublayer"])
            .agg(dur.sum())
            .pivot(on="Sublayer", index="Layer", values="Duration (ns)")
        )
        piv = piv.select("Layer", *[c for c in top.to_list() if c in piv.columns])
        piv = piv.rename({c: f"{c} (ns)" for c in piv.columns if c != "Layer"})
        g = g.join(piv, on="Layer", how="left")
    idx = pl.col("Layer").str.extract(r"(\d+)$", 1).cast(pl.Int64)
    return g.with_columns(idx.alias("_i")).sort(["_i", "Layer"]).drop("_i")


def _sublayer_kinds(subs: pl.DataFrame) -> pl.DataFrame:
    """Sublayers named per instance (torch.profiler's `Qwen2Attention_3` inside
    `Qwen2DecoderLayer_3`: every name in one layer only) are counted by kind, the name without
    its index, so each layer's attention lands in one column; names that recur in several
    layers (`attention_sublayer`, `conv1`) stay as they are."""
    if subs.height == 0:
        return subs
    kind = pl.col("Sublayer").str.extract(NUMBERED.pattern, 1).str.strip_chars_end("_")
    per_name = subs.group_by("Sublayer").agg(pl.col("Layer").n_unique().alias("_layers"))
    names = per_name.with_columns(kind.alias("_kind")).with_columns(
        (
            (pl.col("_layers") == 1).all().over("_kind") & (pl.len().over("_kind") >= 2) & pl.col("_kind").is_not_null()
        ).alias("_by_kind")
    )
    names = names.select(
        "Sublayer", pl.when("_by_kind").then(pl.col("_kind")).otherwise(pl.col("Sublayer")).alias("_name")
    )
    return (
        subs.join(names, on="Sublayer", how="left", maintain_order="left")
        .with_columns(pl.col("_name").alias("Sublayer"))
        .drop("_name")
    )


STEP_FAMILY = r"(#\d+|_\d+|\d+)$"  # ProfilerStep#5, step_3, iter12: one family of step ranges


@derived
def user_range_tree(trace: Trace) -> pl.DataFrame:
    """Push/pop user ranges (op markers, library ranges such as NCCL's and the module calls of a
    torch.profiler trace left out) with their nesting among user ranges only (a marker in between
    never hides the top): id, start, end, global_tid, label, depth, parent. Phases and iterations
    both start from its roots."""
    schema = {"id": pl.Int64, "start": pl.Int64, "end": pl.Int64, "global_tid": pl.Int64, "label": pl.String}
    if not trace.has("NVTX_EVENTS"):
        return nv.nest(pl.DataFrame(schema=schema))
    users = (
        nv.labels(trace).filter(~pl.col("marker") & ~pl.col("library") & ~pl.col("module")).select("name_code", "label")
    )
    r = (
        nv.projection_ranges(trace)
        .filter(pl.col("style") == "PushPop")
        .join(users, on="name_code", how="inner")
        .select("id", "start", "end", "global_tid", "label")
    )
    return nv.nest(r)


@derived
def phase_labels(trace: Trace) -> list[str]:
    """The phase names, in order of first appearance: the user ranges at the top of their
    thread's user-range nesting (op markers, library ranges such as NCCL's and the module calls
    of a torch.profiler trace never count);
    when those are all one step family (profiled_step, ProfilerStep#N) and the user ranges
    one level down fill at least half of the steps, those (forward_pass, backward_pass, ...)."""
    tree = user_range_tree(trace)
    if tree.height == 0:
        return []
    roots = tree.filter(pl.col("depth") == 0)
    phases = roots
    if roots["label"].str.replace(STEP_FAMILY, "").n_unique() == 1:
        kids = tree.filter(pl.col("parent").is_in(roots["id"].implode()))
        span = (pl.col("end") - pl.col("start")).sum()
        # the steps' parts, when they make up the step (forward/backward/optimizer), not a
        # sliver of it (one compiled-graph call inside a serving step)
        if kids.height and kids.select(span).item() * 2 >= roots.select(span).item():
            phases = kids
    return phases.group_by("label").agg(pl.col("start").min()).sort(["start", "label"])["label"].to_list()


PHASE_SCHEMA = pl.Schema(
    {
        "Phase": pl.String,
        "GPU Time (ns)": pl.Int64,
        "Kernels": pl.Int64,
        "Share (%)": pl.Float64,
        "CPU Time (ns)": pl.Int64,
    }
)


@derived
def phase_times(trace: Trace) -> pl.DataFrame:
    """Per phase: the GPU time and op count of the work launched while it was open (any thread),
    its share of all GPU time, and its CPU time (how long it was open). The same numbers
    `kview compare` gives for these ranges (one function computes both). Computed once per
    trace: Overview, diff and `kview phases` all ask for it."""
    from kview.analysis.compare import user_ranges
    from kview.analysis.gpu_time import launch_timeline, range_times

    names = phase_labels(trace)
    if not names:
        return pl.DataFrame(schema=PHASE_SCHEMA)
    t = range_times(trace, user_ranges(trace).filter(pl.col("label").is_in(names)))
    total = int(launch_timeline(trace)["dur"].sum() or 0)
    order = pl.DataFrame({"label": names}).with_row_index("_o")
    share = (pl.col("gpu") * 100.0 / total).round(1) if total else pl.lit(None, dtype=pl.Float64)
    return (
        t.join(order, on="label")
        .sort("_o")
        .select(
            pl.col("label").alias("Phase"),
            pl.col("gpu").alias("GPU Time (ns)"),
            pl.col("ops").alias("Kernels"),
            share.alias("Share (%)"),
            pl.col("cpu").alias("CPU Time (ns)"),
        )
        .cast(PHASE_SCHEMA)
    )
