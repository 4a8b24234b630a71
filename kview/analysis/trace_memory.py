"""Memory from the trace itself, when no allocator snapshot lies beside it: the same
MemoryTimeline (memory_timeline.py) built from what the profiler recorded.

Two sources, each said by name wherever a figure is shown:
- torch.profiler with `profile_memory=True` writes a `[memory]` instant for every allocation
  (+Bytes) and free (-Bytes) of a device's caching allocator, with the allocator's counters
  after it (`Total Allocated`, `Total Reserved`: torch's memory_allocated and memory_reserved)
  and the block's address. Allocated is `Total Allocated`; traces from before those counters
  (PyTorch <= 1.9) carry Bytes only, and allocated is then their running sum: bytes since the
  trace began, not absolute. Bytes are the allocator's blocks, so requested bytes are unknown.
- nsys with `--cuda-memory-usage=true` writes CUDA_GPU_MEMORY_USAGE_EVENTS: every allocation
  and free through CUDA (cudaMalloc, cuMemAlloc). Its level is the device memory (memKind
  Device) in use: under PyTorch, the caching allocator's reserved segments, not its blocks.

An allocation's free is the next event at its address (a shift within each address), and each
allocation is attributed as a kernel launch is (kview.analysis.attribution): a `[memory]` event
by the ops and modules open on its thread at that moment, an nsys event by its CUDA call.
"""

from __future__ import annotations

import polars as pl

from kview.analysis import memory_timeline as mt
from kview.analysis.attribution import call_contexts
from kview.analysis.steps import step_instances
from kview.derived import derived
from kview.errors import TraceError
from kview.io.schema import (
    KINETO_MEMORY,
    MEM_KIND_DEVICE,
    MEM_KIND_DEVICE_STATIC,
    MEM_OP_ALLOC,
    MEM_OP_FREE,
    MEMORY_USAGE,
    PID_MASK,
)
from kview.notation import exact_bytes, human_ms
from kview.trace import Trace

KINETO, NSYS = "kineto", "nsys"
SOURCES = {
    mt.SNAPSHOT: "the allocator snapshot beside the trace",
    KINETO: "the trace's [memory] events (torch.profiler profile_memory=True)",
    NSYS: "the trace's CUDA memory usage events (nsys --cuda-memory-usage=true)",
}
CPU_DEVICE = -1  # Kineto's Device Id of host allocations
NO_CALL = "(no CPU call in the trace)"
EVENTS_SCHEMA = pl.Schema(
    {
        "idx": pl.Int64,
        "t": pl.Int64,
        "device": pl.Int64,
        "bytes": pl.Int64,  # + allocation, - free
        "addr": pl.Int64,
        "allocated": pl.Int64,  # the level after the event (null where the trace has no counter)
        "reserved": pl.Int64,
        "global_tid": pl.Int64,  # the thread that allocated (null: unknown)
        "c_start": pl.Int64,  # the CPU call to attribute it by
        "c_end": pl.Int64,
    }
)


def source_of(trace: Trace) -> str | None:
    """Which memory events the trace holds (KINETO, NSYS), or None."""
    if trace.has(KINETO_MEMORY):
        return KINETO
    if trace.has(MEMORY_USAGE):
        return NSYS
    return None


