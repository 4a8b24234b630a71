"""The CUDA caching allocator's history as a timeline: bytes in use and reserved after every
event, the peak and what was live at it, the largest allocations, and the phases to mark.

Input is a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, `kview capture --memory`,
`kview bench --memory-snapshot`) read by kview.io.snapshot_pickle, optionally with the trace it
was captured beside (its NVTX phases, placed through the clock pair `kview capture` stores).

What the numbers are:
- *Allocated* is the bytes of the allocator's blocks in use, what torch's `memory_allocated` and
  `max_memory_allocated` count: +block at `alloc`, -block at `free_requested` (torch's counters
  drop there). The history records the bytes asked for; the block each allocation got (rounded,
  and sometimes a whole cached block) is replayed by kview.analysis.allocator_blocks.
- *Requested* is the bytes asked for and not yet freed (torch's `requested_bytes`), as recorded.
- *Reserved* is the bytes of the allocator's segments: +size at `segment_alloc`/`segment_map`,
  -size at `segment_free`/`segment_unmap` (what torch's `memory_reserved` counts).
- Both start from what was already there when the recording began: the blocks still allocated
  at the snapshot (and its segments) minus the history's net change.

Everything past the parse is polars: the series is a cumulative sum, an allocation's free is the
next `free_requested` at its address (a shift within each address), live-at-peak is a filter.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

import polars as pl

from kview.analysis import allocator_blocks
from kview.errors import TraceError
from kview.io import snapshot_pickle
from kview.io.paths import named
from kview.notation import exact_bytes, human_ms

if TYPE_CHECKING:
    from kview.trace import Trace

ALLOC = "alloc"
FREE = "free_requested"
SEGMENT_PLUS = ("segment_alloc", "segment_map")
SEGMENT_MINUS = ("segment_free", "segment_unmap")
BEFORE = "(allocated before the recording)"
TRACE_SUFFIXES = (
    ".sqlite",
    ".sqlite3",
    ".db",
    ".json",
    ".json.gz",
    ".json.xz",
    ".sqlite.xz",
    ".sqlite.gz",
    ".nsys-rep",
    ".qdrep",
)
SNAPSHOT = "snapshot"  # MemoryTimeline.source of an allocator history (trace_memory has the others)
WINDOW_SCHEMA = pl.Schema({"Phase": pl.String, "start": pl.Int64, "end": pl.Int64})
NO_FRAME = "(no Python frame: autograd engine or C++)"

EVENT_SCHEMA = {
    "idx": pl.Int64,
    "t_us": pl.Int64,
    "action": pl.String,
    "addr": pl.Int64,
    "size": pl.Int64,
    "stream": pl.Int64,
    "site": pl.String,
}


@dataclass(frozen=True)
class MemoryTimeline:
    name: str
    device: int
    events: pl.DataFrame  # idx, t (ns on the timeline's clock), action, addr, size (asked for), block, stream, site
    series: pl.DataFrame  # idx, t, allocated (blocks), requested, reserved: the values after each event
    # one row per allocation: idx, t, size (asked for), block, site, free_idx, free_t (null: never freed)
    allocations: pl.DataFrame
    phases: pl.DataFrame  # Phase, start, end (ns on the timeline's clock)
    clock: str  # "trace" (the trace's ns) or "snapshot" (ns since the first event)
    facts: dict = field(default_factory=dict)  # torch's own counters, when kview wrote the snapshot
    # where the figures come from: SNAPSHOT, or the trace's own events (trace_memory.KINETO, NSYS)
    source: str = SNAPSHOT
    origin: int | None = None  # time zero when it is the trace's (its start), else the first event
    steps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=WINDOW_SCHEMA))  # Phase, start, end

    @property
    def peak(self) -> dict:
        """The first event at which allocated bytes were highest: idx, t, allocated, requested, reserved."""
        if self.series.height == 0:
            return {"idx": None, "t": None, "allocated": 0, "requested": 0, "reserved": 0}
        i = self.series["allocated"].arg_max()
        return self.series.row(i, named=True)

    @property
    def start(self) -> int:
        """Time zero of the shown times: the trace's start, else the first event."""
        if self.origin is not None:
            return self.origin
        return int(self.series.select(pl.col("t").min()).item() or 0) if self.series.height else 0


