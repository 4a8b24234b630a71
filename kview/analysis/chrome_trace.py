"""A window of a trace as Chrome trace-event JSON, the hand-off to graphical viewers
(ui.perfetto.dev, chrome://tracing): what `kview export` and the Timeline's `E` write.

The events are the ones the Timeline draws, in kview's one clock (µs from the trace's start):
- a process per GPU (pid = the device) with a thread per stream: kernels, memcpys and memsets
  (`ph: X`), with kview's attribution (direction, layer, op, category) in their args;
- a process per host process with its threads: CUDA API calls and the NVTX / record_function
  ranges (op markers as `cpu_op`, module calls as `python_function` `nn.Module: X`, the rest
  as `user_annotation`), named as torch.profiler names them, so kview reads the file back;
- a flow arrow (`s` at the launch call, `f` at the op) from each launch to its GPU op;
- counters (`ph: C`) per GPU: GPU ops queued (launched and not finished) and, when the trace
  recorded its memory (trace_memory), the memory level.

Every event is one row of a frame and its JSON text is made by polars (struct.json_encode for
names and args; timestamps written from integer ns as exact decimal µs), so a million kernels
never pass through a Python loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from kview.analysis import attribution as at
from kview.analysis import filters
from kview.analysis import nvtx_ranges as nv
from kview.analysis import trace_memory as tm
from kview.io.kineto_reader import MEMCPY_KINDS, MODULE_PREFIX
from kview.io.schema import pid_of, tid_of
from kview.trace import Trace

# the categories torch.profiler writes (kview's Kineto reader reads them back)
CATEGORY = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}
FLOW = "ac2g"  # torch.profiler's name for a launch -> GPU op arrow


@dataclass(frozen=True)
class Window:
    """What to export: ns from the trace's start (None: the trace's own bounds), and a filter
    in the Kernels language that the GPU ops must match (their launches go with them)."""

    t0: int | None = None
    t1: int | None = None
    filter: str | None = None


def us(ns: pl.Expr) -> pl.Expr:
    """Integer ns -> the exact decimal text of µs (`12.345`, `-0.007`): a float would round."""
    a = ns.abs()
    sign = pl.when(ns < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    return pl.concat_str(sign, (a // 1000).cast(pl.String), pl.lit("."), (a % 1000).cast(pl.String).str.zfill(3))


@dataclass(frozen=True)
class Events:
    """Events of one kind: a frame and the expression making each row's JSON text, made a
    chunk of rows at a time (`texts`), so a file of millions of events never exists as text."""

    frame: pl.DataFrame
    line: pl.Expr

    def __len__(self) -> int:
        return self.frame.height

    def texts(self, chunk: int) -> Iterator[str]:
        """The events' JSON objects, `chunk` at a time, joined by `,\\n`."""
        for i in range(0, self.frame.height, chunk):
            yield self.frame.slice(i, chunk).select(self.line.str.join(",\n")).item()


NO_EVENTS = Events(pl.DataFrame(), pl.lit(""))


def _lines(frame: pl.DataFrame, head: list[pl.Expr], args: pl.Expr | None, ts: bool = True) -> Events:
    """One JSON object per row: `head` (named expressions, strings escaped by polars), then the
    row's ts (and dur, id, bp where the frame has them) and its args object."""
    obj = pl.struct(head).struct.json_encode()
    parts = [obj.str.head(-1)]  # without the closing brace
    if ts:
        parts.append(pl.concat_str(pl.lit(',"ts":'), us(pl.col("ts"))))
    if "dur" in frame.columns:
        parts.append(pl.concat_str(pl.lit(',"dur":'), us(pl.col("dur"))))
    if "flow_id" in frame.columns:
        parts.append(pl.concat_str(pl.lit(',"id":'), pl.col("flow_id").cast(pl.String)))
    if "bp" in frame.columns:
        parts.append(pl.lit(',"bp":"e"'))
    if args is not None:
        parts.append(pl.concat_str(pl.lit(',"args":'), args))
    parts.append(pl.lit("}"))
    return Events(frame, pl.concat_str(parts).alias("line"))