@derived
def memory_events(trace: Trace) -> pl.DataFrame:
    """Every memory event of the trace (EVENTS_SCHEMA), in the order the profiler recorded them
    (stable by time), `idx` from 0 over all devices."""
    kind = source_of(trace)
    if kind == KINETO:
        m = trace.columns(
            "memory_events",
            ["start", "global_tid", "device_type", "device", "bytes", "total_allocated", "total_reserved", "addr"],
        )
        ev = (
            m.with_row_index("_file")
            .sort("start", maintain_order=True)
            .select(
                pl.col("start").alias("t"),
                # host allocations keep Kineto's device -1 whatever their device type says
                pl.when(pl.col("device_type") == 0)
                .then(pl.lit(CPU_DEVICE))
                .otherwise(pl.col("device"))
                .alias("device"),
                pl.col("bytes").fill_null(0),
                "addr",
                pl.col("total_allocated").alias("allocated"),
                pl.col("total_reserved").alias("reserved"),
                "global_tid",
                pl.col("start").alias("c_start"),
                pl.col("start").alias("c_end"),
            )
        )
    elif kind == NSYS:
        m = trace.columns(
            "memory_usage", ["start", "global_pid", "device", "addr", "bytes", "mem_kind", "mem_op", "correlation"]
        )
        # device memory only (not pinned or pageable host memory, nor module globals)
        m = m.filter((pl.col("mem_kind") == MEM_KIND_DEVICE) & pl.col("mem_op").is_in([MEM_OP_ALLOC, MEM_OP_FREE]))
        r = trace.columns("runtime", ["start", "end", "global_tid", "correlation"]).select(
            pl.col("start").alias("c_start"),
            pl.col("end").alias("c_end"),
            "global_tid",
            "correlation",
            (pl.col("global_tid") & PID_MASK).alias("global_pid"),
        )
        r = r.join(m.select("correlation", "global_pid").unique(), on=["correlation", "global_pid"], how="semi")
        r = r.unique(["correlation", "global_pid"], keep="first")
        m = m.join(r, on=["correlation", "global_pid"], how="left", maintain_order="left")
        ev = (
            m.with_row_index("_file")
            .sort("start", maintain_order=True)
            .select(
                pl.col("start").alias("t"),
                "device",
                pl.when(pl.col("mem_op") == MEM_OP_FREE)
                .then(-pl.col("bytes"))
                .otherwise(pl.col("bytes"))
                .alias("bytes"),
                "addr",
                pl.lit(None, pl.Int64).alias("allocated"),
                pl.lit(None, pl.Int64).alias("reserved"),
                "global_tid",
                "c_start",
                "c_end",
            )
        )
    else:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    return ev.with_row_index("idx").cast(EVENTS_SCHEMA).select(list(EVENTS_SCHEMA))


def devices(trace: Trace) -> pl.DataFrame:
    """device, events: the devices with memory events, the busiest GPU first (host last)."""
    return (
        memory_events(trace)
        .group_by("device")
        .len("events")
        .sort([pl.col("device") == CPU_DEVICE, "events", "device"], descending=[False, True, False])
    )


