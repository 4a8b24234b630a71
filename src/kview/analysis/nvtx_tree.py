"""The NVTX range tree aggregated by path: for every distinct path of ranges, the number of
instances, their CPU time, the GPU time of the kernels launched inside them (any thread, so
backward work lands under backward_pass) and the kernel count.

PyTorch op markers are kept, named by their op only (`aten::linear`, not its seq/op_id/sizes),
so millions of unique marker strings collapse into a few thousand paths. Paths get integer ids
level by level (parent path id, label code), so no per-range path string is ever built.
"""

from __future__ import annotations

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.gpu_time import gpu_time_in
from kview.trace import Trace

SCHEMA = {
    "path_id": pl.Int64,
    "parent_id": pl.Int64,
    "Depth": pl.Int64,
    "Name": pl.String,
    "Path": pl.String,
    "Instances": pl.UInt32,
    "CPU (ns)": pl.Int64,
    "GPU (ns)": pl.Int64,
    "Kernels": pl.Int64,
}


def path_table(trace: Trace) -> pl.DataFrame:
    return trace.memo("nvtx_tree.paths", lambda: _build(trace))


def _build(trace: Trace) -> pl.DataFrame:
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema=SCHEMA)
    tree = nv.projection_tree(trace)
    if tree.height == 0:
        return pl.DataFrame(schema=SCHEMA)
    names = nv.labels(trace).with_columns(
        pl.when(pl.col("label").str.contains(", op_id = |, seq = "))
        .then(pl.col("label").str.extract(r"^([^,]*)", 1))
        .otherwise(pl.col("label"))
        .alias("short")
    )
    codes = names.select("short").unique().sort("short").with_row_index("lc").with_columns(pl.col("lc").cast(pl.Int64))
    names = names.join(codes, on="short", how="left").select("name_code", "lc")
    r = tree.select("id", "parent", "depth", "start", "end", "name_code").join(names, on="name_code", how="left")
    # integer path ids, one level at a time
    assigned = []
    prev = None
    next_id = 0
    for d in range(int(r.select(pl.col("depth").max()).item()) + 1):
        level = r.filter(pl.col("depth") == d)
        if level.height == 0:
            continue
        if prev is None:
            level = level.with_columns(pl.lit(None, dtype=pl.Int64).alias("parent_pid"))
        else:
            level = level.join(
                prev.select(pl.col("id").alias("parent"), pl.col("pid").alias("parent_pid")), on="parent", how="left"
            )
        keys = level.select("parent_pid", "lc").unique().sort(["parent_pid", "lc"], nulls_last=False)
        keys = keys.with_row_index("pid", offset=next_id).with_columns(pl.col("pid").cast(pl.Int64))
        next_id += keys.height
        level = level.join(keys, on=["parent_pid", "lc"], how="left", nulls_equal=True)
        assigned.append(level.select("id", "pid", "parent_pid", "lc", "depth", "start", "end"))
        prev = level.select("id", "pid")
    r = pl.concat(assigned)
    gpu, kern = gpu_time_in(trace, r["start"].to_numpy(), r["end"].to_numpy())
    r = r.with_columns(pl.Series("gpu", gpu), pl.Series("kern", kern))
    g = r.group_by("pid").agg(
        pl.col("parent_pid").first(),
        pl.col("lc").first(),
        pl.col("depth").first(),
        pl.len().alias("Instances"),
        (pl.col("end") - pl.col("start")).sum().alias("CPU (ns)"),
        pl.col("gpu").sum().cast(pl.Int64).alias("GPU (ns)"),
        pl.col("kern").sum().cast(pl.Int64).alias("Kernels"),
    )
    g = g.join(codes.rename({"short": "Name"}), on="lc", how="left").sort("pid")
    # path strings for the (few) distinct paths
    text: dict[int, str] = {}
    for pid, parent, name in g.select("pid", "parent_pid", "Name").iter_rows():
        text[pid] = name if parent is None else f"{text.get(parent, '?')} > {name}"
    g = g.with_columns(pl.Series("Path", [text[p] for p in g["pid"].to_list()], dtype=pl.String))
    return g.select(
        pl.col("pid").alias("path_id"),
        pl.col("parent_pid").alias("parent_id"),
        pl.col("depth").cast(pl.Int64).alias("Depth"),
        "Name",
        "Path",
        "Instances",
        "CPU (ns)",
        "GPU (ns)",
        "Kernels",
    )
