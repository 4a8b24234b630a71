"""The critical path of each step: the chain of work that set when the step ended, walked back
from its end, and whether the CPU or the GPU held it.

A step is a step range (iterations.step_instances; the whole trace when it has none); its GPU
ops are those its process launched inside it (the ranks of one export keep their own steps). Each op waited for the latest of:
- the op before it on its stream (a GPU edge: the gap between them counts as GPU time);
- the op of another stream of the device that ended last before it started, when that ended
  after the op before it on its own stream (a cross-stream edge: an event the stream waited on,
  a collective on the communication stream);
- its launch: the launch call started after both (a CPU edge). The time from the launch call's
  start to the op's start is launch time; before it, the launching thread's time back to where
  it was last blocked: the end of a synchronization call that waited for a GPU op (its latest
  op to end, which the path continues from), else the step's start (CPU time).
The walk starts at the step's last GPU op to end, or, when the step's CPU range ends after it,
at that end on the step's thread (CPU time back to its last waiting synchronization). Every node
points at its predecessor; the path is the chain from the end node, found by pointer doubling
(log n array steps, no loop over ops). The path covers the step without gaps: its length is
max(step end, last GPU end) - step start = GPU + CPU + launch time on it. A step is CPU-bound
when CPU and launch time make more than half of its path, else GPU-bound.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from kview.analysis.iterations import iteration_table, iteration_windows
from kview.analysis.launches import launches, sync_calls
from kview.analysis.ranks import Run
from kview.analysis.steps import step_instances
from kview.derived import derived
from kview.io.schema import PID_MASK, pid_of
from kview.trace import Trace

STEP_COLUMNS = pl.Schema(
    {
        "Step": pl.String,
        "PID": pl.Int64,
        "Start (ns)": pl.Int64,
        "Length (ns)": pl.Int64,
        "GPU (ns)": pl.Int64,
        "CPU (ns)": pl.Int64,
        "Launch (ns)": pl.Int64,
        "CPU share (%)": pl.Float64,
        "Bound by": pl.String,
        "Ops on path": pl.Int64,
    }
)


WINDOW_SCHEMA = pl.Schema(
    {
        "step": pl.Int64,
        "label": pl.String,
        "global_tid": pl.Int64,
        "pid": pl.Int64,
        "w_start": pl.Int64,
        "w_end": pl.Int64,
    }
)


NODE_COLUMNS = ("node", "step", "Idx", "Kernel", "Op", "start", "end", "pred", "gpu", "cpu", "launch", "on_path")


# the CPU time of a step's own thread after the last GPU op it waited for (all of a step that
# never waited), named so in the ops on the paths
TAIL = "(the step's thread, not waiting for the GPU)"


def _windows(trace: Trace) -> pl.DataFrame:
    """step, label, global_tid, pid, w_start, w_end: the steps (each owns the work its own
    process launched inside it), else per process the span of its launches."""
    s = step_instances(trace)
    if s.height:
        w = s.select(
            "label",
            "global_tid",
            (pl.col("global_tid") & PID_MASK).alias("pid"),
            pl.col("start").alias("w_start"),
            pl.col("end").alias("w_end"),
        )
    else:
        lt = launches(trace).filter(pl.col("r_start").is_not_null())
        w = lt.group_by((pl.col("global_tid") & PID_MASK).alias("pid")).agg(
            pl.lit("(whole trace)").alias("label"),
            pl.lit(None, dtype=pl.Int64).alias("global_tid"),
            pl.col("r_start").min().alias("w_start"),
            pl.col("r_start").max().alias("w_end"),
        )
    w = w.sort("w_start", "pid").with_row_index("step").with_columns(pl.col("step").cast(pl.Int64))
    return w.select(list(WINDOW_SCHEMA)).cast(WINDOW_SCHEMA)


@derived
def path_nodes(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(nodes, steps): every GPU op of a step with its predecessor and what it adds to a path
    (gpu, cpu, launch ns), `on_path` marking the ops on its step's critical path; and per step
    its end node and the CPU time after it (tail)."""
    nodes, steps = path_walk(trace)
    names = launches(trace).select("Idx", "Kernel", "Op")
    nodes = nodes.join(names, on="Idx", how="left", maintain_order="left").select(NODE_COLUMNS)
    # the walk's columns are held here now: a table made later of the walk alone reads these
    trace.store.drop(path_walk)
    return nodes, steps


