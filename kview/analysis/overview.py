"""The facts and findings of the Overview: what the trace is, how busy the GPU was, where
the time went, and what a user would act on. All column-wise; the TUI and `kview overview`
render the same result."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

import polars as pl

from kview.analysis import nvtx_ranges
from kview.analysis.attribution import attribute, categorized, gpu_ops
from kview.analysis.collectives import stragglers
from kview.analysis.cpu_ops import cpu_op_summary, holdings, no_gpu_work_note
from kview.analysis.critical_path import path_walk, step_table
from kview.analysis.efficiency import finding as tensor_core_finding
from kview.analysis.gpu_time import merge_intervals
from kview.analysis.launches import SYNC_APIS, SYNC_MEMCPY_APIS, gap_rows, idle_totals, launches, sync_calls
from kview.analysis.layers import phase_labels, phase_table, phase_times
from kview.analysis.rank_summary import rank_summary
from kview.analysis.ranks import make_run
from kview.analysis.sanity import impossible, warning
from kview.analysis.steps import step_instances
from kview.derived import Codec, derived
from kview.notation import fmt_ns
from kview.trace import Trace


@dataclass
class Overview:
    facts: list[tuple[str, str]]
    busy: pl.DataFrame  # per device: busy ns, span ns, busy %
    gaps: pl.DataFrame  # largest idle gaps
    categories: pl.DataFrame  # time by category
    phases: pl.DataFrame  # time by phase
    top_kernels: pl.DataFrame
    findings: list[str] = field(default_factory=list)
    cpu_ops: pl.DataFrame = field(default_factory=pl.DataFrame)  # top CPU ops, for traces without GPU work
    ranks: pl.DataFrame = field(default_factory=pl.DataFrame)  # per rank, when the trace holds several
    critical_path: pl.DataFrame = field(default_factory=pl.DataFrame)  # per step: its critical path, bound by


def time_zero(trace: Trace) -> str:
    """What every time shown counts from, and where it lies on the clock the file records (a
    time as the file stores it is the time shown plus the trace's origin)."""
    import datetime

    clock = trace.clock
    what = "first event" if trace.origin else "session start"
    if clock is None:
        return what
    name, zero = clock
    if name == "UTC":
        at = datetime.datetime.fromtimestamp(zero // 10**9, datetime.timezone.utc)
        return f"{what}, {at:%Y-%m-%d %H:%M:%S}.{zero % 10**9:09d} UTC"
    return f"{what}, {zero:,} ns on the {name}"


# the Overview as the frame cache keeps it: a frame per field, its facts and findings as text
_PARTS = tuple(f.name for f in fields(Overview))


def _encode(o: Overview) -> tuple[pl.DataFrame, ...]:
    text = {
        "facts": pl.DataFrame(o.facts, schema={"fact": pl.String, "value": pl.String}, orient="row"),
        "findings": pl.DataFrame({"finding": o.findings}, schema={"finding": pl.String}),
    }
    return tuple(text.get(p, getattr(o, p)) for p in _PARTS)


def _decode(f: tuple[pl.DataFrame, ...]) -> Overview:
    got: dict[str, Any] = dict(zip(_PARTS, f))
    return Overview(**got | {"facts": got["facts"].rows(), "findings": got["findings"].to_series().to_list()})


OVERVIEW = Codec("overview:" + ",".join(_PARTS), _PARTS, _encode, _decode)


@derived(key="overview", version="1", persist=True, codec=OVERVIEW)
def overview_of(trace: Trace) -> Overview:
    """The Overview of `trace`, kept in the frame cache: a second look (the explorer reopening a
    trace, `kview overview` again) reads its few small tables instead of attributing every
    kernel and walking every step's critical path again (a minute at a million kernels)."""
    return build(trace)


def overview(trace: Trace) -> Overview:
    """The Overview of `trace` (kept, see overview_of). Its sentences name the trace's file (the
    commands to run next): one kept under another name of the same file (a link to it) is made
    again for this name, not shown with the other's."""
    o = overview_of(trace)
    return o if o.facts[0] == ("Trace", trace.name) else build(trace)


def build(trace: Trace, launch_bound_run: int = 20) -> Overview:
    """The Overview of `trace`, made. A trace opened for one command (`Trace.one_command`:
    `kview overview`) lets the NVTX ranges, their names and nesting go once every table the
    Overview makes of them is made (the attribution, holdings, phases, steps), a gigabyte at a
    million kernels, rather than holding them through the rest. Where attribution lets them go
    itself (`Trace.ranges_only_for_attribution`), those tables are made first."""
    if trace.ranges_only_for_attribution:
        range_tables(trace)
    # asked before attribution, which may let the copies' columns go
    pageable = pageable_finding(trace)
    if trace.one_command:
        # the raw kernel, copy and runtime columns go once attribution has joined them (0.2 GB
        # at its peak on a dense trace): the rest reads the GPU ops, and the runtime calls'
        # synchronizations again
        trace.only_attribution = True
        trace.launch_dims = False
    # a trace opened for the Overview alone never makes the whole attributed table: its
    # shapes, paths and launch dimensions are nowhere in it
    a = categorized(trace) if trace.one_command else attribute(trace)
    # GPU work that ends before it starts or lies outside the session would show as negative
    # busy time or a span past the trace: left out of every figure here, and said so
    bad = warning(trace)
    if bad:
        a = a.filter(~impossible(pl.col("Start (ns)"), pl.col("Start (ns)") + pl.col("Duration (ns)"), trace))
    meta = trace.metadata
    producer = meta.get("EXPORT_PRODUCT_NAME", "?")
    version = meta.get("EXPORT_PRODUCT_VERSION") or meta.get("CAPTURE_TORCH", "")
    facts = [("Trace", trace.name), ("Made by", f"{producer} {version}".strip()), ("Time zero", time_zero(trace))]
    dev = trace.devices
    if dev.height and "name" in dev.columns:
        facts.append(("GPU", ", ".join(str(n) for n in dev["name"].drop_nulls().unique(maintain_order=True).to_list())))
    if "CAPTURE_MODEL" in meta:
        facts.append(
            (
                "Workload",
                " ".join(
                    f"{k[8:].lower()}={v}"
                    for k, v in meta.items()
                    if k.startswith("CAPTURE_") and k not in ("CAPTURE_COMMAND", "CAPTURE_BACKEND")
                ),
            )
        )
    ops = a.select(
        pl.col("Device").alias("device"),
        pl.col("Start (ns)").alias("start"),
        (pl.col("Start (ns)") + pl.col("Duration (ns)")).alias("end"),
        "Kernel",
        "Category",
        "Stream",
    )
    if ops.height:
        span = int(ops.select(pl.col("end").max() - pl.col("start").min()).item())
        facts += [
            ("GPU span", fmt_ns(span)),
            ("Devices", str(ops["device"].n_unique())),
            ("Streams", str(ops["Stream"].n_unique())),
            ("GPU ops", f"{ops.height:,}"),
        ]
    procs = trace.processes
    if procs.height and ops.height:
        gp = (
            gpu_ops(trace).filter(pl.col("kind") == "kernel")["global_pid"].unique()
            if trace.has("CUPTI_ACTIVITY_KIND_KERNEL")
            else None
        )
        if gp is not None:
            names = procs.filter(pl.col("global_pid").is_in(gp.implode()))
            if names.height:
                facts.append(("Processes", ", ".join(f"{n} ({p})" for n, p in names.select("name", "pid").iter_rows())))
    h = holdings(trace)
    # the impossible rows are left out of the phases too, as the finding says
    phases = phase_table(trace, a["Idx"].cast(pl.Int64)) if bad else phase_times(trace)
    step_instances(trace)  # what critical_path_section and rank_section ask of the ranges
    if trace.one_command:
        nvtx_ranges.release(trace)
    facts += [(k[0].upper() + k[1:], f"{h[k]:,}") for k in ("CPU ops", "ranges", "API calls") if h[k]]
    if not ops.height:
        facts.append(("GPU kernels", "none"))
    if meta.get("KINETO_EVENTS_NOT_READ"):
        facts.append(("Not read", meta["KINETO_EVENTS_NOT_READ"]))
    busy = gaps = pl.DataFrame()
    findings: list[str] = []
    cpu_ops = pl.DataFrame()
    if not ops.height:
        cpu_ops = cpu_op_summary(trace).head(10)
        note = no_gpu_work_note(trace)
        findings.append(
            note[0].upper()
            + note[1:]
            + "."
            + (" The top CPU ops by self time are listed instead of kernels." if cpu_ops.height else "")
        )
    if ops.height:
        busy, gaps = busy_and_gaps(ops)
        findings += launch_bound(ops, launch_bound_run)
    n_ops = ops.height
    del ops  # the rest asks only whether there were GPU ops
    cats = (
        a.group_by("Category")
        .agg(pl.col("Duration (ns)").sum().alias("Time (ns)"), pl.len().alias("Ops"))
        .sort(["Time (ns)", "Category"], descending=[True, False])  # equal times: by name, the same every run
    )
    if cats.height:
        cats = cats.with_columns((pl.col("Time (ns)") * 100.0 / pl.col("Time (ns)").sum()).round(1).alias("Share (%)"))
    top = (
        a.select("Kernel", "Duration (ns)", "Category")  # three columns filtered, not every one
        .filter(~pl.col("Category").is_in(["memcpy", "memset"]))
        .group_by("Kernel")
        .agg(pl.col("Duration (ns)").sum().alias("Total (ns)"), pl.len().alias("Instances"), pl.col("Category").first())
        .sort(["Total (ns)", "Kernel"], descending=[True, False])
        .head(10)
    )
    if trace.one_command and n_ops:
        # the launches (their CPU op) are the last thing made of the attributed table here: it
        # goes once they are made, rather than through the idle gaps and the critical paths
        launches(trace)
        trace.store.drop(attribute, categorized)
    del a
    findings += pageable
    findings += sync_findings(trace)
    if trace.one_command:  # the synchronizations are all the rest asks of the runtime calls
        trace.let_go("runtime")
    steps = pl.DataFrame()
    if n_ops:
        findings += launch_findings(trace)
        if trace.one_command:  # each table of a million rows goes once its last question is asked
            trace.store.drop(gap_rows)
        steps, line = critical_path_section(trace)
        if trace.one_command:
            trace.store.drop(path_walk, launches)
        findings += [line] if line else []
    least = busy.select(pl.col("Busy (%)").min()).item() if busy.height else None
    if least is not None and least < 50:
        findings.append(
            f"GPU idle: device {busy.sort('Busy (%)', 'Device').row(0)[0]} is busy only "
            f"{least}% of its span; see the largest idle gaps."
        )

    if (tc := tensor_core_finding(trace)) is not None:
        findings.append(tc)
    if bad:
        findings.insert(
            0,
            f"Impossible data: {bad[len('impossible rows: ') :]}. They are left out of every figure of "
            f"this overview (nsys stats counts them as they are).",
        )
    ranks, note = rank_section(trace)
    if note:  # the first thing to act on in a distributed run (after data that cannot be)
        findings.insert(1 if bad else 0, note)
    if not findings:
        findings.append("No launch-bound stretches, pageable or synchronous copies, or long synchronizations found.")
    return Overview(facts, busy, gaps, cats, phases, top, findings, cpu_ops, ranks, steps)


def pageable_finding(trace: Trace) -> list[str]:
    """The copies from or to pageable host memory, as a finding."""
    if not trace.has("CUPTI_ACTIVITY_KIND_MEMCPY"):
        return []
    m = trace.columns("memcpy", ["start", "end", "src_kind", "dst_kind", "bytes"])
    pageable = m.filter((pl.col("src_kind") == 0) | (pl.col("dst_kind") == 0))
    if pageable.height:
        return [
            f"Pageable memcpy: {pageable.height:,} copies ({int(pageable['bytes'].sum()) / 1e6:,.1f} MB, "
            f"{fmt_ns(int((pageable['end'] - pageable['start']).sum()))}) use pageable host memory; "
            f"pin it (pin_memory=True) to copy asynchronously at full speed."
        ]
    return []


def sync_findings(trace: Trace) -> list[str]:
    """The long synchronizations and synchronous copies of the runtime calls (millions of
    rows, let go on return)."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return []
    findings: list[str] = []
    r = sync_calls(trace).with_columns((pl.col("end") - pl.col("start")).alias("d"))
    sync = r.filter(pl.col("api").is_in(list(SYNC_APIS)) & (pl.col("d") > 1_000_000))
    if sync.height:
        worst = sync.sort(["d", "start"], descending=[True, False]).row(0, named=True)
        findings.append(
            f"Long synchronizations: {sync.height:,} sync calls over 1 ms, {fmt_ns(int(sync['d'].sum()))} "
            f"in all; the longest is {worst['api']} at {fmt_ns(worst['d'])}. The CPU waits there "
            f"instead of queueing work."
        )
    sm = r.filter(pl.col("api").is_in(list(SYNC_MEMCPY_APIS)))
    if sm.height:
        findings.append(
            f"Synchronous memcpy/memset: {sm.height:,} calls ({fmt_ns(int(sm['d'].sum()))}) block the "
            f"host; prefer the Async variants on a stream."
        )
    return findings


def busy_and_gaps(ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per device its busy time and span, and the five largest idle gaps with the kernel after
    each, from the GPU ops (device, start, end, Kernel). Its own function: the million-row
    frames it sorts and joins go when it returns, not held through the rest of the Overview."""
    seg = merge_intervals(ops, ["device"])  # where at least one op runs, sorted by device and start
    per = seg.group_by("device").agg(
        (pl.col("end") - pl.col("start")).sum().alias("busy"),
        pl.col("start").min().alias("s"),
        pl.col("end").max().alias("e"),
    )
    busy = per.select(
        pl.col("device").alias("Device"),
        pl.col("busy").alias("Busy (ns)"),
        (pl.col("e") - pl.col("s")).alias("Span (ns)"),
        (pl.col("busy") * 100.0 / (pl.col("e") - pl.col("s"))).round(1).alias("Busy (%)"),
    ).sort("Device")
    g = seg.with_columns(pl.col("start").shift(-1).over("device").alias("next"))
    g = g.filter(pl.col("next").is_not_null()).with_columns((pl.col("next") - pl.col("end")).alias("gap"))
    # the five largest of a million gaps, not every gap sorted ((gap, end, device) orders
    # segments totally: the same five)
    top_gaps = g.top_k(5, by=["gap", "end", "device"], reverse=[False, True, True]).sort(
        ["gap", "end", "device"], descending=[True, False, False]
    )
    # the kernel after each of those five gaps: the ops starting then, not every op made unique
    nxt = (
        ops.select("device", pl.col("start").alias("next"), pl.col("Kernel").alias("Next kernel"))
        .join(top_gaps.select("device", "next"), on=["device", "next"], how="semi", maintain_order="left")
        .unique(["device", "next"], keep="first", maintain_order=True)
    )
    gaps = top_gaps.join(nxt, on=["device", "next"], how="left").select(
        pl.col("device").alias("Device"),
        pl.col("gap").alias("Idle (ns)"),
        pl.col("end").alias("From (ns)"),
        "Next kernel",
    )
    return busy, gaps


def launch_bound(ops: pl.DataFrame, launch_bound_run: int) -> list[str]:
    """The launch-bound finding of the GPU ops (device, start, end, Category, Stream): runs of
    kernels, on one stream, each shorter than the idle gap before it."""
    k = ops.filter(pl.col("Category").is_in(["memcpy", "memset"]).not_()).sort(["device", "Stream", "start"])
    # sorted by stream, so a stream's rows are consecutive: its first row is where the device
    # or stream changes (shifts and sums over the whole column, not a window per stream)
    first = (
        (pl.int_range(pl.len()) == 0)
        | pl.col("device").ne_missing(pl.col("device").shift(1))
        | pl.col("Stream").ne_missing(pl.col("Stream").shift(1))
    )
    k = k.with_columns(first.alias("first"))
    prev_end = pl.when(pl.col("first")).then(None).otherwise(pl.col("end").shift(1))
    k = k.with_columns((pl.col("start") - prev_end).alias("gap_before"))
    k = k.with_columns(((pl.col("end") - pl.col("start")) < pl.col("gap_before")).fill_null(False).alias("lb"))
    # a run starts where lb changes or a stream does (numbered across streams: a key per run)
    k = k.with_columns((pl.col("first") | (pl.col("lb") != pl.col("lb").shift(1))).cum_sum().alias("run"))
    runs = (
        k.filter("lb")
        .group_by(["device", "Stream", "run"])
        .agg(pl.len().alias("n"), pl.col("start").min().alias("s"), pl.col("end").max().alias("e"))
        .filter(pl.col("n") >= launch_bound_run)
    )
    if runs.height:
        # the longest; of equal ones the first (group_by's order is not the same every run)
        worst = runs.sort(["n", "s", "device", "Stream"], descending=[True, False, False, False]).row(0, named=True)
        return [
            f"Launch-bound: {runs.height} stretch(es) of ≥{launch_bound_run} consecutive kernels "
            f"each shorter than the idle gap before it ({int(runs['n'].sum()):,} kernels, "
            f"{fmt_ns(int((runs['e'] - runs['s']).sum()))} of wall time); the longest has "
            f"{worst['n']} kernels on stream {worst['Stream']}. Fuse ops, use CUDA graphs or "
            f"torch.compile."
        ]
    return []


def range_tables(trace: Trace) -> None:
    """What the Overview asks of the NVTX ranges besides the attribution (its counts, the phase
    instances, the steps), made so that attribution can let the ranges and their names go
    (`Trace.ranges_only_for_attribution`) without anything asking for them again after: their
    read and labelling again would cost seconds and a gigabyte at a million kernels."""
    holdings(trace)
    phase_labels(trace)  # and the phase instances it is made of (phase_table reads both)
    step_instances(trace)  # what critical_path_section and rank_section ask of the ranges


def launch_findings(trace: Trace) -> list[str]:
    """Where the streams' idle time was mostly the host's (late launches, waits in a
    synchronization), say so and point at the Launches view (key 0, `kview launches`)."""
    idle = idle_totals(trace)
    total = sum(idle.values())
    host = idle["host"] + idle["sync"]
    if total == 0 or host * 2 < total:
        return []
    return [
        f"Host-bound streams: {host * 100 / total:.0f}% of the streams' idle time ({fmt_ns(host)} of "
        f"{fmt_ns(total)}) came before a launch the host made late"
        + (f", {fmt_ns(idle['sync'])} of it after waiting in a synchronization" if idle["sync"] else "")
        + f". The Launches view (key 0) and `kview launches {trace.name}` show the gaps and the CPU call "
        f"around each."
    ]


CRITICAL_PATH_STEPS = 20  # steps the Overview lists (`kview critical-path` has every one)


def critical_path_section(trace: Trace) -> tuple[pl.DataFrame, str]:
    """The first steps' critical path (length, CPU share, bound by) and a finding saying how
    many steps the CPU held, pointing at key 0 and `kview critical-path`."""

    t = step_table(trace)
    if t.height == 0:
        return t, ""
    n_cpu = int((t["Bound by"] == "CPU-bound").sum())
    length = int(t["Length (ns)"].sum())
    host = int((t["CPU (ns)"] + t["Launch (ns)"]).sum())
    line = (
        f"Critical path: {n_cpu} of {t.height} step(s) CPU-bound; the CPU and launches hold "
        f"{host * 100 / length:.0f}% of the steps' critical paths ({fmt_ns(host)} of {fmt_ns(length)}). "
        f"The Launches view (key 0, t) and `kview critical-path {trace.name}` list the ops on them."
        if length
        else ""
    )
    shown = t.select("Step", "PID", "Length (ns)", "GPU (ns)", "CPU (ns)", "Launch (ns)", "CPU share (%)", "Bound by")
    if shown["PID"].n_unique() < 2:
        shown = shown.drop("PID")
    return shown.head(CRITICAL_PATH_STEPS), line


RANK_COLUMNS = ("Rank", "Iterations", "Wall (ns)", "Busy (% of wall)", "Exposed comm (ns)", "Exposed (% of comm)")


def rank_section(trace: Trace) -> tuple[pl.DataFrame, str]:
    """A trace holding several processes or GPUs (`nsys profile torchrun ...`) as the ranks of
    one run, as `kview ranks` numbers and measures them, and a finding naming the straggler when
    one rank waited in collectives for another. Empty for a trace of one rank."""

    run = make_run([trace])
    if run.units.height < 2:
        return pl.DataFrame(), ""
    s = rank_summary(run)
    table = s.select(*RANK_COLUMNS, "Waited (ns)")
    st = stragglers(run)["Straggler"].drop_nulls()
    waiting = s.sort(["Waited (ns)", "Rank"], descending=[True, False]).row(0, named=True)
    if st.len() == 0 or waiting["Waited (ns)"] == 0:
        return table, ""
    top = st.mode().sort()[0]
    return table, (
        f"Straggler: rank {top} joined the collectives last in {(st == top).sum()} of {st.len()} iterations; rank "
        f"{waiting['Rank']} waited {fmt_ns(waiting['Waited (ns)'])} in them, and {waiting['Exposed (% of comm)']}% "
        f"of its communication is exposed. `kview ranks {trace.name}` has the details."
    )