def call_site(frames) -> str:
    """The innermost Python frame outside torch that asked for the memory, as `file.py:line name`
    (the two last path parts, so models/foo.py tells packages apart)."""
    for fr in frames or ():
        fn = fr.get("filename", "")
        if isinstance(fn, str) and fn.endswith(".py") and "/torch/" not in fn and "\\torch\\" not in fn:
            return _site(fn, fr.get("line", ""), fr.get("name", ""))
    return NO_FRAME


@functools.lru_cache(maxsize=1 << 16)
def _site(filename: str, line, name) -> str:
    tail = "/".join(filename.replace("\\", "/").rsplit("/", 2)[-2:])
    return f"{tail}:{line} {name}"


SCALARS = {"time_us": pl.Int64, "action": pl.String, "addr": pl.Int64, "size": pl.Int64, "stream": pl.Int64}


def _events(trace: list) -> pl.DataFrame:
    """One device's history as columns: polars reads the entries' scalar fields, and the call
    site is looked up for the allocations only (the one Python pass, over their frames)."""
    try:
        ev = pl.from_dicts(trace, schema=SCALARS)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):  # odd field types: read one by one
        ev = pl.DataFrame(
            {k: [e.get(k) if isinstance(e.get(k), (int, str)) else None for e in trace] for k in SCALARS},
            schema=SCALARS,
            strict=False,
        )
    ev = ev.with_row_index("idx").select(
        pl.col("idx").cast(pl.Int64),
        pl.col("time_us").fill_null(0).alias("t_us"),
        # torch < 2.1 wrote `free`
        pl.col("action").fill_null("").replace("free", FREE),
        pl.col("addr").fill_null(0),
        pl.col("size").fill_null(0),
        pl.col("stream").fill_null(0),
    )
    allocs = ev.filter(pl.col("action") == ALLOC)["idx"]
    # entries that share one frames list (a pickle's memo makes them so) look it up once
    by_list: dict[int, str] = {}
    site_of = []
    for i in allocs.to_list():
        frames = trace[i].get("frames")
        key = id(frames)
        if key not in by_list:
            by_list[key] = call_site(frames)
        site_of.append(by_list[key])
    sites = pl.Series("site", site_of, dtype=pl.String)
    site = pl.Series("site", [None] * ev.height, dtype=pl.String).scatter(allocs, sites) if allocs.len() else None
    return ev.with_columns(site if site is not None else pl.lit(None, pl.String).alias("site")).select(
        list(EVENT_SCHEMA)
    )


def _at_end(data: dict, device: int) -> tuple[int, int, pl.DataFrame]:
    """Bytes requested by blocks still allocated at the snapshot, bytes of its segments, and
    those blocks (addr, size asked for, block)."""
    reserved = 0
    addrs, sizes, blocks = [], [], []
    for seg in data.get("segments") or []:
        if seg.get("device", device) != device:
            continue
        reserved += int(seg.get("total_size") or 0)
        for b in seg.get("blocks") or []:
            if b.get("state") == "active_allocated":
                addrs.append(int(b.get("address") or 0))
                sizes.append(int(b.get("requested_size", b.get("size")) or 0))
                blocks.append(int(b.get("size") or 0))
    return (
        sum(sizes),
        reserved,
        pl.DataFrame(
            {"addr": addrs, "size": sizes, "block": blocks},
            schema={"addr": pl.Int64, "size": pl.Int64, "block": pl.Int64},
        ),
    )


def _busiest_device(data: dict) -> int:
    traces = data["device_traces"]
    return max(range(len(traces)), key=lambda d: len(traces[d]))


