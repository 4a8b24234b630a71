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
from kview.analysis.attribution import ELIDED, PATH_HEAD, PATH_TAIL
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


SMALL_LEVEL = 2_000  # levels with fewer ranges are numbered in Python, without a polars call each


def _path_ids(r: pl.DataFrame) -> pl.DataFrame:
    """(id, pid, parent_pid) for every range (id, parent, depth, lc): an integer per distinct path
    of labels from the root, numbered level by level in the order (parent's path, label).

    Every range is handled once: the levels of many ranges by polars joins, the levels of a few
    ranges (the thousands of levels of a push never popped inside a loop) by dictionaries, so the
    cost follows the number of ranges, not ranges times depth."""
    ids, pids, parent_pids = [], [], []
    frames = []
    prev_df: pl.DataFrame | None = None  # the previous level's (id, pid), whichever form is at hand
    prev_map: dict[int, int] | None = {}
    next_id = 0
    for _depth, level in sorted(r.partition_by("depth", as_dict=True).items(), key=lambda kv: kv[0]):
        if level.height >= SMALL_LEVEL:
            if prev_df is None:
                assert prev_map is not None  # one of the two forms is always at hand
                prev_df = pl.DataFrame(
                    {"id": list(prev_map), "pid": list(prev_map.values())}, schema={"id": pl.Int64, "pid": pl.Int64}
                )
            level = level.join(prev_df.rename({"id": "parent", "pid": "parent_pid"}), on="parent", how="left")
            keys = level.select("parent_pid", "lc").unique().sort(["parent_pid", "lc"], nulls_last=False)
            keys = keys.with_row_index("pid", offset=next_id).with_columns(pl.col("pid").cast(pl.Int64))
            next_id += keys.height
            level = level.join(keys, on=["parent_pid", "lc"], how="left", nulls_equal=True)
            frames.append(level.select("id", "pid", "parent_pid"))
            prev_df, prev_map = level.select("id", "pid"), None
        else:
            if prev_map is None:
                assert prev_df is not None
                needed = level["parent"].drop_nulls().unique()
                prev_map = dict(prev_df.filter(pl.col("id").is_in(needed.implode())).iter_rows())
            lid, par, lc = level["id"].to_list(), level["parent"].to_list(), level["lc"].to_list()
            ppid = [prev_map.get(p) for p in par]
            seen = sorted(set(zip(ppid, lc)), key=lambda k: (k[0] is not None, k[0] or 0, k[1] is not None, k[1] or 0))
            number = {k: next_id + i for i, k in enumerate(seen)}
            next_id += len(seen)
            pid = [number[k] for k in zip(ppid, lc)]
            ids += lid
            pids += pid
            parent_pids += ppid
            prev_df, prev_map = None, dict(zip(lid, pid))
    frames.append(
        pl.DataFrame(
            {"id": ids, "pid": pids, "parent_pid": parent_pids},
            schema={"id": pl.Int64, "pid": pl.Int64, "parent_pid": pl.Int64},
        )
    )
    return pl.concat(frames)


def _path_text(head: tuple, tail: tuple, n: int) -> str:
    gap = n - len(head) - len(tail)
    return " > ".join(head + ((f"{ELIDED} {gap} levels",) if gap else ()) + tail)


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
    r = tree.select("id", "parent", pl.col("depth").cast(pl.Int64), "start", "end", "name_code").join(
        names, on="name_code", how="left"
    )
    r = r.join(_path_ids(r), on="id", how="left")
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
    # path strings for the (few) distinct paths, parents first (ids are in depth order); a deep
    # path shows its outer and inner levels and how many it leaves out (as the Kernels view)
    chain: dict[int, tuple] = {}
    for pid, parent, name in g.select("pid", "parent_pid", "Name").iter_rows():
        head, tail, n = chain[parent] if parent is not None else ((), (), 0)
        chain[pid] = (
            (head + (name,), (), n + 1) if len(head) < PATH_HEAD else (head, (tail + (name,))[-PATH_TAIL:], n + 1)
        )
    g = g.with_columns(pl.Series("Path", [_path_text(*chain[p]) for p in g["pid"].to_list()], dtype=pl.String))
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
