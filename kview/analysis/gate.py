"""The regression gate of `kview diff A B --gate SPEC`: what got slower from A to B by more than
its threshold, per total, step, phase, layer, category and kernel.

A gate is `PCT` (every scope) or `SCOPE:PCT` (`layer:5%`, `total:2`); a scope's own gate wins
over a bare one. Each scope's items are measured the way the rest of kview measures them: GPU
time of the ops launched inside a window (phases as `kview phases`, layers as `compare --by
layer`, categories and kernels as `compare --by category|kernel`), the total as all GPU op time,
the step as its range's wall time.

Noise: when both traces hold several steps (iterations.step_instances), every item is measured
per step and the median across steps is compared (a step without the item counts 0), so one
slow step, a warm-up left in the window or a different number of steps does not move the
verdict. Otherwise whole traces are compared. Items smaller than `min_share` percent of the
run's GPU time on both sides are not gated: a percentage of a few microseconds is noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import polars as pl

from kview.analysis.compare import _pair_renamed, ops_by_launch
from kview.analysis.gpu_time import range_times
from kview.analysis.layers import phase_labels, phase_times
from kview.analysis.nvtx_ranges import user_ranges
from kview.analysis.steps import step_instances
from kview.errors import UsageError
from kview.trace import Trace

SCOPES = ("total", "step", "phase", "layer", "category", "kernel")
_SPEC = re.compile(r"^(?:(?P<scope>[a-z]+):)?(?P<pct>\d+(?:\.\d*)?|\.\d+)%?$")
ITEM_SCHEMA = pl.Schema({"Scope": pl.String, "Item": pl.String, "v": pl.Float64})
GATE_SCHEMA = pl.Schema(
    {
        "Scope": pl.String,
        "Item": pl.String,
        "A (ns)": pl.Int64,
        "B (ns)": pl.Int64,
        "Δ (ns)": pl.Int64,
        "Δ (%)": pl.Float64,
        "Gate (%)": pl.Float64,
    }
)

ITEMS_SCHEMA = pl.Schema([*GATE_SCHEMA.items(), ("Regressed", pl.Boolean())])


def parse_gates(specs: list[str]) -> dict[str, float]:
    """scope -> threshold (%) of every scope a gate applies to; UsageError for a malformed one."""
    bare: float | None = None
    own: dict[str, float] = {}
    for spec in specs:
        m = _SPEC.match(spec.strip().lower())
        if not m:
            raise UsageError(
                f"{spec!r} is not a gate: give PCT or SCOPE:PCT (e.g. 5%, layer:5%, total:2); "
                f"scopes: {', '.join(SCOPES)}",
                what="--gate",
            )
        scope, pct = m["scope"], float(m["pct"])
        if scope is None:
            bare = pct
        elif scope not in SCOPES:
            raise UsageError(f"unknown scope {scope!r} in {spec!r} (scopes: {', '.join(SCOPES)})", what="--gate")
        else:
            own[scope] = pct
    out = dict.fromkeys(SCOPES, bare) if bare is not None else {}
    out.update(own)
    return out


@dataclass(frozen=True)
class Measured:
    """One trace's items per scope (Scope, Item, v: ns) and how they were measured."""

    items: pl.DataFrame
    steps: int  # steps the medians are taken over; 0: the whole trace


def _steps(trace: Trace) -> pl.DataFrame:
    """number, start, end of each step (the ranks' instances of one number merged)."""

    s = step_instances(trace)
    return s.group_by("number").agg(pl.col("start").min(), pl.col("end").max()).sort("start")


def step_count(trace: Trace) -> int:
    return _steps(trace).height


def _op_items(trace: Trace) -> pl.DataFrame:
    """Idx, dur, t (launch) and the op's kernel, category and layer (compare's columns)."""

    k = ops_by_launch(trace, "kernel")
    return (
        k.join(ops_by_launch(trace, "category").select("Idx", "Category"), on="Idx", how="left")
        .join(ops_by_launch(trace, "layer").select("Idx", "Layer"), on="Idx", how="left")
        .rename({"Duration (ns)": "dur"})
    )