def window_ops(trace: Trace, w: Window) -> pl.DataFrame:
    """The attributed GPU ops in the window (those that overlap it) matching the filter, with
    their launch call: Idx, kind, ts/dur (ns from the start), device, stream, correlation,
    grid/block, r_start/r_end/global_tid (null: launched outside the trace), Kernel and the
    attribution columns."""

    table = at.attribute(trace)
    if table.height == 0:
        return table
    if w.filter:
        table = filters.apply(table, w.filter)
    ops = at.launched_ops(trace).select(
        "Idx",
        "kind",
        "global_pid",
        *(f"{d}_{a}" for d in ("grid", "block") for a in "xyz"),
        "r_start",
        "r_end",
        "global_tid",
    )
    t = table.join(ops, on="Idx", how="left").with_columns(
        pl.col("Start (ns)").alias("ts"), pl.col("Duration (ns)").alias("dur")
    )
    if w.t0 is not None:
        t = t.filter(pl.col("ts") + pl.col("dur") > w.t0)
    if w.t1 is not None:
        t = t.filter(pl.col("ts") < w.t1)
    return t


def _gpu_events(trace: Trace, ops: pl.DataFrame) -> Events:
    labels = {v: k for k, v in MEMCPY_KINDS.items()}
    by_label = {name: labels.get(i) for i, name in trace.memcpy_kind_labels.items()}
    code = pl.col("Kernel").str.extract(r"^\[CUDA memcpy (.*)\]$", 1).replace_strict(by_label, default=None)
    # a copy keeps torch.profiler's `Memcpy HtoD` form, which the reader takes its kind from
    name = (
        pl.when((pl.col("kind") == "memcpy") & code.is_not_null())
        .then(pl.concat_str(pl.lit("Memcpy "), code, pl.lit(" "), pl.col("Kernel")))
        .otherwise(pl.col("Kernel"))
    )
    kind = pl.col("kind").replace_strict(CATEGORY, default="kernel")
    dash = {"-": None}
    args = pl.struct(
        pl.col("Device").alias("device"),
        pl.col("Stream").alias("stream"),
        pl.col("Correlation").alias("correlation"),
        pl.when(pl.col("kind") == "kernel").then(pl.concat_list("grid_x", "grid_y", "grid_z")).alias("grid"),
        pl.when(pl.col("kind") == "kernel").then(pl.concat_list("block_x", "block_y", "block_z")).alias("block"),
        pl.when(pl.col("kind") != "kernel").then(pl.col("Bytes")).alias("bytes"),
        pl.col("Idx").alias("kview idx"),
        pl.col("Direction").replace(dash).alias("kview direction"),
        pl.col("Layer").replace(dash).alias("kview layer"),
        pl.col("Op").replace(dash).alias("kview op"),
        pl.col("Params").replace(dash).alias("kview params"),
        pl.col("Category").alias("kview category"),
    ).struct.json_encode()
    head = [
        pl.lit("X").alias("ph"),
        kind.alias("cat"),
        name.alias("name"),
        pl.col("Device").fill_null(0).alias("pid"),
        pl.col("Stream").fill_null(0).alias("tid"),
    ]
    return _lines(ops, head, args)