def build(
    data: dict, name: str, device: int | None = None, phases_of_trace: pl.DataFrame | None = None, origin: int = 0
) -> MemoryTimeline:
    """The timeline of one device of a loaded snapshot (default: the device with most events).
    `phases_of_trace` (Phase, start, end in the trace's ns) are used when the snapshot carries the
    clock pair that places it on that trace (`origin`: the trace's time zero in its own clock,
    which the clock pair reads)."""
    dev = _busiest_device(data) if device is None else device
    if not 0 <= dev < len(data["device_traces"]):
        raise TraceError(Path(name), f"has no device {dev} (devices 0-{len(data['device_traces']) - 1})")
    ev = _events(data["device_traces"][dev])
    facts = dict(data.get(snapshot_pickle.KVIEW_KEY) or {})
    clock = facts.get("clock") or {}

    # the clock: the trace's ns when kview capture aligned the snapshot with a trace, else ns
    # since the first event of the history
    if phases_of_trace is not None and clock.get("trace_ns") is not None:
        offset, kind = int(clock["trace_ns"]) - origin - int(clock["unix_ns"]), "trace"
        phases = phases_of_trace.select("Phase", "start", "end")
    else:
        offset, kind = -int(ev.select(pl.col("t_us").min()).item() or 0) * 1000, "snapshot"
        phases = annotation_phases(data.get("external_annotations") or [], dev, offset)
    blocks, end_blocks_bytes = allocator_blocks.block_sizes(data, dev, ev)
    ev = ev.with_columns((pl.col("t_us") * 1000 + offset).alias("t"), blocks.alias("block")).drop("t_us")

    def signed(col: str) -> pl.Expr:  # + at alloc, - at free_requested
        return (
            pl.when(pl.col("action") == ALLOC).then(col).when(pl.col("action") == FREE).then(-pl.col(col)).otherwise(0)
        )

    d_res = (
        pl.when(pl.col("action").is_in(SEGMENT_PLUS))
        .then(pl.col("size"))
        .when(pl.col("action").is_in(SEGMENT_MINUS))
        .then(-pl.col("size"))
        .otherwise(0)
    )
    deltas = ev.select(
        "idx", "t", signed("block").alias("d_alloc"), signed("size").alias("d_req"), d_res.alias("d_res")
    )
    end_req, end_res, end_blocks = _at_end(data, dev)
    # each level starts from what the snapshot holds less the history's net change
    base = deltas.select(
        (end_blocks_bytes - pl.col("d_alloc").sum()).alias("a"),
        (end_req - pl.col("d_req").sum()).alias("q"),
        (end_res - pl.col("d_res").sum()).alias("r"),
    ).row(0, named=True)
    series = deltas.select(
        "idx",
        "t",
        (base["a"] + pl.col("d_alloc").cum_sum()).alias("allocated"),
        (base["q"] + pl.col("d_req").cum_sum()).alias("requested"),
        (base["r"] + pl.col("d_res").cum_sum()).alias("reserved"),
    )
    allocations = _allocations(ev, end_blocks)
    return MemoryTimeline(name, dev, ev, series, allocations, phases, kind, facts)


def _allocations(ev: pl.DataFrame, end_blocks: pl.DataFrame) -> pl.DataFrame:
    """One row per allocation with the event that freed it. Allocations made before the
    recording began appear too (site BEFORE, idx -1): those freed during it (a free without an
    alloc before it at that address) and those still live at the snapshot without an alloc in
    the history."""
    af = (
        ev.filter(pl.col("action").is_in([ALLOC, FREE]))
        .select("idx", "t", "action", "addr", "size", "block", "site")
        .sort(["addr", "idx"])
    )
    af = af.with_columns(
        pl.col("action").shift(-1).over("addr").alias("_next"),
        pl.col("idx").shift(-1).over("addr").alias("_next_idx"),
        pl.col("t").shift(-1).over("addr").alias("_next_t"),
        pl.col("action").shift(1).over("addr").alias("_prev"),
    )
    freed = pl.col("_next") == FREE
    made = af.filter(pl.col("action") == ALLOC).select(
        "idx",
        "t",
        "addr",
        "size",
        "block",
        "site",
        pl.when(freed).then(pl.col("_next_idx")).alias("free_idx"),
        pl.when(freed).then(pl.col("_next_t")).alias("free_t"),
    )
    earlier = af.filter((pl.col("action") == FREE) & (pl.col("_prev").is_null() | (pl.col("_prev") == FREE))).select(
        pl.lit(-1, pl.Int64).alias("idx"),
        pl.lit(None, pl.Int64).alias("t"),
        "addr",
        "size",
        "block",
        pl.lit(BEFORE).alias("site"),
        pl.col("idx").alias("free_idx"),
        pl.col("t").alias("free_t"),
    )
    live_in_history = made.filter(pl.col("free_idx").is_null())["addr"]
    untouched = end_blocks.filter(~pl.col("addr").is_in(live_in_history.implode())).select(
        pl.lit(-1, pl.Int64).alias("idx"),
        pl.lit(None, pl.Int64).alias("t"),
        "addr",
        "size",
        "block",
        pl.lit(BEFORE).alias("site"),
        pl.lit(None, pl.Int64).alias("free_idx"),
        pl.lit(None, pl.Int64).alias("free_t"),
    )
    return pl.concat([made, earlier, untouched], how="vertical_relaxed").sort("idx")