def _walked(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """path_nodes where made, else path_walk: the nodes without their names."""
    made = trace.store.peek(path_nodes)
    return made if made is not None else path_walk(trace)


@derived
def path_walk(trace: Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """path_nodes without the ops' Kernel and Op: what the steps' figures read (step_table),
    made without joining a million ops' names."""
    w = _windows(trace)
    # the columns the walk reads only: each sort and join below copies every column it carries
    # (the kernel and op names are added to the nodes at the end, by Idx)
    lt = (
        launches(trace)
        .select("Idx", "device", "stream", "start", "end", "global_tid", "r_start", "r_end")
        .filter(pl.col("r_start").is_not_null())
        .with_columns((pl.col("global_tid") & PID_MASK).alias("pid"))
    )
    ops = (
        lt.sort("r_start")
        .join_asof(
            w.sort("w_start").select("step", "pid", "w_start", "w_end"),
            left_on="r_start",
            right_on="w_start",
            by="pid",
            check_sortedness=False,
        )
        .filter(pl.col("step").is_not_null() & (pl.col("r_start") <= pl.col("w_end")))
        .drop("pid", "w_end")
        .sort("step", "device", "stream", "start", "Idx")
        .with_row_index("node")
        .with_columns(pl.col("node").cast(pl.Int64))
    )
    # the op before on the same stream, in the same step: sorted so, each (step, device, stream)
    # is a run of rows, and the row before is in it unless the run starts there (shifts over the
    # whole column, not a window per stream)
    same = pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(1)) for c in ("step", "device", "stream"))
    ops = ops.with_columns(
        pl.when(same).then(pl.col("node").shift(1)).alias("p_node"),
        pl.when(same).then(pl.col("end").shift(1)).alias("p_end"),
    )
    # the op of the step and device that ended last at or before this op's start (another
    # stream's when it ended after the op before on this stream)
    ends = ops.select(
        "step", "device", pl.col("end").alias("x_end"), pl.col("node").alias("x_node"), pl.col("start").alias("x_start")
    ).sort("x_end", "x_node")
    ops = ops.sort("start").join_asof(
        ends, left_on="start", right_on="x_end", by=["step", "device"], strategy="backward", check_sortedness=False
    )
    # an op that started when this one did (itself, or an empty op at the same instant) is no
    # dependency: every edge then goes back in (start, node) order, so the links form no cycle
    cross = (
        pl.col("x_end").is_not_null()
        & (pl.col("x_start") < pl.col("start"))
        & (pl.col("x_end") > pl.col("p_end").fill_null(-(2**62)))
    )
    dep_end = pl.when(cross).then(pl.col("x_end")).otherwise(pl.col("p_end"))
    dep_node = pl.when(cross).then(pl.col("x_node")).otherwise(pl.col("p_node"))
    ops = ops.with_columns(dep_end.alias("dep_end"), dep_node.alias("dep_node"))
    # a CPU edge: where the launching thread was last blocked on the GPU before the launch
    blocked = _blocking_syncs(trace, ops)
    ops = ops.drop("x_end", "x_node", "x_start", "p_node", "p_end")
    ops = ops.sort("r_start").join_asof(
        blocked,
        left_on="r_start",
        right_on="b_end",
        by=["step", "global_tid"],
        strategy="backward",
        check_sortedness=False,
    )
    gpu_edge = pl.col("dep_end").is_not_null() & (pl.col("dep_end") >= pl.col("r_start"))
    # the dependency ended while the launch call still ran: the op then waited for its launch
    # (the call's rest and the launch delay), not for the GPU, so that gap is launch time
    waited_launch = gpu_edge & (pl.col("dep_end") < pl.col("r_end"))
    gap = pl.col("start") - pl.col("dep_end")
    cpu_from = pl.coalesce("b_end", "w_start")
    nodes = ops.select(
        "node",
        "step",
        "Idx",
        "start",
        "end",
        pl.when(gpu_edge).then(pl.col("dep_node")).otherwise(pl.col("b_node")).alias("pred"),
        (pl.col("end") - pl.col("start") + pl.when(gpu_edge & ~waited_launch).then(gap).otherwise(0)).alias("gpu"),
        # the launching thread's time from where it was blocked (or the step's start) to the launch,
        # plus the synchronization's return after the op it waited for ended
        pl.when(gpu_edge)
        .then(0)
        .otherwise(pl.col("r_start") - cpu_from + (pl.col("b_end") - pl.col("b_gpu_end")).fill_null(0))
        .alias("cpu"),
        pl.when(waited_launch)
        .then(gap)
        .when(gpu_edge)
        .then(0)
        .otherwise(pl.col("start") - pl.col("r_start"))
        .alias("launch"),
    ).sort("node")
    del ops
    steps = _ends(w, nodes, blocked)
    return _mark(nodes, steps), steps


