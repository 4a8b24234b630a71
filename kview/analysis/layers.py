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
from kview.analysis.gpu_time import launch_timeline, range_times
from kview.derived import derived
from kview.errors import UsageError
from kview.io.schema import PID_MASK
from kview.notation import fmt_ns
from kview.trace import Trace

NUMBERED = re.compile(r"^(?P<prefix>.*?[A-Za-z_])(?P<index>\d+)$")


# a module's qualified name from module hooks (`model.layers.3.mlp`, `layer1.0.conv1`)
_QUALIFIED = re.compile(r"^[A-Za-z_]\w*(?:\.\w+)+$")
_NUMBER = "\x00"  # a number's place in a family name (a character no range name holds)


def _module_path(layer: str) -> list[str]:
    """A kernel's Layer path with each qualified module name preceded by the modules holding it:
    attribution keeps `model.layers.3.mlp` for `model > model.layers > model.layers.3 > ...`, so
    the layer (`model.layers.3`) is found by its place in the model, not only when a kernel
    was launched directly under it."""
    out: list[str] = []
    for comp in layer.split(":"):
        names = [comp]
        if _QUALIFIED.match(comp):
            dotted = comp.split(".")
            names = [".".join(dotted[: i + 1]) for i in range(len(dotted))]
        out.extend(n for n in names if n not in out)
    return out


@derived  # read by the layer detection, kview layers and compare --by layer: built once per trace
def module_paths(trace: Trace) -> pl.DataFrame:
    """`Layer` -> `c`, its module path (`_module_path`), once per distinct Layer value."""
    layers = attribute(trace)["Layer"].unique()
    paths = [_module_path(v) for v in layers.to_list()]  # distinct values: a few thousand at most
    return pl.DataFrame({"Layer": layers, "c": pl.Series(paths, dtype=pl.List(pl.String))})


def detect_layer_pattern(trace: Trace) -> str | None:
    """The numbered family whose members hold the most GPU time: of the families with at least
    two members at one position of the module paths, the one whose members' kernels (launched
    inside one of them, or the backward work of those) take the most GPU time; on a tie the
    outermost, then the largest. So the 36 `Owlv2EncoderLayer_N` holding most of a model beat
    the 76 `LayerNorm_N` beside and inside them, a torch.profiler trace's `Qwen2DecoderLayer_N`
    the `Linear_N` inside each of them, and torchvision's ResNet stages `layerN` their blocks
    `layerN.B` (the same kernels: the outer one). A family is a name ending in its index with
    every number a placeholder: `layer_N`, `Enc_N`, Hugging Face's `model.layers.N`."""
    a = attribute(trace)
    time = a.group_by("Layer").agg(pl.col("Duration (ns)").sum().alias("t"))
    comps = (
        module_paths(trace)
        .join(time, on="Layer", how="left")
        .with_columns(pl.int_ranges(pl.col("c").list.len()).alias("pos"))
        .explode("c", "pos")
        .drop_nulls("c")
        .filter(pl.col("c").str.contains(r"\D\d+$"))
        .with_columns(pl.col("c").str.replace_all(r"\d+", _NUMBER).alias("family"))
    )
    members = comps.group_by("pos", "family").agg(pl.col("c").n_unique().alias("members"))
    # a Layer value counts once per family, however many of its components belong to it
    held = (
        comps.unique(["Layer", "pos", "family"])
        .group_by("pos", "family")
        .agg(pl.col("t").fill_null(0).sum().alias("t"))
    )
    families = (
        members.join(held, on=["pos", "family"])
        .filter(pl.col("members") >= 2)
        .sort(["t", "pos", "members", "family"], descending=[True, False, True, False])
    )
    if families.height == 0:
        return None
    parts = families["family"][0].split(_NUMBER)
    return "^" + r"\d+".join(re.escape(p) for p in parts) + "$"


def kernel_layers(trace: Trace, pattern: str | None = None) -> pl.DataFrame:
    """Per forward/backward kernel inside a layer: Idx, Direction, Duration, `Layer` (the first
    module path component matching `pattern`, detected when None) and `Sublayer` (the next one,
    without its layer's name: `model.layers.3.mlp` -> `mlp`). Empty when no layer repeats.
    Layers, compare --by layer and the TUI count the same kernels in the same layer."""
    return detected_layers(trace) if not pattern else _kernel_layers(trace, pattern)


@derived  # the Layers document reads it three times, efficiency and the gate once more each
def detected_layers(trace: Trace) -> pl.DataFrame:
    """kernel_layers with the detected pattern."""
    return _kernel_layers(trace, detect_layer_pattern(trace))