def timeline(trace: Trace, device: int | None = None) -> mt.MemoryTimeline | None:
    """The memory timeline of one device (default: the GPU with most events) from the trace's
    own events, or None when it has none."""

    kind = source_of(trace)
    devs = devices(trace)
    if kind is None or devs.height == 0:
        return None
    if device is None:
        device = int(devs["device"][0])
    elif device not in devs["device"].to_list():
        have = ", ".join(str(d) for d in sorted(devs["device"].to_list()))
        raise TraceError(trace.path, f"has no memory events of device {device} (devices: {have})")
    ev = memory_events(trace).filter(pl.col("device") == device)
    counted = kind == KINETO and ev["allocated"].null_count() == 0
    # the level before the first event: what the counter says less the first event's bytes;
    # without a counter the level counts from zero at the first event
    base = int(ev["allocated"][0] - ev["bytes"][0]) if counted else 0
    level = pl.col("allocated") if counted else base + pl.col("bytes").cum_sum()
    series = ev.select(
        "idx",
        "t",
        level.alias("allocated"),
        pl.lit(None, pl.Int64).alias("requested"),
        pl.col("reserved") if ev["reserved"].null_count() < ev.height else pl.lit(None, pl.Int64).alias("reserved"),
    )
    ctx = _contexts(trace, ev)
    alloc_ev = ev.select(
        "idx",
        "t",
        pl.when(pl.col("bytes") >= 0).then(pl.lit(mt.ALLOC)).otherwise(pl.lit(mt.FREE)).alias("action"),
        "addr",
        pl.col("bytes").abs().alias("size"),
        pl.col("bytes").abs().alias("block"),
        pl.lit(None, pl.Int64).alias("stream"),
    ).join(ctx, on="idx", how="left")
    # an allocation without a CPU call in the trace (made before an nsys capture range began)
    alloc_ev = alloc_ev.with_columns(
        pl.when(pl.col("action") == mt.ALLOC).then(pl.col("site").fill_null(NO_CALL)).alias("site"),
        pl.col("Op").fill_null(NO_CALL),
    )
    events = alloc_ev.select("idx", "t", "action", "addr", "size", "block", "stream", "site")
    if ev["addr"].null_count() == ev.height:  # no addresses (PyTorch <= 1.9): no pairs, no live set
        allocations = pl.DataFrame(schema=ALLOCATION_SCHEMA)
    else:
        paired = mt._allocations(events.filter(pl.col("addr").is_not_null()), _NO_BLOCKS)
        # what was allocated before the first event and never freed in the trace, as one row: the
        # live set then adds up to the level at every event
        left = base - int(paired.filter(pl.col("idx") < 0)["block"].sum())
        rest = pl.DataFrame(
            {"idx": [-1], "size": [left], "block": [left], "site": [mt.BEFORE]},
            schema={"idx": pl.Int64, "size": pl.Int64, "block": pl.Int64, "site": pl.String},
        )
        allocations = (
            pl.concat([paired, rest.filter(pl.col("block") > 0)], how="diagonal_relaxed")
            .join(alloc_ev.select("idx", "Direction", "Layer", "Op"), on="idx", how="left")
            .with_columns(
                pl.col("Direction").fill_null("-"),
                pl.col("Layer").fill_null("-"),
                pl.when(pl.col("idx") < 0).then(pl.lit(mt.BEFORE)).otherwise(pl.col("Op").fill_null("-")).alias("Op"),
            )
            .cast(ALLOCATION_SCHEMA)
            .select(list(ALLOCATION_SCHEMA))
        )
    facts = {
        "source": SOURCES[kind],
        "relative": kind == KINETO and not counted,
        "static": _static_bytes(trace, device) if kind == NSYS else None,
    }
    return mt.MemoryTimeline(
        trace.name,
        device,
        events,
        series,
        allocations,
        mt.trace_phases(trace),
        "trace",
        facts,
        source=kind,
        origin=0,  # the trace's frames count from its time zero
        steps=steps(trace),
    )


ALLOCATION_SCHEMA = pl.Schema(
    {
        "idx": pl.Int64,
        "t": pl.Int64,
        "addr": pl.Int64,
        "size": pl.Int64,
        "block": pl.Int64,
        "site": pl.String,
        "free_idx": pl.Int64,
        "free_t": pl.Int64,
        "Direction": pl.String,
        "Layer": pl.String,
        "Op": pl.String,
    }
)
_NO_BLOCKS = pl.DataFrame(schema={"addr": pl.Int64, "size": pl.Int64, "block": pl.Int64})


def _contexts(trace: Trace, ev: pl.DataFrame) -> pl.DataFrame:
    """idx, Direction, Layer, Op, site of every allocation event: the op and module open on its
    thread when it was made (as a kernel launched there would read)."""

    calls = ev.filter((pl.col("bytes") > 0) & pl.col("global_tid").is_not_null() & pl.col("c_start").is_not_null())
    calls = calls.select(
        pl.col("idx").alias("call_id"), "global_tid", pl.col("c_start").alias("start"), pl.col("c_end").alias("end")
    )
    if calls.height == 0 or not trace.has("NVTX_EVENTS"):
        ctx = calls.select(
            "call_id", pl.lit("-").alias("Direction"), pl.lit("-").alias("Layer"), pl.lit("-").alias("Op")
        )
    else:
        ctx = call_contexts(trace, calls)
    return ctx.select(
        pl.col("call_id").alias("idx"),
        "Direction",
        "Layer",
        "Op",
        pl.when(pl.col("Layer") == "-")
        .then(pl.col("Op"))
        .otherwise(pl.format("{} in {}", "Op", "Layer"))
        .alias("site"),
    )


