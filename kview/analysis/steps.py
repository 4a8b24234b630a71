"""The steps of one trace (its training iterations, before ranks are matched: iterations.py).

Steps are the top-level user ranges of one step family (layers.user_range_tree: op markers and
library ranges such as NCCL's never count), named for a step, iteration or batch: `ProfilerStep#N`,
`step_N`, `iter12`, or unnumbered (`profiled_step`, numbered in order). Where several families
qualify, the one covering the most time wins. Without any, the optimizer's step markers
(`Optimizer.step#AdamW.step`) end one step each.
"""

from __future__ import annotations

import polars as pl

from kview.analysis import nvtx_ranges as nv
from kview.analysis.layers import STEP_FAMILY, user_range_tree
from kview.derived import derived
from kview.trace import Trace

STEP_WORDS = r"(?i)step|iter|batch"
OPTIMIZER_STEP = r"^Optimizer\.step#\w+\.step$"
STEP_SCHEMA = pl.Schema(
    {"global_tid": pl.Int64, "label": pl.String, "number": pl.Int64, "start": pl.Int64, "end": pl.Int64}
)


def _numbered(df: pl.DataFrame) -> pl.DataFrame:
    """Number each step: its label's trailing number, else its order on its thread (from 1)."""
    order = pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("global_tid")
    digits = pl.col("label").str.extract(r"(\d+)$", 1).cast(pl.Int64, strict=False)
    return (
        df.sort("start")
        .select("global_tid", "label", pl.coalesce(digits, order).alias("number"), "start", "end")
        .cast(STEP_SCHEMA)
    )


# kept in the disk cache: a run's worker processes find the steps there, so the process that
# summarizes the run never builds a rank's range tree
@derived(key="steps", version="1", persist=True)
def step_instances(trace: Trace) -> pl.DataFrame:
    """The trace's steps: global_tid, label, number, start, end (empty when it has none)."""
    roots = user_range_tree(trace).filter(pl.col("depth") == 0)
    if roots.height:
        roots = roots.with_columns(pl.col("label").str.replace(STEP_FAMILY, "").alias("family"))
        fam = (
            roots.group_by("family")
            .agg(
                pl.len().alias("n"),
                (pl.col("end") - pl.col("start")).sum().alias("span"),
            )
            .filter(pl.col("family").str.contains(STEP_WORDS))
            .sort(["span", "family"], descending=[True, False])
        )
        if fam.height:
            return _numbered(roots.filter(pl.col("family") == fam["family"][0]))
    return _optimizer_steps(trace)


def _optimizer_steps(trace: Trace) -> pl.DataFrame:
    """One iteration per optimizer step, from the end of the one before (the first from the
    first range of its thread) to its own end."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame(schema=STEP_SCHEMA)
    opt = nv.labels(trace).filter(pl.col("label").str.contains(OPTIMIZER_STEP)).select("name_code", "label")
    r = nv.projection_ranges(trace)
    steps = r.join(opt, on="name_code", how="inner").sort("start")
    if steps.height == 0:
        return pl.DataFrame(schema=STEP_SCHEMA)
    first = r.group_by("global_tid").agg(pl.col("start").min().alias("first"))
    steps = steps.join(first, on="global_tid").with_columns(
        pl.col("end").shift(1).over("global_tid").fill_null(pl.col("first")).alias("start")
    )
    return _numbered(steps.with_columns(pl.lit("optimizer step").alias("label"))).with_columns(
        pl.format("optimizer step {}", pl.col("number")).alias("label")
    )
