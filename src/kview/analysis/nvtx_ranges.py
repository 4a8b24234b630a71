"""NVTX ranges with their nsys labels (`domain:text`), style, and enclosure structure.

Labels follow nsys exactly: the text is the registered string (textId) or the inline `text`;
the domain is the name of the domain-create event (type 75) with the same domainId in the same
process, and the default domain gives an empty prefix (":forward_pass").

Enclosure is computed column-wise. Push/pop ranges on one thread nest (LIFO), so a range's
depth is the number of earlier ranges (in start order) still open when it starts, found with
sorted searches; its parent is the nearest earlier range one level up, found with join_asof.
Start/end ranges may overlap arbitrarily and are matched against calls by an explicit
per-thread interval join instead.
"""

from __future__ import annotations

import re

import polars as pl

from kview.io.nsys_reader import NVTX_DOMAIN_CREATE, NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND
from kview.trace import Trace

PID_ONLY = 0x0000FFFFFF000000

STYLES = pl.Enum(["PushPop", "StartEnd", "Unknown"])
STYLE = (
    pl.when(pl.col("event_type").is_in([NVTX_PUSHPOP, NVTXT_PUSHPOP]))
    .then(pl.lit("PushPop"))
    .when(pl.col("event_type").is_in([NVTX_STARTEND, NVTXT_STARTEND]))
    .then(pl.lit("StartEnd"))
    .otherwise(pl.lit("Unknown"))
    .cast(STYLES)
)


# PyTorch's own ranges (emit_nvtx ops and autograd nodes, torch-internal record_functions named
# `X#Class.method` such as `Optimizer.step#AdamW.step`) and PyProf/DLProf's dict-shaped
# annotations ({'mod': ...}), as opposed to ranges the user annotated. `ProfilerStep#5` and
# `## forward ##` are user ranges.
OP_MARKER_RE = r", op_id = |, seq = |#[A-Za-z_]\w*\.|::|^\{'"
# Ranges libraries open around their own calls: never phases. NCCL's domain (its ranges keep
# their `nccl` names even where the export lost the domain's name), c10d's collectives in
# torch.profiler traces (`nccl:all_reduce`, `gloo:barrier`), and other library domains.
LIBRARY_DOMAINS = (
    "NCCL",
    "RCCL",
    "CCCL",
    "cuDNN",
    "cuBLAS",
    "cuBLASLt",
    "cuFFT",
    "cuSPARSE",
    "cuSOLVER",
    "NVSHMEM",
    "cudaProfilerApi",
    "NVTX3",
)
LIBRARY_LABEL_RE = r"^(nccl|rccl)[A-Z]|^(nccl|rccl|gloo|hccl|mpi|ucc|xccl|mccl):|^cudaProfilerApi$"


def is_op_marker(name: str) -> bool:
    return re.search(OP_MARKER_RE, name) is not None


def is_op_marker_expr(label: pl.Expr) -> pl.Expr:
    return label.str.contains(OP_MARKER_RE)