def _calls(trace: Trace, ops: pl.DataFrame, w: Window) -> pl.DataFrame:
    """CUDA API calls on the host threads: those in the window and the launches of the ops kept
    (with a filter, those launches only)."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return pl.DataFrame()
    r = trace.columns("runtime", ["start", "end", "global_tid", "correlation", "name_id", "event_class"])
    r = r.with_columns(pl.col("start").alias("ts"), (pl.col("end") - pl.col("start")).alias("dur"))
    # the launch calls of the ops kept, in the window or not (a queued op's launch may lie
    # before it), so every flow arrow starts inside its call
    if "global_tid" in ops.columns:
        keys = ops.select(pl.col("Correlation").alias("correlation"), "global_tid").drop_nulls().unique()
    else:  # no GPU ops at all
        keys = pl.DataFrame(schema={"correlation": pl.Int64, "global_tid": pl.Int64})
    launch = r.join(keys.with_columns(pl.lit(True).alias("_launch")), on=["correlation", "global_tid"], how="left")
    keep = pl.col("_launch").fill_null(False)
    if not w.filter:  # every call in the window too
        inside = pl.lit(True)
        if w.t0 is not None:
            inside = inside & (pl.col("ts") + pl.col("dur") > w.t0)
        if w.t1 is not None:
            inside = inside & (pl.col("ts") < w.t1)
        keep = keep | inside
    r = launch.filter(keep).drop("_launch")
    return trace.with_strings(r, "name_id", "name")


def _call_events(calls: pl.DataFrame) -> Events:
    head = [
        pl.lit("X").alias("ph"),
        pl.when(pl.col("event_class") == 1).then(pl.lit("cuda_driver")).otherwise(pl.lit("cuda_runtime")).alias("cat"),
        pl.col("name").fill_null("?"),
        pid_of(pl.col("global_tid")).alias("pid"),
        tid_of(pl.col("global_tid")).alias("tid"),
    ]
    return _lines(calls, head, pl.struct(pl.col("correlation")).struct.json_encode())


def _ranges(trace: Trace, w: Window) -> pl.DataFrame:
    """NVTX and record_function ranges that overlap the window (each whole)."""
    if not trace.has("NVTX_EVENTS"):
        return pl.DataFrame()
    r = nv.projection_ranges(trace).select("global_tid", "start", "end", "name_code")
    r = r.with_columns(pl.col("start").alias("ts"), (pl.col("end") - pl.col("start")).alias("dur"))
    if w.t0 is not None:
        r = r.filter(pl.col("ts") + pl.col("dur") > w.t0)
    if w.t1 is not None:
        r = r.filter(pl.col("ts") < w.t1)
    labels = nv.labels(trace).select("name_code", "name", "label", "marker", "module")
    return r.join(labels, on="name_code", how="left", maintain_order="left")


def _range_events(r: pl.DataFrame) -> Events:
    cat = (
        pl.when(pl.col("module"))
        .then(pl.lit("python_function"))
        .when(pl.col("marker"))
        .then(pl.lit("cpu_op"))
        .otherwise(pl.lit("user_annotation"))
    )
    # a range of a named NVTX domain keeps it (`domain:text`), as nsys stats names it
    name = (
        pl.when(pl.col("module"))
        .then(pl.concat_str(pl.lit(MODULE_PREFIX), pl.col("label")))
        .when(pl.col("name").str.starts_with(":"))
        .then(pl.col("label"))
        .otherwise(pl.col("name"))
    )
    head = [
        pl.lit("X").alias("ph"),
        cat.alias("cat"),
        name.fill_null("?").alias("name"),
        pid_of(pl.col("global_tid")).alias("pid"),
        tid_of(pl.col("global_tid")).alias("tid"),
    ]
    return _lines(r, head, None)


def _flow_events(ops: pl.DataFrame) -> list[Events]:
    """An arrow from each launch call to its op: `s` inside the call, `f` (bp e) at the op."""
    o = ops.filter(pl.col("r_start").is_not_null() & pl.col("global_tid").is_not_null())
    if o.height == 0:
        return []
    start = o.select(
        pl.lit("s").alias("ph"),
        pl.col("Idx").alias("flow_id"),
        pid_of(pl.col("global_tid")).alias("pid"),
        tid_of(pl.col("global_tid")).alias("tid"),
        pl.col("r_start").alias("ts"),
    )
    end = o.select(
        pl.lit("f").alias("ph"),
        pl.col("Idx").alias("flow_id"),
        pl.col("Device").fill_null(0).alias("pid"),
        pl.col("Stream").fill_null(0).alias("tid"),
        "ts",
        pl.lit("e").alias("bp"),
    )
    head = [pl.col("ph"), pl.lit(FLOW).alias("cat"), pl.lit(FLOW).alias("name"), pl.col("pid"), pl.col("tid")]
    return [_lines(start, head, None), _lines(end, head, None)]


def _queue_counters(trace: Trace, w: Window) -> tuple[Events, list[int]]:
    """Per GPU, the GPU ops launched and not yet finished, at every change: +1 at each launch
    call's start, -1 at each op's end (a sorted sweep), the last value per instant."""
    ops = at.launched_ops(trace).filter(pl.col("r_start").is_not_null())
    if ops.height == 0:
        return NO_EVENTS, []
    steps = pl.concat(
        [
            ops.select(pl.col("device").fill_null(0), pl.col("r_start").alias("ts"), pl.lit(1).alias("d")),
            ops.select(pl.col("device").fill_null(0), pl.col("end").alias("ts"), pl.lit(-1).alias("d")),
        ]
    ).sort(["device", "ts", "d"], descending=[False, False, True])
    q = (
        steps.with_columns(pl.col("d").cum_sum().over("device").alias("queued"))
        .group_by(["device", "ts"], maintain_order=True)
        .agg(pl.col("queued").last())
    )
    q = _in_window(q, w)
    head = [pl.lit("C").alias("ph"), pl.lit("queue length").alias("name"), pl.col("device").alias("pid")]
    return _lines(q, head, pl.struct(pl.col("queued")).struct.json_encode()), q["device"].unique().to_list()


def _in_window(frame: pl.DataFrame, w: Window) -> pl.DataFrame:
    """A counter's samples inside the window, and the value it held when the window opens."""
    if w.t0 is not None:
        before = frame.filter(pl.col("ts") <= w.t0).group_by("device", maintain_order=True).last()
        frame = pl.concat([before.with_columns(pl.lit(w.t0, pl.Int64).alias("ts")), frame.filter(pl.col("ts") > w.t0)])
    if w.t1 is not None:
        frame = frame.filter(pl.col("ts") < w.t1)
    return frame