def _static_bytes(trace: Trace, device: int) -> int:
    """Device memory of module globals (memKind Device Static), reported apart from the level."""
    m = trace.columns("memory_usage", ["device", "bytes", "mem_kind", "mem_op"])
    return int(
        m.filter(
            (pl.col("device") == device)
            & (pl.col("mem_kind") == MEM_KIND_DEVICE_STATIC)
            & (pl.col("mem_op") == MEM_OP_ALLOC)
        )["bytes"].sum()
    )


def steps(trace: Trace) -> pl.DataFrame:
    """The trace's steps (ProfilerStep#N, step_N, ...) as Phase, start, end."""

    s = step_instances(trace)
    return s.sort("start").select(pl.col("label").alias("Phase"), "start", "end")


def level_name(tl: mt.MemoryTimeline) -> str:
    """What the timeline's `allocated` level is, for its source."""
    if tl.source == NSYS:
        return "CUDA device memory (cudaMalloc'd; under PyTorch, its reserved segments)"
    if tl.facts.get("relative"):
        return "allocated since the trace began (the events carry no totals)"
    return "allocated (torch memory_allocated)"


def summary(tl: mt.MemoryTimeline) -> list[tuple[str, str]]:
    """Facts of a timeline built from the trace's own events, each naming its source."""

    pk = tl.peak

    res, end = tl.series.select(pl.col("reserved").max(), pl.col("t").max()).row(0)
    rows = [
        ("Source", tl.facts.get("source", tl.source)),
        ("Trace", tl.name),
        ("Device", "CPU (host allocations)" if tl.device == CPU_DEVICE else str(tl.device)),
        ("Events", f"{tl.events.height:,}"),
        ("Span", f"{human_ms(end - tl.start, 3)} from the trace's start" if end is not None else "-"),
        (f"Peak {level_name(tl)}", exact_bytes(int(pk["allocated"] or 0))),
        ("Peak at", f"{human_ms(pk['t'] - tl.start, 3)}, event {pk['idx']:,}" if pk["t"] is not None else "-"),
    ]
    if res is not None:
        rows.append(("Peak reserved (torch memory_reserved)", exact_bytes(int(res))))
    if tl.facts.get("static") is not None:
        rows.append(("Device static memory (module globals, not in the level)", exact_bytes(int(tl.facts["static"]))))
    rows.append(
        (
            "Live at the peak",
            "by the op and module open when each block was allocated"
            if tl.allocations.height
            else "unknown (the events carry no addresses, so allocations cannot be paired with their frees)",
        )
    )
    rows.append(("Phases from", "the trace's ranges" if tl.phases.height else "(none in the trace)"))
    return rows


def summary_data(tl: mt.MemoryTimeline) -> pl.DataFrame:
    """`summary` as one row of numbers for the data formats (bytes as integers, times in ms from
    the trace's start), the source and what its level is named in their own columns."""
    pk = tl.peak
    res, end = tl.series.select(pl.col("reserved").max(), pl.col("t").max()).row(0)
    row = {
        "Source": tl.facts.get("source", tl.source),
        "Trace": tl.name,
        "Device": tl.device,
        "Events": tl.events.height,
        "Span (ms)": (end - tl.start) / 1e6 if end is not None else None,
        "Level": level_name(tl),
        "Peak (B)": int(pk["allocated"] or 0),
        "Peak at (ms)": (pk["t"] - tl.start) / 1e6 if pk["t"] is not None else None,
        "Peak event": pk["idx"],
        "Peak reserved (B)": res,
        "Device static (B)": tl.facts.get("static"),
        "Live at the peak known": tl.allocations.height > 0,
    }
    schema = {
        "Source": pl.String,
        "Trace": pl.String,
        "Device": pl.Int64,
        "Events": pl.Int64,
        "Span (ms)": pl.Float64,
        "Level": pl.String,
        "Peak (B)": pl.Int64,
        "Peak at (ms)": pl.Float64,
        "Peak event": pl.Int64,
        "Peak reserved (B)": pl.Int64,
        "Device static (B)": pl.Int64,
        "Live at the peak known": pl.Boolean,
    }
    return pl.DataFrame([row], schema=schema)