def annotation_phases(annotations: list, device: int, offset_ns: int) -> pl.DataFrame:
    """record_function ranges the history kept (`external_annotations`), paired START to END per
    name, as phases: the outermost ranges, or the children of a lone outer range family (as
    kview's phases of a trace)."""
    rows = [
        a
        for a in annotations
        if isinstance(a, dict) and a.get("device", device) == device and a.get("stage") in ("START", "END")
    ]
    empty = pl.DataFrame(schema={"Phase": pl.String, "start": pl.Int64, "end": pl.Int64})
    if not rows:
        return empty
    a = pl.DataFrame(
        {
            "name": [str(r.get("name")) for r in rows],
            "start_stage": [r["stage"] == "START" for r in rows],
            "t": [int(r.get("time_us") or 0) * 1000 + offset_ns for r in rows],
        }
    )
    a = a.with_row_index("order").with_columns(
        pl.when(pl.col("start_stage")).then(1).otherwise(-1).cum_sum().alias("_depth_after")
    )
    # nth START of a name pairs with its nth END
    a = a.with_columns(pl.int_range(pl.len()).over(["name", "start_stage"]).alias("_n"))
    starts = a.filter(pl.col("start_stage")).select(
        "name", "_n", pl.col("t").alias("start"), (pl.col("_depth_after") - 1).alias("depth")
    )
    ends = a.filter(~pl.col("start_stage")).select("name", "_n", pl.col("t").alias("end"))
    r = starts.join(ends, on=["name", "_n"], how="inner").sort("start")
    if r.height == 0:
        return empty
    top = r.filter(pl.col("depth") == pl.col("depth").min())
    if top["name"].n_unique() == 1:
        kids = r.filter(pl.col("depth") == pl.col("depth").min() + 1)
        if kids.height:
            top = kids
    return top.select(pl.col("name").alias("Phase"), "start", "end")


@dataclass(frozen=True)
class Snapshot:
    """A snapshot file loaded and checked (`open_snapshot`), before its timeline is built."""

    name: str  # the file the user named (a snapshot, or the trace it lies beside)
    data: dict
    trace: Path | None  # the trace it was captured beside, when that is there


def open_snapshot(path: str | os.PathLike) -> Snapshot:
    """Load a snapshot file, or the snapshot `kview capture --memory` wrote beside a trace
    (TRACE.memory.pickle); TraceError names the file and what is wrong."""
    p = named(path)
    trace_like = p.name.endswith(TRACE_SUFFIXES)
    if snapshot_pickle.is_snapshot_file(p) or not trace_like or p.is_dir():
        snap, trace = p, trace_beside(p)
    else:
        snap, trace = snapshot_pickle.memory_name(p), p
        if not snap.exists():
            if not p.exists():
                raise TraceError(p, "no such file")
            raise TraceError(
                p,
                f"has no allocator history beside it ({snap.name}: record one with "
                f"`kview capture --memory`, or give a torch.cuda.memory._dump_snapshot pickle)",
            )
    return Snapshot(p.name, snapshot_pickle.load(snap), trace)