def _blocking_syncs(trace: Trace, ops: pl.DataFrame) -> pl.DataFrame:
    """Synchronization calls that waited for a GPU op of their step: step, global_tid, b_end (the
    call's end), b_node and b_gpu_end (the op that ended last before the call returned, having
    ended after the call started)."""
    calls = sync_calls(trace)
    w = _windows(trace).select("step", "pid", "w_start", "w_end")
    calls = (
        calls.with_columns((pl.col("global_tid") & PID_MASK).alias("pid"))
        .sort("end")
        .join_asof(w.sort("w_start"), left_on="end", right_on="w_start", by="pid", check_sortedness=False)
        .filter(pl.col("step").is_not_null() & (pl.col("end") <= pl.col("w_end")))
    )
    ends = ops.select("step", pl.col("end").alias("b_gpu_end"), pl.col("node").alias("b_node")).sort("b_gpu_end")
    got = calls.sort("end").join_asof(
        ends, left_on="end", right_on="b_gpu_end", by="step", strategy="backward", check_sortedness=False
    )
    return (
        got.filter(pl.col("b_gpu_end") > pl.col("start"))
        .select("step", "global_tid", pl.col("end").alias("b_end"), "b_node", "b_gpu_end")
        .sort("b_end")
    )


def _ends(w: pl.DataFrame, nodes: pl.DataFrame, blocked: pl.DataFrame) -> pl.DataFrame:
    """Per step: where its path ends (end_node, or null: all CPU), the CPU time after that node
    (tail), and the path's length; `blocked`: _blocking_syncs of the steps' ops."""
    last = (
        nodes.sort("end")
        .group_by("step")
        .agg(pl.col("node").last().alias("last_node"), pl.col("end").last().alias("last_end"))
    )
    s = w.join(last, on="step", how="left")
    # the step's thread, blocked last at the end of a synchronization that waited for the GPU
    s = s.sort("w_end").join_asof(
        blocked.rename({"b_end": "t_end", "b_node": "t_node", "b_gpu_end": "t_gpu_end"}),
        left_on="w_end",
        right_on="t_end",
        by=["step", "global_tid"],
        strategy="backward",
        check_sortedness=False,
    )
    gpu_last = pl.col("last_end").is_not_null() & (pl.col("last_end") >= pl.col("w_end"))
    return s.select(
        "step",
        "label",
        "w_start",
        "w_end",
        pl.when(gpu_last).then(pl.col("last_node")).otherwise(pl.col("t_node")).alias("end_node"),
        pl.when(gpu_last).then(0).otherwise(pl.col("w_end") - pl.coalesce("t_gpu_end", "w_start")).alias("tail"),
        (pl.max_horizontal("w_end", pl.col("last_end").fill_null(pl.col("w_end"))) - pl.col("w_start")).alias("length"),
    ).sort("step")