def _memory_counters(trace: Trace, w: Window) -> tuple[Events, str | None, list[int]]:
    """Per GPU, the memory level the trace recorded (trace_memory), its source and the GPUs."""

    kind = tm.source_of(trace)
    if kind is None:
        return NO_EVENTS, None, []
    parts = []
    for device in tm.devices(trace)["device"].to_list():
        if device == tm.CPU_DEVICE:
            continue
        tl = tm.timeline(trace, device)
        if tl is None:
            continue
        s = tl.series.select(
            pl.lit(device).alias("device"),
            pl.col("t").alias("ts"),
            "allocated",
            "reserved",
        )
        parts.append(s.group_by(["device", "ts"], maintain_order=True).last())
    if not parts:
        return NO_EVENTS, None, []
    m = _in_window(pl.concat(parts), w)
    word = "CUDA device memory" if kind == tm.NSYS else "allocated"
    fields = [pl.col("allocated").alias(word)] + ([pl.col("reserved")] if m["reserved"].null_count() < m.height else [])
    head = [pl.lit("C").alias("ph"), pl.lit("memory").alias("name"), pl.col("device").alias("pid")]
    return _lines(m, head, pl.struct(fields).struct.json_encode()), tm.SOURCES[kind], m["device"].unique().to_list()


def _names(
    trace: Trace, ops: pl.DataFrame, calls: pl.DataFrame, ranges: pl.DataFrame, counted: list[int]
) -> list[Events]:
    """process_name / thread_name metadata for every pid and tid the events use (`counted`: the
    GPUs with counters)."""
    devices = trace.devices
    # every list of names in number order (GPUs, then host processes; streams, then host
    # threads): unique and join hand their rows on in no set order, and the file must not vary
    gpu = ops.select(pl.col("Device").fill_null(0).alias("pid"), pl.col("Stream").fill_null(0).alias("tid")).unique()
    gpu = gpu.sort("pid", "tid")
    gpu_pids = pl.concat([gpu.select("pid"), pl.DataFrame({"pid": counted}, schema={"pid": pl.Int64})]).unique()
    dev_names = (
        devices.select(pl.col("id").alias("pid"), pl.col("name").alias("gpu_name"))
        if devices.height and "name" in devices.columns
        else pl.DataFrame(schema={"pid": pl.Int64, "gpu_name": pl.String})
    )
    gpu_procs = (
        gpu_pids.join(dev_names, on="pid", how="left")
        .select(
            "pid",
            pl.concat_str(pl.lit("GPU "), pl.col("pid").cast(pl.String), pl.lit(" "), pl.col("gpu_name"))
            .fill_null(pl.concat_str(pl.lit("GPU "), pl.col("pid").cast(pl.String)))
            .alias("title"),
        )
        .sort("pid")
    )
    tids = [f.select("global_tid") for f in (calls, ranges) if f.height]
    host = pl.concat(tids).unique().drop_nulls() if tids else pl.DataFrame(schema={"global_tid": pl.Int64})
    procs = trace.processes.select(pl.col("pid"), pl.col("name").alias("pname"))
    host_procs = (
        host.select(pid_of(pl.col("global_tid")).alias("pid"))
        .unique()
        .join(procs.unique("pid", keep="first"), on="pid", how="left")
        .select("pid", pl.col("pname").fill_null(pl.concat_str(pl.lit("process "), pl.col("pid").cast(pl.String))))
        .rename({"pname": "title"})
        .sort("pid")
    )
    threads = trace.threads
    tnames = (
        trace.with_strings(threads, "name_id", "tname").select("global_tid", "tname")
        if threads.height
        else pl.DataFrame(schema={"global_tid": pl.Int64, "tname": pl.String})
    )
    host_threads = (
        host.join(tnames.unique("global_tid", keep="first"), on="global_tid", how="left")
        .select(
            pid_of(pl.col("global_tid")).alias("pid"),
            tid_of(pl.col("global_tid")).alias("tid"),
            pl.col("tname").fill_null(pl.concat_str(pl.lit("thread "), tid_of(pl.col("global_tid")).cast(pl.String))),
        )
        .sort("pid", "tid")
    )
    streams = gpu.select("pid", "tid", pl.concat_str(pl.lit("stream "), pl.col("tid").cast(pl.String)).alias("tname"))

    def meta(frame: pl.DataFrame, what: str, title: str, tid: bool) -> Events:
        head = [pl.lit("M").alias("ph"), pl.lit(what).alias("name"), pl.col("pid")] + ([pl.col("tid")] if tid else [])
        return _lines(frame, head, pl.struct(pl.col(title).alias("name")).struct.json_encode(), ts=False)

    return [
        meta(pl.concat([gpu_procs, host_procs]), "process_name", "title", False),
        meta(pl.concat([streams, host_threads]), "thread_name", "tname", True),
    ]