def _cached_build(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(labelled, names) from the frame cache when there (integers only, so a reopen skips the
    strings), else built and stored."""
    from kview.io import cache

    if trace.use_cache:
        lab, names = cache.load(trace.path, "nvtx.labelled"), cache.load(trace.path, "nvtx.names")
        if lab is not None and names is not None:
            return lab.with_columns(pl.col("style").cast(STYLES)), names
    lab, names = _build_labelled(trace)
    if trace.use_cache:
        cache.store(trace.path, "nvtx.labelled", lab)
        cache.store(trace.path, "nvtx.names", names)
    return lab, names


def labelled(trace: Trace) -> pl.DataFrame:
    """All range events with an integer `name_code` (see `names`), `style`; `end` may be null.

    Labels are built once per distinct (domain, textId, text) key, never per row, and rows
    carry only integers, so five million PyTorch ranges cost integers, not strings. Like
    nsys, a range joins every domain-create row of its domainId in its process, so the rare
    export with one domain created on several threads counts those ranges once per row.
    """
    return trace.memo("nvtx.labelled", lambda: _cached_build(trace))[0]


def names(trace: Trace) -> pl.DataFrame:
    """name_code -> name (`domain:text`, as nsys prints it)."""
    return trace.memo("nvtx.labelled", lambda: _cached_build(trace))[1]


def _build_labelled(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    ev = trace.nvtx_events.rename({"text": "text_cat"})
    ev = ev.with_columns(
        pl.col("text_cat").to_physical().cast(pl.Int64).fill_null(-1).alias("text_code"),
        (pl.col("global_tid") & PID_ONLY).alias("pid_key"),
        pl.col("text_id").fill_null(-1),
        pl.col("domain_id").fill_null(-1),
    )
    key = ["domain_id", "pid_key", "text_id", "text_code"]

    def label_of(frame: pl.DataFrame) -> pl.DataFrame:
        # registered string first, inline text second, as nsys's coalesce(sid.value, text)
        f = trace.with_strings(frame, "text_id", "sid_value")
        return f.with_columns(pl.coalesce("sid_value", pl.col("text_cat").cast(pl.String)).alias("label"))

    doms = ev.filter(pl.col("event_type") == NVTX_DOMAIN_CREATE)
    dom = (
        label_of(doms)
        .sort("start", maintain_order=True)
        .group_by(["domain_id", "global_tid"], maintain_order=True)
        .agg(pl.col("label").first().alias("domain"), pl.col("pid_key").first())
    )
    r = ev.filter(pl.col("event_type") != NVTX_DOMAIN_CREATE)
    keys = label_of(r.group_by(key).agg(pl.col("text_cat").first()))
    keys = keys.join(dom.select("domain_id", "pid_key", "domain"), on=["domain_id", "pid_key"], how="left")
    keys = keys.with_columns(
        pl.format("{}:{}", pl.col("domain").fill_null(""), pl.col("label").fill_null("")).alias("name")
    )
    table = keys.select("name").unique().sort("name").with_row_index("name_code")
    keys = keys.join(table, on="name", how="left").select(*key, pl.col("name_code").cast(pl.Int64))
    r = r.join(keys, on=key, how="left")
    labelled_ = r.select(
        "id", "start", "end", "event_type", "global_tid", "end_global_tid", "name_code", STYLE.alias("style")
    )
    return labelled_, table.select(pl.col("name_code").cast(pl.Int64), "name")


def labels(trace: Trace) -> pl.DataFrame:
    """name_code -> name, its `label` (the text after `domain:`), whether it is an op marker,
    and whether a library opened it (`library`)."""

    def build() -> pl.DataFrame:
        parts = pl.col("name").str.splitn(":", 2)
        return (
            names(trace)
            .with_columns(
                parts.struct.field("field_1").fill_null("").alias("label"),
                parts.struct.field("field_0").fill_null("").alias("domain"),
            )
            .with_columns(
                is_op_marker_expr(pl.col("label")).alias("marker"),
                (pl.col("domain").is_in(list(LIBRARY_DOMAINS)) | pl.col("label").str.contains(LIBRARY_LABEL_RE)).alias(
                    "library"
                ),
            )
            .drop("domain")
        )

    return trace.memo("nvtx.labels", build)


def with_names(trace: Trace, frame: pl.DataFrame, out: str = "name") -> pl.DataFrame:
    return frame.join(names(trace).rename({"name": out}), on="name_code", how="left")


def projection_ranges(trace: Trace) -> pl.DataFrame:
    """Ranges as nsys's projection reports use them: one thread only, null end -> last timestamp."""
    return trace.memo("nvtx.projection", lambda: _projection(trace))


def _projection(trace: Trace) -> pl.DataFrame:
    all_ranges = labelled(trace)
    hi = all_ranges.select(pl.max_horizontal(pl.col("start").max(), pl.col("end").max())).item()
    r = all_ranges.filter(pl.col("end_global_tid").is_null())
    return r.with_columns(pl.col("end").fill_null(pl.lit(hi, dtype=pl.Int64))).drop("end_global_tid")


def projection_tree(trace: Trace) -> pl.DataFrame:
    """nest() of the push/pop projection ranges, computed once per trace."""
    return trace.memo("nvtx.tree", lambda: nest(projection_ranges(trace).filter(pl.col("style") == "PushPop")))


def nest(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add `depth` and `parent` (id of the tightest enclosing range on the same thread).

    Valid for families that nest (push/pop on one thread). Ties of identical intervals
    become a chain in id order.
    """
    r = ranges.sort(["global_tid", "start", "end", "id"], descending=[False, False, True, False]).with_columns(
        pl.int_range(pl.len()).over("global_tid").alias("pos")
    )
    # Ranges that ended before this one (end < own end, end <= own start) are all earlier in
    # start order except zero-length ones at our own start, which sort after a longer range.
    ends = (
        r.select("global_tid", "end")
        .sort(["global_tid", "end"])
        .with_columns(pl.int_range(1, pl.len() + 1).over("global_tid").alias("n_le"))
    )
    key = r.with_columns(
        pl.when(pl.col("end") > pl.col("start")).then(pl.col("start")).otherwise(pl.col("start") - 1).alias("key")
    )
    closed = (
        key.sort("key")
        .join_asof(
            ends.rename({"end": "key"}).sort("key"),
            on="key",
            by="global_tid",
            strategy="backward",
            check_sortedness=False,
        )
        .select("id", pl.col("n_le").fill_null(0))
    )
    zero = r.filter(pl.col("end") == pl.col("start")).group_by(["global_tid", "start"]).agg(pl.len().alias("n_zero"))
    r = (
        r.join(closed, on="id", how="left")
        .join(zero, on=["global_tid", "start"], how="left")
        .with_columns(
            pl.when(pl.col("end") > pl.col("start"))
            .then(pl.col("n_le") - pl.col("n_zero").fill_null(0))
            .otherwise(pl.col("n_le"))
            .alias("n_closed")
        )
        .with_columns((pl.col("pos") - pl.col("n_closed")).alias("depth"))
        .drop("n_le", "n_zero", "n_closed")
    )
    parents = r.select("global_tid", pl.col("depth") + 1, pl.col("pos").alias("ppos"), pl.col("id").alias("parent"))
    r = (
        r.sort("pos")
        .join_asof(
            parents.sort("ppos"),
            left_on="pos",
            right_on="ppos",
            by=["global_tid", "depth"],
            strategy="backward",
            allow_exact_matches=False,
            check_sortedness=False,
        )
        .drop("ppos")
    )
    return r.sort(["global_tid", "pos"]).drop("pos")


def enclosing(ranges: pl.DataFrame, calls: pl.DataFrame, tree: pl.DataFrame | None = None) -> pl.DataFrame:
    """Pairs (call_id, range id) for every range on the call's thread with
    range.start <= call.start and range.end >= call.end.

    `calls` has call_id, global_tid, start, end. Push/pop ranges go through the nesting
    (innermost open range, then its ancestors); start/end ranges through an interval join.
    """
    pp = ranges.filter(pl.col("style") == "PushPop")
    se = ranges.filter(pl.col("style") != "PushPop")
    out = []
    if pp.height and calls.height:
        out.append(_enclosing_nested(nest(pp) if tree is None else tree, calls))
    if se.height and calls.height:
        out.append(_enclosing_any(se, calls))
    if not out:
        return pl.DataFrame(schema={"call_id": pl.Int64, "id": pl.Int64})
    return pl.concat(out)


def _enclosing_nested(tree: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    # Innermost candidate: the last range (in start order) starting at or before the call.
    t = tree.sort(["global_tid", "start", "end", "id"], descending=[False, False, True, False]).with_columns(
        pl.int_range(pl.len()).alias("order")
    )
    c = calls.select("call_id", "global_tid", pl.col("start").alias("c_start"), pl.col("end").alias("c_end"))
    cand = c.sort("c_start").join_asof(
        t.select("global_tid", pl.col("start").alias("c_start"), pl.col("order")).sort("c_start"),
        on="c_start",
        by="global_tid",
        strategy="backward",
        check_sortedness=False,
    )
    # The candidate may have closed before the call; climb parents until one encloses it.
    info = t.select("order", "id", "start", "end", "parent")
    by_id = t.select(pl.col("id").alias("parent"), pl.col("order").alias("porder"))
    info = info.join(by_id, on="parent", how="left").drop("parent")
    cur = cand.filter(pl.col("order").is_not_null()).join(info, on="order", how="left")
    found = []
    while cur.height:
        ok = (pl.col("start") <= pl.col("c_start")) & (pl.col("end") >= pl.col("c_end"))
        found.append(cur.filter(ok).select("call_id", "order"))
        nxt = cur.filter(~ok & pl.col("porder").is_not_null()).select(
            "call_id", "global_tid", "c_start", "c_end", pl.col("porder").alias("order")
        )
        cur = nxt.join(info, on="order", how="left")
    inner = pl.concat(found) if found else pl.DataFrame(schema={"call_id": pl.Int64, "order": pl.Int64})
    # Every ancestor of the innermost enclosing range encloses the call as well.
    pairs = []
    cur = inner.join(info.select("order", "id", "porder"), on="order", how="left")
    while cur.height:
        pairs.append(cur.select("call_id", "id"))
        cur = (
            cur.filter(pl.col("porder").is_not_null())
            .select("call_id", pl.col("porder").alias("order"))
            .join(info.select("order", "id", "porder"), on="order", how="left")
        )
    return pl.concat(pairs) if pairs else pl.DataFrame(schema={"call_id": pl.Int64, "id": pl.Int64})


def _enclosing_any(ranges: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    c = calls.select("call_id", "global_tid", pl.col("start").alias("c_start"), pl.col("end").alias("c_end"))
    j = c.join(ranges.select("id", "global_tid", "start", "end"), on="global_tid", how="inner")
    return j.filter((pl.col("start") <= pl.col("c_start")) & (pl.col("end") >= pl.col("c_end"))).select("call_id", "id")