def timeline(
    snap: Snapshot, device: int | None = None, use_cache: bool = True, trace: Trace | None = None
) -> MemoryTimeline:
    """The timeline of a loaded snapshot; the phases come from the trace beside it (`trace` when
    the caller has it open) when the snapshot carries the clock pair that places it there."""
    phases, origin = None, 0
    aligned = (snap.data.get(snapshot_pickle.KVIEW_KEY) or {}).get("clock", {}).get("trace_ns") is not None
    if aligned and (trace is not None or snap.trace is not None):
        if trace is None:
            # deferred: a snapshot read without its trace needs none of the trace's analyses
            from kview.trace import open_trace

            trace = open_trace(cast(Path, snap.trace), use_cache=use_cache)
        phases, origin = trace_phases(trace), trace.origin
    return build(snap.data, snap.name, device, phases, origin)


def trace_phases(trace: Trace) -> pl.DataFrame:
    """Every instance of the trace's phases (kview's phase names: forward_pass, backward_pass, ...)."""
    # deferred: a snapshot read without its trace needs none of the trace's analyses
    from kview.analysis.layers import phase_labels
    from kview.analysis.nvtx_ranges import user_ranges

    names = phase_labels(trace)
    return (
        user_ranges(trace)
        .filter(pl.col("label").is_in(names))
        .sort("start")
        .select(pl.col("label").alias("Phase"), "start", "end")
    )


def trace_beside(snap: Path) -> Path | None:
    """run.memory.pickle -> run.sqlite (or the .json trace torch.profiler wrote), when it exists."""
    if not snap.name.endswith(snapshot_pickle.SUFFIX):
        return None
    stem = snap.name[: -len(snapshot_pickle.SUFFIX)]
    # memory_name keeps every suffix but the last: run.json.gz -> run.json.memory.pickle
    names = [stem + ext for ext in (".sqlite", ".json", ".json.gz")] + (
        [stem + ".gz"] if stem.endswith(".json") else []
    )
    for name in names:
        t = snap.with_name(name)
        if t.exists():
            return t
    return None


def live_at(tl: MemoryTimeline, idx: int) -> pl.DataFrame:
    """The allocations live right after event `idx` (their blocks add up to `allocated` there,
    their sizes to `requested`)."""
    return tl.allocations.filter((pl.col("idx") <= idx) & (pl.col("free_idx").is_null() | (pl.col("free_idx") > idx)))


def by_site(live: pl.DataFrame, n: int = 15) -> pl.DataFrame:
    """Live bytes (blocks, and what was asked for) per call site, largest first; for a trace's
    own events, per direction, layer and op (the trace knows no Python frames)."""
    total = max(int(live["block"].sum()), 1)
    if "Layer" in live.columns:
        keys = ["Direction", "Layer", "Op"]
        return (
            live.group_by(keys)
            .agg(pl.col("block").sum().alias("Bytes"), pl.len().alias("Count"))
            .sort(["Bytes", *keys], descending=[True, False, False, False])
            .head(n)
            .select(*keys, "Bytes", (pl.col("Bytes") / total * 100).round(1).alias("%"), "Count")
        )
    return (
        live.group_by("site")
        .agg(
            pl.col("block").sum().alias("Bytes"),
            pl.col("size").sum().alias("Requested"),
            pl.len().alias("Count"),
        )
        .sort(["Bytes", "site"], descending=[True, False])
        .head(n)
        .select(
            pl.col("site").alias("Call site"),
            "Bytes",
            (pl.col("Bytes") / total * 100).round(1).alias("%"),
            "Count",
            "Requested",
        )
    )


def level_word(tl: MemoryTimeline) -> str:
    """The plot's word for the filled level: allocated, or nsys's CUDA device memory."""
    return "CUDA device memory" if tl.source == "nsys" else "allocated"


def by_site_title(tl: MemoryTimeline) -> str:
    """The by_site table's title: by call site (a snapshot) or by op and layer (a trace's events)."""
    return "Live at the peak, by op and layer" if tl.source != SNAPSHOT else "Live at the peak, by call site"