def _phase_ranges(trace: Trace) -> pl.DataFrame:
    names = phase_labels(trace)
    return user_ranges(trace).filter(pl.col("label").is_in(names))


def _median_over(per_step: pl.DataFrame, n: int) -> pl.DataFrame:
    """(Scope, Item, step, v) -> (Scope, Item, v): the median over `n` steps, a missing step 0."""
    got = per_step.group_by("Scope", "Item").agg(pl.col("v"))
    pad = pl.lit(0.0).repeat_by(pl.lit(n, dtype=pl.UInt32) - pl.col("v").list.len())
    return got.select("Scope", "Item", pl.col("v").list.concat(pad).list.median().alias("v")).cast(ITEM_SCHEMA)


def _step_time(steps: pl.DataFrame) -> pl.DataFrame:
    """The step scope's one item: the median of the steps' wall times."""
    return steps.select(
        pl.lit("step").alias("Scope"),
        pl.lit("step time").alias("Item"),
        (pl.col("end") - pl.col("start")).median().cast(pl.Float64).alias("v"),
    )


def measure(trace: Trace, per_step: bool) -> Measured:
    """The trace's items of every scope: medians over its steps, or whole-trace sums."""

    ops = _op_items(trace)
    steps = _steps(trace)
    parts: list[pl.DataFrame] = []
    keys = {"category": "Category", "layer": "Layer", "kernel": "Kernel"}
    if per_step:
        n = steps.height
        ops = (
            ops.sort("t")
            .join_asof(steps.select("start", "end", "number"), left_on="t", right_on="start", strategy="backward")
            .filter(pl.col("t") <= pl.col("end"))
        )
        rows = [ops.select(pl.lit("total").alias("Scope"), pl.lit("GPU time").alias("Item"), "number", "dur")]
        rows += [
            ops.select(pl.lit(s).alias("Scope"), pl.col(c).alias("Item"), "number", "dur") for s, c in keys.items()
        ]
        for r in rows:
            parts.append(
                _median_over(
                    r.group_by("Scope", "Item", "number").agg(pl.col("dur").sum().cast(pl.Float64).alias("v")), n
                )
            )
        parts.append(_step_time(steps))
        # phases that are the steps themselves (step_2, step_3, ...) are the total per step
        ranges = _phase_ranges(trace).filter(~pl.col("label").is_in(step_instances(trace)["label"].implode()))
        if ranges.height:
            # one label per phase and step, so range_times (phases' own function) times each
            tagged = (
                ranges.sort("start")
                .join_asof(steps.select("start", "end", "number"), on="start", strategy="backward", suffix="_s")
                .filter(pl.col("start") <= pl.col("end_s"))
                .select(pl.format("{}\x00{}", "label", "number").alias("label"), "start", "end", "global_tid")
            )
            t = range_times(trace, tagged).select(
                pl.lit("phase").alias("Scope"),
                pl.col("label").str.split("\x00").list.first().alias("Item"),
                pl.col("label").str.split("\x00").list.last().alias("number"),
                pl.col("gpu").cast(pl.Float64).alias("v"),
            )
            parts.append(_median_over(t, n))
    else:
        parts.append(pl.DataFrame({"Scope": ["total"], "Item": ["GPU time"], "v": [float(ops["dur"].sum() or 0)]}))
        for s, c in keys.items():
            parts.append(
                ops.group_by(pl.col(c).alias("Item")).agg(
                    pl.lit(s).alias("Scope"), pl.col("dur").sum().cast(pl.Float64).alias("v")
                )
            )
        if steps.height:
            parts.append(_step_time(steps))
        p = phase_times(trace)
        parts.append(
            p.select(
                pl.lit("phase").alias("Scope"),
                pl.col("Phase").alias("Item"),
                pl.col("GPU Time (ns)").cast(pl.Float64).alias("v"),
            )
        )
    items = pl.concat([x.select(list(ITEM_SCHEMA)).cast(ITEM_SCHEMA) for x in parts]).filter(
        pl.col("Item").is_not_null()
    )
    return Measured(items, steps.height if per_step else 0)