def _kernel_layers(trace: Trace, pattern: str | None) -> pl.DataFrame:
    schema = {"Idx": pl.Int64, "Direction": pl.String, "Duration (ns)": pl.Int64, "Layer": pl.String}
    if pattern is None:
        return pl.DataFrame(schema={**schema, "Sublayer": pl.String})
    why = regex_problem(pattern)  # by the engine that runs it (polars'), not Python's
    if why:
        raise UsageError(f"bad layer pattern {pattern!r}: {why}")
    paths = module_paths(trace)
    hit = pl.col("c").list.eval(pl.element().str.contains(pattern))
    paths = (
        paths.with_columns(hit.list.arg_max().alias("pos"), hit.list.any().alias("hit"))
        .filter("hit")
        .select(
            pl.col("Layer").alias("_path"),
            pl.col("c").list.get(pl.col("pos")).alias("Layer"),
            pl.col("c").list.get(pl.col("pos") + 1, null_on_oob=True).alias("Sublayer"),
        )
        .with_columns(pl.col("Sublayer").str.strip_prefix(pl.col("Layer") + "."))
        # a ModuleList's children are numbers (`layer1.0`): `[0]`, as Python indexes them
        .with_columns(
            pl.when(pl.col("Sublayer").str.contains(r"^\d+$"))
            .then(pl.format("[{}]", pl.col("Sublayer")))
            .otherwise(pl.col("Sublayer"))
            .alias("Sublayer")
        )
    )
    # the four columns first, then the filter (filtering every column of the attributed
    # table copied its long strings: 0.4 GB on the dense 1.1M-kernel trace)
    a = attribute(trace).select(
        pl.col("Idx").cast(pl.Int64), "Direction", "Duration (ns)", pl.col("Layer").alias("_path")
    )
    return (
        a.filter(pl.col("Direction").is_in(["fprop", "bprop"]))
        .join(paths, on="_path", how="inner", maintain_order="left")
        .drop("_path")
    )


def backward_unplaced(trace: Trace, pattern: str | None = None) -> str:
    """One line when the trace has backward work but none of it can be placed in a layer (no
    autograd sequence numbers tie a backward kernel to its forward op: an export without op
    ranges), else "". Layers then leave Backward empty rather than show 0."""
    a = attribute(trace).filter(pl.col("Direction") == "bprop")
    if a.height == 0:
        return ""
    parts = kernel_layers(trace, pattern)
    if parts.height == 0 or (parts["Direction"] == "bprop").any():
        return ""

    return (
        f"the layer of the {a.height:,} backward GPU ops ({fmt_ns(int(a['Duration (ns)'].sum()))}) cannot be known: "
        "the trace has no autograd sequence numbers (op ranges, `nsys --pytorch=autograd-nvtx`), "
        "so Backward is left empty"
    )