def by_size(live: pl.DataFrame, n: int = 15) -> pl.DataFrame:
    """Live allocations grouped by the size asked for, largest first: how many, the bytes of
    their blocks, and the site that made most of them."""
    return (
        live.group_by("size")
        .agg(
            pl.len().alias("Count"),
            pl.col("block").sum().alias("Bytes"),
            pl.col("site").mode().sort().first().alias("Call site"),
        )
        .sort("size", descending=True)
        .head(n)
        .select(pl.col("size").alias("Size"), "Count", "Bytes", "Call site")
    )


def top_allocations(tl: MemoryTimeline, n: int = 15) -> pl.DataFrame:
    """The largest allocations of the history, each with when it was made and how long it lived."""
    a = tl.allocations.filter(pl.col("idx") >= 0)
    t0 = tl.start
    return (
        a.sort(["size", "idx"], descending=[True, False])
        .head(n)
        .select(
            pl.col("size").alias("Size"),
            pl.col("block").alias("Block"),
            pl.col("site").alias("Call site"),
            ((pl.col("t") - t0) / 1e6).round(3).alias("At (ms)"),
            ((pl.col("free_t") - pl.col("t")) / 1e6).round(3).alias("Lived (ms)"),
        )
    )


def phase_peaks(tl: MemoryTimeline) -> pl.DataFrame:
    """Per phase instance: allocated bytes at its start and end and the highest inside it, and
    the highest reserved."""
    return window_peaks(tl, tl.phases)


def step_peaks(tl: MemoryTimeline) -> pl.DataFrame:
    """phase_peaks per step (ProfilerStep#N, step_N) of the trace."""
    return window_peaks(tl, tl.steps)


def window_peaks(tl: MemoryTimeline, windows: pl.DataFrame) -> pl.DataFrame:
    """Per window (Phase, start, end): allocated bytes at its start, the highest inside it and at
    its end; the highest reserved bytes likewise (null where the source has none). The level at
    a time is the value after the last event at or before it."""
    if windows.height == 0:
        return pl.DataFrame(
            schema={
                "Phase": pl.String,
                "Start (ms)": pl.Float64,
                "At start": pl.Int64,
                "Peak": pl.Int64,
                "At end": pl.Int64,
                "Reserved peak": pl.Int64,
            }
        )
    s = tl.series.select("t", "allocated", "reserved").sort("t", maintain_order=True)
    ph = windows.sort("start", maintain_order=True).with_row_index("_i")

    def at(col: str) -> pl.DataFrame:
        return (
            ph.select("_i", pl.col(col).alias("t"))
            .sort("t")
            .join_asof(s, on="t")
            .select("_i", pl.col("allocated").alias(col), pl.col("reserved").alias(f"r_{col}"))
        )

    inside = (
        ph.join_where(s, pl.col("t") >= pl.col("start"), pl.col("t") <= pl.col("end"))
        .group_by("_i")
        .agg(pl.col("allocated").max().alias("_in"), pl.col("reserved").max().alias("_rin"))
    )
    t0 = tl.start
    out = (
        ph.join(at("start"), on="_i", how="left", suffix="_a")
        .join(at("end"), on="_i", how="left", suffix="_b")
        .join(inside, on="_i", how="left")
        .sort("_i")
    )
    return out.select(
        "Phase",
        ((pl.col("start") - t0) / 1e6).round(3).alias("Start (ms)"),
        pl.col("start_a").alias("At start"),
        pl.max_horizontal("start_a", "end_b", "_in").alias("Peak"),
        pl.col("end_b").alias("At end"),
        pl.max_horizontal("r_start", "_rin", "r_end").alias("Reserved peak"),
    )