def _renamed_kernels(a: pl.DataFrame, b: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Kernels renamed only in their template arguments are one item (as `kview diff` pairs them)."""

    ka, kb = (x.filter(pl.col("Scope") == "kernel").rename({"Item": "Kernel"}) for x in (a, b))
    ka, kb = _pair_renamed(ka, kb)
    rest = [x.filter(pl.col("Scope") != "kernel") for x in (a, b)]
    return (
        pl.concat([rest[0], ka.rename({"Kernel": "Item"}).select(list(ITEM_SCHEMA))]),
        pl.concat([rest[1], kb.rename({"Kernel": "Item"}).select(list(ITEM_SCHEMA))]),
    )


@dataclass(frozen=True)
class Verdict:
    regressed: pl.DataFrame  # GATE_SCHEMA: what got slower past its gate
    checked: int  # items compared against a gate
    steps: tuple[int, int]  # steps the medians were taken over (0, 0: whole traces)
    items: pl.DataFrame  # every gated item (GATE_SCHEMA and `Regressed`), the regressed first

    @property
    def basis(self) -> str:
        """How the traces were measured, in words."""
        if self.steps[0]:
            return f"per-step medians ({self.steps[0]} steps of A, {self.steps[1]} of B)"
        return "whole traces (per-step medians need several steps on both sides)"


def gate(a: Trace, b: Trace, gates: dict[str, float], min_share: float = 1.0) -> Verdict:
    """Every item of a gated scope whose B exceeds A by more than its gate (%), or that is new in
    B; items under `min_share` % of the run's GPU time on both sides are left out."""
    per_step = step_count(a) >= 2 and step_count(b) >= 2
    ma, mb = measure(a, per_step), measure(b, per_step)
    ia, ib = _renamed_kernels(ma.items, mb.items)
    ia = ia.group_by("Scope", "Item").agg(pl.col("v").sum())  # a renamed pair may meet a name kept
    ib = ib.group_by("Scope", "Item").agg(pl.col("v").sum())
    total = max(
        (float(m.items.filter(pl.col("Scope") == "total")["v"].sum()) for m in (ma, mb)),
        default=0.0,
    )
    limits = pl.DataFrame({"Scope": list(gates), "Gate (%)": [float(v) for v in gates.values()]})
    j = (
        ia.join(ib, on=["Scope", "Item"], how="full", coalesce=True, suffix="_b")
        .join(limits, on="Scope", how="inner")
        .with_columns(
            pl.col("v").fill_null(0.0).round(0).cast(pl.Int64).alias("A (ns)"),
            pl.col("v_b").fill_null(0.0).round(0).cast(pl.Int64).alias("B (ns)"),
        )
    )
    small = pl.col("Scope").is_in(["phase", "layer", "category", "kernel"]) & (
        pl.max_horizontal("A (ns)", "B (ns)") < min_share / 100.0 * total
    )
    j = j.filter(~small).with_columns((pl.col("B (ns)") - pl.col("A (ns)")).alias("Δ (ns)"))
    j = j.with_columns(
        pl.when(pl.col("A (ns)") > 0).then((pl.col("Δ (ns)") * 100.0 / pl.col("A (ns)")).round(1)).alias("Δ (%)")
    )
    past = (pl.col("A (ns)") > 0) & (pl.col("Δ (ns)") * 100.0 > pl.col("Gate (%)") * pl.col("A (ns)"))
    new = (pl.col("A (ns)") == 0) & (pl.col("B (ns)") > 0)
    order = pl.DataFrame({"Scope": list(SCOPES)}).with_row_index("_o")
    items = (
        j.with_columns((past | new).alias("Regressed"))
        .join(order, on="Scope")
        .sort(["Regressed", "_o", "Δ (ns)", "Item"], descending=[True, False, True, False])
        .select(*GATE_SCHEMA, "Regressed")
        .cast(ITEMS_SCHEMA)
    )
    regressed = items.filter("Regressed").drop("Regressed")
    return Verdict(regressed, j.height, (ma.steps, mb.steps), items)
