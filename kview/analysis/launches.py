"""Launch analysis: how long the host took to launch each GPU op, how long the op then waited,
how many ops each stream had queued over time, and why each stream sat idle.

Definitions (one each, shared by `kview launches`, the Launches view and the Overview):
- launch cost: the launch call's own duration on the CPU (its end minus its start);
- launch delay: the op's start minus the end of its launch call, 0 where the op started before
  the call returned (as HTA's kernel launch statistics clip it);
- queue length of a stream: the ops launched onto it (launch call started) that have not started
  yet (HTA's definition), a step function that changes at launch calls and op starts;
- an idle gap of a stream: the time between one op's end and the start of the next op on it (in
  start order), split by cause:
  - host: the next op's launch call started after the stream went idle (the host was late);
    `sync` where the launching thread left a synchronization call inside the gap first (it was
    waiting for the GPU), `host` otherwise (HTA's host wait is the two together);
  - kernel wait: the op was queued in time and the gap is shorter than KERNEL_WAIT_NS (the
    GPU's own overhead between back-to-back ops, HTA's kernel wait);
  - other stream: queued in time, and an op of another stream of the device (a collective,
    an event the stream waited on) ended inside the gap;
  - other: anything else (HTA's other is this and `other stream` together).
Every GPU op with a launch call in the trace counts (kernels, memcpys, memsets, whatever API
launched them); ops whose launch call is outside the trace have no launch figures and no
host-side cause.
"""

from __future__ import annotations

import polars as pl

from kview.analysis.attribution import launch_ops, launched_ops
from kview.derived import derived
from kview.trace import WHOLE_STRINGS, Trace

# HTA's default consecutive_kernel_delay (ns): a shorter gap between queued ops is the GPU's own
KERNEL_WAIT_NS = 30
SYNC_APIS = (
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
)
# names as api_calls gives them: the _vN suffix cut (the driver's cuMemcpyHtoD_v2 is cuMemcpyHtoD)
SYNC_MEMCPY_APIS = (
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
    "cuMemcpyHtoD",
    "cuMemcpyDtoH",
    "cudaMemset",
)
CAUSES = ("host", "sync", "kernel wait", "other stream", "other")
CAUSE_COLUMNS = {c: f"{c[0].upper()}{c[1:]} (ns)" for c in CAUSES}
CAUSE_SCHEMA = {"idle": pl.Int64, "cause": pl.String}
DELAY, COST, GPU = "Launch delay (ns)", "Launch cost (ns)", "GPU (ns)"