def summary(tl: MemoryTimeline) -> list[tuple[str, str]]:
    """Facts of a snapshot's timeline as (name, value) rows; torch's own counters beside the
    replayed ones when kview wrote the snapshot."""
    pk = tl.peak
    f = tl.facts
    top = tl.series.select(pl.col("requested").max(), pl.col("reserved").max()).row(0) if tl.series.height else (0, 0)

    def versus(torch_value: int, ours: int) -> str:
        return f"{exact_bytes(torch_value)}, {(torch_value / max(ours, 1) - 1) * 100:+.2f}% vs the replay"

    rows = [
        ("Source", "the allocator snapshot (every block, with the Python call site that asked for it)"),
        ("Snapshot", tl.name),
        ("Device", f"{tl.device}" + (f" ({f['device']})" if f.get("device") else "")),
        ("Events", f"{tl.events.height:,}"),
        (
            "Span",
            human_ms(int(tl.series.select(pl.col("t").max()).item() or 0) - tl.start, 3) if tl.series.height else "-",
        ),
        ("Peak allocated (blocks)", exact_bytes(pk["allocated"])),
        ("Peak at", f"{human_ms(pk['t'] - tl.start, 3)}, event {pk['idx']:,}" if pk["t"] is not None else "-"),
        ("Peak requested", exact_bytes(int(top[0] or 0))),
        ("Peak reserved", exact_bytes(int(top[1] or 0))),
        (
            "Phases from",
            "the trace's NVTX"
            if tl.clock == "trace"
            else ("the snapshot's record_function ranges" if tl.phases.height else "(none recorded)"),
        ),
    ]
    if f.get("max_memory_allocated") is not None:
        rows.append(("torch max_memory_allocated", versus(f["max_memory_allocated"], pk["allocated"])))
    if f.get("requested_bytes_peak") is not None:
        rows.append(("torch requested_bytes peak", versus(f["requested_bytes_peak"], int(top[0] or 0))))
    if f.get("max_memory_reserved") is not None:
        rows.append(("torch max_memory_reserved", versus(f["max_memory_reserved"], int(top[1] or 0))))
    return rows


def summary_data(tl: MemoryTimeline) -> pl.DataFrame:
    """The facts of `summary` as one row of numbers for the data formats, each unit in its
    column's name (bytes as integers, times in ms from the snapshot's start); torch's own
    counters are missing when the snapshot does not carry them."""
    pk = tl.peak
    f = tl.facts
    top = tl.series.select(pl.col("requested").max(), pl.col("reserved").max()).row(0) if tl.series.height else (0, 0)
    span = (int(tl.series.select(pl.col("t").max()).item() or 0) - tl.start) / 1e6 if tl.series.height else None
    phases_from = (
        "the trace's NVTX"
        if tl.clock == "trace"
        else ("the snapshot's record_function ranges" if tl.phases.height else None)
    )
    row = {
        "Snapshot": tl.name,
        "Device": tl.device,
        "Device name": f.get("device"),
        "Events": tl.events.height,
        "Span (ms)": span,
        "Peak allocated (B)": int(pk["allocated"]),
        "Peak at (ms)": (pk["t"] - tl.start) / 1e6 if pk["t"] is not None else None,
        "Peak event": pk["idx"] if pk["t"] is not None else None,
        "Peak requested (B)": int(top[0] or 0),
        "Peak reserved (B)": int(top[1] or 0),
        "Phases from": phases_from,
        "torch max_memory_allocated (B)": f.get("max_memory_allocated"),
        "torch requested_bytes peak (B)": f.get("requested_bytes_peak"),
        "torch max_memory_reserved (B)": f.get("max_memory_reserved"),
    }
    schema = {
        "Snapshot": pl.String,
        "Device": pl.Int64,
        "Device name": pl.String,
        "Events": pl.Int64,
        "Span (ms)": pl.Float64,
        "Peak allocated (B)": pl.Int64,
        "Peak at (ms)": pl.Float64,
        "Peak event": pl.Int64,
        "Peak requested (B)": pl.Int64,
        "Peak reserved (B)": pl.Int64,
        "Phases from": pl.String,
        "torch max_memory_allocated (B)": pl.Int64,
        "torch requested_bytes peak (B)": pl.Int64,
        "torch max_memory_reserved (B)": pl.Int64,
    }
    return pl.DataFrame([row], schema=schema)