def _mark(nodes: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """`on_path`: the nodes reachable from each step's end node through `pred` (pointer
    doubling: after round r every node up to 2^(r+1) - 1 links back is marked). A chain stays
    in its step (every predecessor is an op of the same step), so it is no longer than the
    largest step's nodes: that many rounds, not the whole trace's."""
    n = nodes.height
    jump = nodes["pred"].fill_null(n).to_numpy().astype(np.int64)
    jump = np.append(jump, n)  # node n: the root every chain ends in
    on = np.zeros(n + 1, dtype=bool)
    on[steps["end_node"].drop_nulls().to_numpy().astype(np.int64)] = True
    longest = int(np.bincount(nodes["step"].to_numpy()).max(initial=0)) if n else 0  # steps number from 0
    for _ in range(max(1, int(np.ceil(np.log2(longest + 2))))):
        on[jump[on]] = True
        jump = jump[jump]
    return nodes.with_columns(pl.Series("on_path", on[:n]))


def step_table(trace: Trace) -> pl.DataFrame:
    """Per step: its critical path's length, GPU, CPU and launch time on it, the CPU share and
    the verdict, and how many GPU ops lie on it."""
    nodes, steps = _walked(trace)
    if steps.height == 0:
        return pl.DataFrame(schema=STEP_COLUMNS)
    on = (
        nodes.filter("on_path")
        .group_by("step")
        .agg(pl.col("gpu").sum(), pl.col("cpu").sum(), pl.col("launch").sum(), pl.len().alias("n"))
    )
    t = (
        steps.join(on, on="step", how="left")
        .join(_windows(trace).select("step", "pid"), on="step", how="left")
        .with_columns(pl.col("gpu", "cpu", "launch", "n").fill_null(0))
    )
    cpu = pl.col("cpu") + pl.col("tail")
    host = cpu + pl.col("launch")
    return t.select(
        pl.col("label").alias("Step"),
        pid_of(pl.col("pid")).alias("PID"),
        pl.col("w_start").alias("Start (ns)"),
        pl.col("length").alias("Length (ns)"),
        pl.col("gpu").alias("GPU (ns)"),
        cpu.alias("CPU (ns)"),
        pl.col("launch").alias("Launch (ns)"),
        (host * 100.0 / pl.col("length")).round(1).alias("CPU share (%)"),
        pl.when(host * 2 > pl.col("length")).then(pl.lit("CPU-bound")).otherwise(pl.lit("GPU-bound")).alias("Bound by"),
        pl.col("n").alias("Ops on path"),
    ).cast(STEP_COLUMNS)


def top_ops(trace: Trace, top: int = 20) -> pl.DataFrame:
    """What the critical paths of every step spend their time in: each GPU op on a path by
    kernel name (its GPU time there), the CPU and launch time before each op launched from the
    CPU by the op that launched it, and the step's own thread after the last GPU op it waited
    for (TAIL); the `top` largest (0: all). Their sum is the paths' length."""
    nodes, steps = path_nodes(trace)
    on = nodes.filter("on_path")
    total = int(steps["length"].sum()) if steps.height else 0

    def part(kind: str, name: pl.Expr, t: str, frame: pl.DataFrame) -> pl.DataFrame:
        # each part summed by name on its own (a million ops each), not the parts concatenated
        # and grouped by kind and name together
        return (
            frame.select(name.alias("Name"), pl.col(t).alias("t"))
            .filter(pl.col("t") > 0)
            .group_by("Name")
            .agg(pl.col("t").sum().alias("On path (ns)"), pl.len().cast(pl.Int64).alias("Times"))
            .select(pl.lit(kind).alias("Kind"), pl.all())
        )

    parts = [
        part("GPU", pl.col("Kernel"), "gpu", on),
        part("CPU", pl.col("Op").fill_null("(no op)"), "cpu", on),
        part("launch", pl.col("Kernel"), "launch", on),
        part("CPU", pl.lit(TAIL), "tail", steps),
    ]
    out = (
        pl.concat(parts)
        .group_by("Kind", "Name")  # the steps' tails and the ops' CPU time are one kind
        .agg(pl.col("On path (ns)").sum(), pl.col("Times").sum())
        .with_columns(
            (pl.col("On path (ns)") * 100.0 / total).round(1).alias("Share of paths (%)")
            if total
            else pl.lit(None, pl.Float64).alias("Share of paths (%)")
        )
        .sort(["On path (ns)", "Kind", "Name"], descending=[True, False, False])
    )
    return out.head(top) if top else out


def step_verdicts(trace: Trace) -> pl.DataFrame:
    """pid, label, w_start, CPU share (%) and Bound by of each step, for the iteration table."""
    _, steps = _walked(trace)
    w = _windows(trace).select("step", "pid")
    t = step_table(trace).select("CPU share (%)", "Bound by")
    return pl.concat([steps.select("step", "label", "w_start"), t], how="horizontal").join(w, on="step").drop("step")


@derived
def iterations_bound_by(run: Run) -> pl.DataFrame:
    """`kview iterations`' table: the run's iteration table with each iteration's critical path
    verdict (what a rank file's summary keeps, by this table's key)."""
    return with_bound_by(run, iteration_table(run))


def with_bound_by(run: Run, table: pl.DataFrame) -> pl.DataFrame:
    """The iteration table (iterations.iteration_table) with each iteration's critical path
    share on the CPU and its verdict (null where no step range of its rank matches it)."""

    parts = []
    for i, t in enumerate(run.traces):
        units = run.units.filter(pl.col("trace") == i)
        if units.height == 0:
            continue
        v = step_verdicts(t)
        if units.height == 1:
            v = v.with_columns(pl.lit(units["rank"][0], dtype=pl.Int64).alias("rank"))
        else:
            v = v.join(units.select(pl.col("global_pid").alias("pid"), "rank"), on="pid", how="inner")
        parts.append(v.select("rank", "label", "w_start", "CPU share (%)", "Bound by"))
    cols = {"CPU share (%)": pl.Float64, "Bound by": pl.String}
    if not parts:
        return table.with_columns(*[pl.lit(None, dtype=d).alias(c) for c, d in cols.items()])
    v = pl.concat(parts)
    w = iteration_windows(run)
    stepped = w.filter(pl.col("Iteration").is_not_null()).join(
        v, left_on=["rank", "start"], right_on=["rank", "w_start"], how="inner"
    )
    whole = w.filter(pl.col("Iteration").is_null()).join(
        v.filter(pl.col("label") == "(whole trace)"), on="rank", how="inner"
    )
    got = pl.concat([x.select(pl.col("rank").alias("Rank"), "Iteration", *cols) for x in (stepped, whole)]).unique(
        ["Rank", "Iteration"], keep="first"
    )
    return table.join(got, on=["Rank", "Iteration"], how="left", nulls_equal=True, maintain_order="left")