API_SCHEMA = pl.Schema({"global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64, "api": pl.String})
API_COLUMNS = ["global_tid", "start", "end", "name_id"]  # the runtime calls' columns api_calls reads


def api_calls(trace: Trace) -> pl.DataFrame:
    """Every runtime API call: global_tid, start, end, api (its name without a _vN suffix)."""
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return pl.DataFrame(schema=API_SCHEMA)
    r = trace.columns("runtime", API_COLUMNS)
    return _with_api(r, _api_names_of(trace, r["name_id"].unique()))


def _api_names(strings: pl.DataFrame) -> pl.DataFrame:
    """(name_id, api) of StringIds rows (id, value): the name without its _vN suffix, cut once per
    distinct name (a few hundred), not once per call (millions)."""
    return strings.select(pl.col("id").alias("name_id"), pl.col("value").str.replace(r"_v\d+$", "").alias("api"))


def _api_names_of(trace: Trace, ids: pl.Series) -> pl.DataFrame:
    """_api_names of the distinct runtime name ids `ids` alone (their StringIds rows)."""
    return _api_names(trace.string_values(ids).filter(pl.col("id").is_in(ids.implode())))


def _with_api(calls: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """api_calls' columns of runtime `calls` (global_tid, start, end, name_id) named by `names`."""
    named = calls.join(names, on="name_id", how="left", maintain_order="left")
    return named.select("global_tid", "start", "end", "api").cast(API_SCHEMA)


@derived
def launches(trace: Trace) -> pl.DataFrame:
    """One row per GPU op with its launch call: Idx, correlation, Kernel, kind, device, stream, start, end,
    global_tid, r_start, r_end, Op (the CPU op that launched it, from attribution), and its
    launch cost, launch delay and GPU duration (null where the launch call is not in the trace)."""
    ops = launched_ops(trace)
    if ops.height == 0:
        return pl.DataFrame(
            schema={
                "Idx": pl.Int64,
                "correlation": pl.Int64,
                "Kernel": pl.String,
                "kind": pl.String,
                "device": pl.Int64,
                "stream": pl.Int64,
                "start": pl.Int64,
                "end": pl.Int64,
                "global_tid": pl.Int64,
                "r_start": pl.Int64,
                "r_end": pl.Int64,
                "Op": pl.String,
                COST: pl.Int64,
                DELAY: pl.Int64,
                GPU: pl.Int64,
            }
        )
    op = launch_ops(trace)
    return (
        ops.select(
            "Idx", "correlation", "Kernel", "kind", "device", "stream", "start", "end", "global_tid", "r_start", "r_end"
        )
        .join(op, on="Idx", how="left", maintain_order="left")
        .with_columns(
            (pl.col("r_end") - pl.col("r_start")).alias(COST),
            pl.max_horizontal(pl.col("start") - pl.col("r_end"), pl.lit(0)).alias(DELAY),
            (pl.col("end") - pl.col("start")).alias(GPU),
        )
        .with_columns(pl.when(pl.col("r_end").is_null()).then(None).otherwise(pl.col(DELAY)).alias(DELAY))
    )


def _stats(col: str, short: str) -> list[pl.Expr]:
    c = pl.col(col)
    return [
        c.mean().round(0).cast(pl.Int64).alias(f"{short} mean (ns)"),
        c.quantile(0.5, "linear").round(0).cast(pl.Int64).alias(f"{short} median (ns)"),
        c.quantile(0.95, "linear").round(0).cast(pl.Int64).alias(f"{short} p95 (ns)"),
        c.max().alias(f"{short} max (ns)"),
    ]


def launch_stats(trace: Trace, by: str = "Kernel") -> pl.DataFrame:
    """Per kernel name (`by="Kernel"`) or per launching CPU op (`by="Op"`; "(no op)" where none
    encloses the launch): launches, GPU time, launch cost and launch delay (mean, median, p95,
    max), ordered by total launch delay. Ops without a launch call in the trace are left out."""
    lt = launches(trace).filter(pl.col("r_start").is_not_null())
    key = pl.col(by).fill_null("(no op)") if by == "Op" else pl.col(by)
    return (
        lt.group_by(key.alias(by))
        .agg(
            pl.len().alias("Launches"),
            pl.col(GPU).sum().alias("GPU total (ns)"),
            *_stats(COST, "Launch cost"),
            pl.col(DELAY).sum().alias("Launch delay total (ns)"),
            *_stats(DELAY, "Launch delay"),
        )
        .sort(["Launch delay total (ns)", by], descending=[True, False])
    )


@derived
def queue_series(trace: Trace) -> pl.DataFrame:
    """Queue length of each stream over time: device, stream, t (ns from the trace's start),
    queue (ops launched onto the stream, not started yet, after every change at t)."""
    lt = launches(trace).select("device", "stream", "r_start", "start").filter(pl.col("r_start").is_not_null())
    packed = _packed_queue(lt)
    return _sorted_queue(lt) if packed is None else packed


def _sorted_queue(lt: pl.DataFrame) -> pl.DataFrame:
    """queue_series of launches `lt` (device, stream, r_start, start) by a sort of rows."""
    on = ("device", "stream")
    ev = pl.concat(
        [
            lt.select(*on, pl.col("r_start").alias("t"), pl.lit(1, dtype=pl.Int64).alias("d")),
            lt.select(*on, pl.col("start").alias("t"), pl.lit(-1, dtype=pl.Int64).alias("d")),
        ]
    ).sort(*on, "t")
    # each launch adds one at its call and takes it away at its start, on one stream: every stream's
    # changes sum to zero, so one running sum over the sorted rows is each stream's own, and the
    # last row of each (device, stream, t) holds the queue after every change at t
    last = pl.any_horizontal(pl.col(c).ne_missing(pl.col(c).shift(-1)) for c in (*on, "t"))
    return ev.with_columns(pl.col("d").cum_sum().alias("queue")).filter(last).select(*on, "t", "queue")


def _packed_queue(lt: pl.DataFrame) -> pl.DataFrame | None:
    """queue_series of launches `lt` by one sort of one integer column, each change packed as
    its device, stream, time and sign (+1 above -1), rather than a sort of rows by three keys
    (a quarter of the CPU time at a million launches); None where they do not pack into 62
    bits (nulls, negative ids, a span too wide). The sign's bit orders only the changes at one
    time, and the row kept for a time is the last, after all of them."""
    if lt.height == 0 or lt.select(pl.any_horizontal(pl.col("device", "stream", "start").is_null().any())).item():
        return None
    low, high = lt.select(pl.all().min()).row(0), lt.select(pl.all().max()).row(0)  # device, stream, r_start, start
    if min(low[:2]) < 0:
        return None
    lo = min(low[2:])
    bits = max(max(high[2:]) - lo, 1).bit_length() + 1  # the time and the sign
    sbits = max(high[1], 1).bit_length()
    if max(high[0], 1).bit_length() + sbits + bits > 62:
        return None
    # shifts as products of 64-bit integers (every value is at least 0)
    t = pl.col("r_start").cast(pl.Int64), pl.col("start").cast(pl.Int64)
    head = (pl.col("device").cast(pl.Int64) * (1 << sbits) + pl.col("stream").cast(pl.Int64)) * (1 << bits)
    keys = lt.select(pl.concat([head + (t[0] - lo) * 2 + 1, head + (t[1] - lo) * 2]).alias("k")).to_series().sort()
    k = pl.col("k") // 2
    return (
        keys.to_frame()
        .select(k, ((pl.col("k") % 2) * 2 - 1).cum_sum().alias("queue"))
        .filter(pl.col("k") != pl.col("k").shift(-1, fill_value=-1))
        .select(
            (pl.col("k") // (1 << (bits - 1 + sbits))).cast(lt.schema["device"]).alias("device"),
            (pl.col("k") // (1 << (bits - 1)) % (1 << sbits)).cast(lt.schema["stream"]).alias("stream"),
            (pl.col("k") % (1 << (bits - 1)) + lo).cast(pl.Int64).alias("t"),
            "queue",
        )
    )


def queue_summary(trace: Trace) -> pl.DataFrame:
    """Per stream: launches, the largest and smallest queue length, and the mean over time
    (between its first launch and its last op's start)."""
    q = queue_series(trace)
    n = (
        launches(trace)
        .select("device", "stream", "r_start")
        .filter(pl.col("r_start").is_not_null())
        .group_by("device", "stream")
        .agg(pl.len().alias("n"))
    )
    held = (pl.col("t").shift(-1).over("device", "stream") - pl.col("t")).fill_null(0)
    return (
        q.with_columns(held.alias("held"))
        .group_by("device", "stream")
        .agg(
            pl.col("queue").max().alias("Max queue"),
            pl.col("queue").min().alias("Min queue"),
            ((pl.col("queue") * pl.col("held")).sum() / pl.col("held").sum()).round(2).alias("Mean queue"),
            ((pl.col("queue") == pl.col("queue").max()).cast(pl.Int64) * pl.col("held")).sum().alias("At max (ns)"),
        )
        .join(n, on=["device", "stream"])
        .select(
            pl.col("device").alias("Device"),
            pl.col("stream").alias("Stream"),
            pl.col("n").alias("Launches"),
            "Max queue",
            "Mean queue",
            "At max (ns)",
            "Min queue",
        )
        .sort("Device", "Stream")
    )


@derived
def sync_calls(trace: Trace) -> pl.DataFrame:
    """api_calls' synchronizations and synchronous copies (SYNC_APIS, SYNC_MEMCPY_APIS), in their
    order: all the idle gaps, the critical path and the Overview ask of the runtime calls (a
    few thousand of millions, made once)."""
    syncs = [*SYNC_APIS, *SYNC_MEMCPY_APIS]
    if not trace.has("CUPTI_ACTIVITY_KIND_RUNTIME") or trace.source.string_count() > WHOLE_STRINGS:
        return api_calls(trace).filter(pl.col("api").is_in(syncs))
    # the names first (a small string table), then only their calls' rows: a command that let
    # the runtime columns go reads a few thousand rows again, not millions
    names = _api_names(trace.strings).filter(pl.col("api").is_in(syncs))
    r = trace.rows_where("runtime", ["global_tid", "start", "end", "name_id"], "name_id", names["name_id"].to_list())
    return _with_api(r, names)


def _syncs(trace: Trace) -> pl.DataFrame:
    return sync_calls(trace).select("global_tid", pl.col("end").alias("sync_end"), pl.col("api").alias("sync_api"))


GAP_SCHEMA = {
    "device": pl.Int64,
    "stream": pl.Int64,
    "gap_start": pl.Int64,
    "gap_end": pl.Int64,
    "idle": pl.Int64,
    "cause": pl.String,
    "Idx": pl.Int64,
    "Kernel": pl.String,
    "Op": pl.String,
    "global_tid": pl.Int64,
    "r_start": pl.Int64,
    "waited_on": pl.String,
}
NAMED = ("Kernel", "Op", "waited_on")  # idle_gaps' names, which gap_rows holds as launches' rows


@derived
def idle_gaps(trace: Trace, kernel_wait_ns: int = KERNEL_WAIT_NS) -> pl.DataFrame:
    """Every idle gap of every stream: device, stream, gap_start (the previous op's end), gap_end
    (the next op's start), idle (ns), cause (CAUSES), Idx, Kernel and Op of the op after the
    gap, global_tid of its launch, and the op of another stream that ended last inside the gap
    (waited_on: its Kernel, null where none). Times count from the trace's zero, as every frame's."""
    return _named(trace, gap_rows(trace, kernel_wait_ns))


@derived
def gap_rows(trace: Trace, kernel_wait_ns: int = KERNEL_WAIT_NS) -> pl.DataFrame:
    """idle_gaps without its names: the row of `launches` of the op after each gap (`at`) and
    of the op waited on (`waited_at`, null where none) in place of Kernel, Op and waited_on
    (`_named` gives them). What the Launches document reads of every gap: its names are joined
    to the gaps it shows (a million gaps' names, carried through their sorts and joins, were
    0.5 GB on the dense 1.1M-kernel trace: the explorer's worker's highest point)."""
    lt = launches(trace)
    if lt.height == 0:
        schema = {c: t for c, t in GAP_SCHEMA.items() if c not in NAMED}
        return pl.DataFrame(schema={**schema, "at": pl.get_index_type(), "waited_at": pl.get_index_type()})
    return _gaps(trace, lt, kernel_wait_ns, whole=True)


def _named(trace: Trace, g: pl.DataFrame) -> pl.DataFrame:
    """Gaps of gap_rows with idle_gaps' names, of the launches' rows they point at."""
    lt = launches(trace)
    if lt.height == 0:
        return pl.DataFrame(schema=GAP_SCHEMA)
    kernel = lt["Kernel"]
    names = {
        "Kernel": kernel.gather(g["at"]),
        "Op": lt["Op"].gather(g["at"]),
        "waited_on": kernel.gather(g["waited_at"]),
    }
    return g.with_columns(**names).select(GAP_SCHEMA.keys())


def _gaps(trace: Trace, lt: pl.DataFrame, kernel_wait_ns: int, whole: bool) -> pl.DataFrame:
    """gap_rows of the launches `lt`; without `whole`, each gap's idle time and cause only."""
    at = ["at"] if whole else []
    lt = lt.with_row_index("at") if whole else lt
    s = (
        lt.select("device", "stream", "start", "end", "Idx", *at, "global_tid", "r_start")
        .sort("device", "stream", "start", "Idx")
        .with_columns(pl.col("end").shift(1).over("device", "stream").alias("gap_start"))
    )
    g = s.filter(pl.col("gap_start").is_not_null()).select(
        "device",
        "stream",
        "gap_start",
        pl.col("start").alias("gap_end"),
        (pl.col("start") - pl.col("gap_start")).alias("idle"),
        "Idx",
        *at,
        "global_tid",
        "r_start",
    )
    del s
    # the last sync call the launching thread left before the launch call started
    syncs = _syncs(trace).sort("sync_end")
    g = (
        g.sort("r_start")
        .join_asof(
            syncs, left_on="r_start", right_on="sync_end", by="global_tid", strategy="backward", check_sortedness=False
        )
        .drop("sync_api")
    )
    # the op of the device that ended last at or before the gap's end (another stream's, when
    # that is inside the gap: this stream's own ops end outside its gaps)
    waited = [pl.col("at").alias("o_at")] if whole else []
    ends = lt.select("device", pl.col("end").alias("o_end"), *waited).sort("o_end")
    g = g.sort("gap_end").join_asof(
        ends, left_on="gap_end", right_on="o_end", by="device", strategy="backward", check_sortedness=False
    )
    other = pl.col("o_end").is_not_null() & (pl.col("o_end") > pl.col("gap_start"))
    host = pl.col("r_start") > pl.col("gap_start")  # null (no launch call) is no host wait
    cause = (
        pl.when(host & (pl.col("sync_end") > pl.col("gap_start")).fill_null(False))
        .then(pl.lit("sync"))
        .when(host.fill_null(False))
        .then(pl.lit("host"))
        .when(pl.col("idle") < kernel_wait_ns)
        .then(pl.lit("kernel wait"))
        .when(other)
        .then(pl.lit("other stream"))
        .otherwise(pl.lit("other"))
    )
    if not whole:
        return g.select("idle", cause.alias("cause"))
    return (
        g.with_columns(
            cause.alias("cause"),
            pl.when(other).then(pl.col("o_at")).alias("waited_at"),
        )
        .select(
            "device",
            "stream",
            "gap_start",
            "gap_end",
            "idle",
            "cause",
            "Idx",
            "global_tid",
            "r_start",
            "at",
            "waited_at",
        )
        .sort("device", "stream", "gap_start")
    )


def idle_by_stream(trace: Trace, kernel_wait_ns: int = KERNEL_WAIT_NS) -> pl.DataFrame:
    """Per stream: its span (first op start to last op end), busy and idle time, and the idle
    time by cause (CAUSE_COLUMNS), with the share of the idle time the host was responsible for
    (host + sync)."""
    lt = launches(trace)
    g = gap_rows(trace, kernel_wait_ns)
    per = lt.group_by("device", "stream").agg(
        pl.len().alias("Ops"),
        (pl.col("end").max() - pl.col("start").min()).alias("Span (ns)"),
        pl.col(GPU).sum().alias("Busy (ns)"),
    )
    by_cause = g.group_by("device", "stream").agg(
        pl.col("idle").sum().alias("Idle (ns)"),
        *[pl.col("idle").filter(pl.col("cause") == c).sum().alias(CAUSE_COLUMNS[c]) for c in CAUSES],
    )
    host = pl.col(CAUSE_COLUMNS["host"]) + pl.col(CAUSE_COLUMNS["sync"])
    return (
        per.join(by_cause, on=["device", "stream"], how="left")
        .with_columns(pl.col("Idle (ns)", *CAUSE_COLUMNS.values()).fill_null(0))
        .with_columns(
            pl.when(pl.col("Idle (ns)") > 0)
            .then((host * 100.0 / pl.col("Idle (ns)")).round(1))
            .otherwise(None)
            .alias("Host share of idle (%)")
        )
        .select(
            pl.col("device").alias("Device"),
            pl.col("stream").alias("Stream"),
            "Ops",
            "Span (ns)",
            "Busy (ns)",
            "Idle (ns)",
            *CAUSE_COLUMNS.values(),
            "Host share of idle (%)",
        )
        .sort("Device", "Stream")
    )


def _call_around(trace: Trace, g: pl.DataFrame, calls: pl.DataFrame, strategy: str, inside: pl.Expr) -> pl.DataFrame:
    """Each gap with the API call of its thread that starts nearest before (`backward`) or after
    (`forward`) the gap's start, kept only where `inside` holds (the call overlaps the gap).
    `calls`: the runtime calls' global_tid, c_start, c_end and name_id, sorted by c_start; the
    calls found are named here (api_calls' names), not every call before the search."""
    found = g.sort("gap_start").join_asof(
        calls,
        left_on="gap_start",
        right_on="c_start",
        by="global_tid",
        strategy=strategy,  # type: ignore[arg-type]
        check_sortedness=False,
    )
    names = _api_names_of(trace, found["name_id"].drop_nulls().unique())
    found = found.join(names.rename({"api": "c_api"}), on="name_id", how="left", maintain_order="left")
    return found.drop("name_id").with_columns(
        pl.when(inside).then(pl.col(c)).alias(c) for c in ("c_start", "c_end", "c_api")
    )


def gap_table(trace: Trace, top: int = 20, kernel_wait_ns: int = KERNEL_WAIT_NS) -> pl.DataFrame:
    """The `top` longest idle gaps (0: every one), each with its cause, the op after it (and the
    CPU op that launched it), and the CPU call around it on the launching thread: the API call in
    progress when the stream went idle, else the first one that started inside the gap."""
    g = gap_rows(trace, kernel_wait_ns).filter(pl.col("idle") > 0)
    if top and g.height > top:
        # the gaps at least as long as the top-th longest, sorted alone (not a million gaps for
        # 20), where no two of them have the same length and start: else the order of such a
        # tie is the whole sort's, and the whole is sorted
        few = g.filter(pl.col("idle") >= g["idle"].top_k(top).min())
        if not few.select(pl.struct("idle", "gap_start").is_duplicated().any()).item():
            g = few
    g = g.sort(["idle", "gap_start"], descending=[True, False])
    if top:
        g = g.head(top)
    g = _named(trace, g)  # the names of the gaps shown alone
    # the calls by their name's id, sorted once for both searches (a sort of every call with its
    # name, twice, was most of this table's time at a million launches)
    if trace.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        calls = trace.columns("runtime", API_COLUMNS).cast({"global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64})
    else:
        calls = pl.DataFrame(schema={"global_tid": pl.Int64, "start": pl.Int64, "end": pl.Int64, "name_id": pl.Int64})
    calls = calls.rename({"start": "c_start", "end": "c_end"}).sort("c_start")
    g = g.with_columns(pl.col("global_tid").cast(pl.Int64))
    before = _call_around(trace, g, calls, "backward", pl.col("c_end") > pl.col("gap_start"))
    after = _call_around(
        trace,
        before.filter(pl.col("c_api").is_null()).drop("c_start", "c_end", "c_api"),
        calls,
        "forward",
        pl.col("c_start") < pl.col("gap_end"),
    )
    both = pl.concat([before.filter(pl.col("c_api").is_not_null()), after], how="vertical_relaxed")
    return both.sort(["idle", "gap_start"], descending=[True, False]).select(
        pl.col("device").alias("Device"),
        pl.col("stream").alias("Stream"),
        pl.col("gap_start").alias("From (ns)"),
        pl.col("idle").alias("Idle (ns)"),
        pl.col("cause").alias("Cause"),
        pl.col("Kernel").alias("Next op"),
        pl.col("Op").alias("Launched by"),
        pl.col("c_api").alias("CPU call"),
        pl.col("c_start").alias("CPU call from (ns)"),
        (pl.col("c_end") - pl.col("c_start")).alias("CPU call (ns)"),
        pl.col("waited_on").alias("Waited on"),
    )


@derived
def idle_totals(trace: Trace, kernel_wait_ns: int = KERNEL_WAIT_NS) -> dict[str, int]:
    """Idle time of every stream together, by cause (for the Overview's finding). Kept: the
    explorer's worker asks it while the gaps are held, and lets them go before the Overview."""
    # the gaps where made (the Launches view), else their causes alone
    g = trace.store.peek(gap_rows, kernel_wait_ns)
    if g is None and kernel_wait_ns == KERNEL_WAIT_NS:
        g = trace.store.peek(gap_rows)
    if g is None:
        lt = launches(trace)
        g = _gaps(trace, lt, kernel_wait_ns, whole=False) if lt.height else pl.DataFrame(schema=CAUSE_SCHEMA)
    got = dict(g.group_by("cause").agg(pl.col("idle").sum()).iter_rows())
    return {c: int(got.get(c, 0)) for c in CAUSES}