@dataclass(frozen=True)
class Export:
    """The window's events, kind by kind (metadata first), and the header facts."""

    parts: list[Events]
    ops: int  # GPU ops in it
    memory_source: str | None
    devices: list[dict]

    @property
    def events(self) -> int:
        return sum(len(p) for p in self.parts)


def build(trace: Trace, w: Window) -> Export:
    ops = window_ops(trace, w)
    calls = _calls(trace, ops, w)
    ranges = _ranges(trace, w)
    memory, source, counted = _memory_counters(trace, w)
    queue = NO_EVENTS
    if ops.height and not w.filter:  # the queue counts every op, so not beside a filter
        queue, queued = _queue_counters(trace, w)
        counted = counted + queued
    parts = _names(trace, ops, calls, ranges, counted)
    if ops.height:
        parts += [_gpu_events(trace, ops), *_flow_events(ops), queue]
    if calls.height:
        parts.append(_call_events(calls))
    if ranges.height:
        parts.append(_range_events(ranges))
    parts.append(memory)
    props = trace.devices
    devices = [
        {
            k: v
            for k, v in {
                "id": d.get("id"),
                "name": d.get("name"),
                "totalGlobalMem": d.get("totalMemory"),
                "numSms": d.get("smCount"),
                "computeMajor": d.get("computeMajor"),
                "computeMinor": d.get("computeMinor"),
            }.items()
            if v is not None
        }
        for d in props.iter_rows(named=True)  # one row per GPU
    ]
    return Export([p for p in parts if len(p)], ops.height, source, devices)


def other_data(trace: Trace, w: Window, export: Export) -> dict:
    """What the file says about itself (`otherData`): where it comes from and what it holds."""
    return {
        "exported by": "kview export",
        "source trace": trace.name,
        "window (ns from the trace's start)": [w.t0, w.t1],
        "filter": w.filter,
        "GPU ops": export.ops,
        "memory counters from": export.memory_source,
        "times": "us from the trace's start",
    }