def layer_times(trace: Trace, pattern: str | None = None) -> pl.DataFrame:
    schema = {
        "Layer": pl.String,
        "Forward (ns)": pl.Int64,
        "Backward (ns)": pl.Int64,
        "Total (ns)": pl.Int64,
        "GPU ops": pl.UInt32,
    }
    parts = kernel_layers(trace, pattern)
    if parts.height == 0:
        return pl.DataFrame(schema=schema)
    dur = pl.col("Duration (ns)")
    unknown = backward_unplaced(trace, pattern) != ""  # no layer has backward work it could show
    g = parts.group_by("Layer").agg(
        dur.filter(pl.col("Direction") == "fprop").sum().alias("Forward (ns)"),
        (pl.lit(None, dtype=pl.Int64) if unknown else dur.filter(pl.col("Direction") == "bprop").sum()).alias(
            "Backward (ns)"
        ),
        dur.sum().alias("Total (ns)"),
        pl.len().alias("GPU ops"),
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
    # in the model's order: by every number of the name (`layer2.10` after `layer2.9`)
    idx = pl.col("Layer").str.extract_all(r"\d+").list.eval(pl.element().cast(pl.Int64))
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
    # the labels' text copied (a string of its own, not a view): a view keeps the buffers of
    # every range's name alive (0.6 GB on a dense trace) after the names go (`kview overview`
    # lets them go during attribution, and keeps this tree, the phases and the steps made of it)
    users = nv.labels(trace).filter(~pl.col("marker") & ~pl.col("module"))
    users = users.filter(~nv.library_ranges(users))
    users = users.select("name_code", pl.concat_str(pl.col("label"), pl.lit("")).alias("label"))
    # the user ranges picked by one filter before the join: a filter of the push/pop ranges alone
    # copied every range's columns (0.2 GB on a dense trace) to keep a few thousand
    user = (pl.col("style") == "PushPop") & pl.col("name_code").is_in(users["name_code"].implode())
    r = (
        nv.projection_ranges(trace)
        .filter(user)
        .join(users, on="name_code", how="inner", maintain_order="left")
        .select("id", "start", "end", "global_tid", "label")
    )
    return nv.nest(r)


@derived
def phase_labels(trace: Trace) -> list[str]:
    """The phase names, in order of first appearance (`phase_instances`' labels)."""
    phases = phase_instances(trace)
    return phases.group_by("label").agg(pl.col("start").min()).sort(["start", "label"])["label"].to_list()


@derived
def phase_instances(trace: Trace) -> pl.DataFrame:
    """The ranges that are phases (id, start, end, global_tid, label): the user ranges at the top of their
    thread's user-range nesting (op markers, library ranges such as NCCL's and the module calls
    of a torch.profiler trace never count);
    when those are all one step family (profiled_step, ProfilerStep#N) and the user ranges
    one level down fill at least half of the steps, those (forward_pass, backward_pass, ...)."""
    tree = user_range_tree(trace)
    if tree.height == 0:
        return tree.select("id", "start", "end", "global_tid", "label")
    roots = tree.filter(pl.col("depth") == 0)
    # a top range of one thread that lies inside a top range of another thread of its process
    # (the autograd engine's own range inside the main thread's backward_pass) is part of that
    # phase, not one of its own: counting its work twice put phases over 100%. A thread's own
    # tops never overlap, so a range that started earlier and ends no sooner is another's.
    pid = pl.col("global_tid") & PID_MASK
    roots = roots.sort([pid, pl.col("start"), pl.col("end")], descending=[False, False, True]).filter(
        ~(pl.col("end").cum_max().shift(1).over(pid) >= pl.col("end")).fill_null(False)
    )
    phases = roots
    if roots["label"].str.replace(STEP_FAMILY, "").n_unique() == 1:
        kids = tree.filter(pl.col("parent").is_in(roots["id"].implode()))
        span = (pl.col("end") - pl.col("start")).sum()
        # the steps' parts, when they make up the step (forward/backward/optimizer), not a
        # sliver of it (one compiled-graph call inside a serving step)
        if kids.height and kids.select(span).item() * 2 >= roots.select(span).item():
            phases = kids
    return phases.select("id", "start", "end", "global_tid", "label")


PHASE_SCHEMA = pl.Schema(
    {
        "Phase": pl.String,
        "GPU Time (ns)": pl.Int64,
        "GPU ops": pl.Int64,
        "Share (%)": pl.Float64,
        "CPU Time (ns)": pl.Int64,
    }
)


@derived(key="layers.phase_times", version="1", persist=True)
def phase_times(trace: Trace) -> pl.DataFrame:
    """Per phase: the GPU time and op count of the work launched while it was open (any thread),
    its share of all GPU time, and its CPU time (how long it was open). The same numbers
    `kview compare` gives for these ranges (one function computes both). Computed once per
    trace and kept in the frame cache: Overview, diff and `kview phases` all ask for it."""
    return phase_table(trace)


def phase_table(trace: Trace, ops: pl.Series | None = None) -> pl.DataFrame:
    """phase_times over the GPU ops whose Idx is in `ops` only (all of them when None): the
    Overview's, which leaves out rows the trace cannot hold."""
    names = phase_labels(trace)
    if not names:
        return pl.DataFrame(schema=PHASE_SCHEMA)
    # the phase instances only: a range of a phase's name nested inside another phase (the
    # DistributedDataParallel call of every step, where one more after the last step is a phase
    # of its own) is that phase's work, and counting it again put phases over 100%. Their rows
    # as they are, not the ranges again: the Overview asks after attribution let the ranges go
    t = range_times(trace, phase_instances(trace), ops)
    tl = launch_timeline(trace)
    if ops is not None:
        tl = tl.filter(pl.col("Idx").is_in(ops.implode()))
    total = int(tl["dur"].sum() or 0)
    order = pl.DataFrame({"label": names}).with_row_index("_o")
    share = (pl.col("gpu") * 100.0 / total).round(1) if total else pl.lit(None, dtype=pl.Float64)
    return (
        t.join(order, on="label")
        .sort("_o")
        .select(
            pl.col("label").alias("Phase"),
            pl.col("gpu").alias("GPU Time (ns)"),
            pl.col("ops").alias("GPU ops"),
            share.alias("Share (%)"),
            pl.col("cpu").alias("CPU Time (ns)"),
        )
        .cast(PHASE_SCHEMA)
    )
