"""The ranks of a distributed run: which rank each process and GPU of the traces ran for.

A run is one or more traces: one nsys export holding every process (`nsys profile torchrun`),
one file per rank (`TRACE.rank*.sqlite`, a folder, torch.profiler JSONs), or a mix. A rank is a
(trace, process, device) that ran GPU work. Its number comes from the trace's own metadata
(torch.profiler's `distributedInfo.rank`, a kview capture's rank, the RANK variable of the one
process an nsys session launched), else from the file name (`rank3`), else from the order of
the processes and devices (device first). When two units would get the same number, every
unit is numbered again in file, device and process order, and the run says so.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kview.analysis.attribution import gpu_ops
from kview.analysis.categories import name_categories
from kview.analysis.gpu_time import launch_timeline
from kview.derived import Store, derived
from kview.errors import TraceError
from kview.io.kineto_reader import KinetoSource
from kview.io.nsys_reader import NsysSource
from kview.trace import Trace, make_tables, open_trace, silent

RANK_IN_NAME = re.compile(r"(?:^|[^a-z0-9])rank[-_.]?(\d+)", re.IGNORECASE)
# launcher variables holding the global rank, in the order they are trusted
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")
TRACE_SUFFIXES = (".sqlite", ".json", ".json.gz")

UNIT_SCHEMA = pl.Schema(
    {"trace": pl.Int64, "global_pid": pl.Int64, "device": pl.Int64, "rank": pl.Int64, "source": pl.String}
)

# collective of an NCCL/RCCL kernel, from its name (ncclDevKernel_AllReduce_Sum_f32_RING_LL,
# ncclKernel_SendRecv_RING_SIMPLE_Sum_int8, ncclDevKernel_Generic_4)
COLLECTIVES = ("AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "AllToAll", "SendRecv", "Send", "Recv")
COLLECTIVE_RE = r"(?i)(" + "|".join(COLLECTIVES) + ")"


@dataclass
class Run:
    """Traces of one run and its ranks (`units`: trace index, global_pid, device, rank, source)."""

    traces: list[Trace]
    units: pl.DataFrame
    notes: list[str] = field(default_factory=list)
    # the run's derived tables (kview.derived), in the store a Trace keeps its own in
    store: Store = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.store = Store(self)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.units["rank"].unique().to_list())


def trace_paths(paths: list[str]) -> list[Path]:
    """The trace files named: files as given, a folder's traces in natural name order
    (rank2 before rank10)."""
    out: list[Path] = []
    for p in map(Path, paths):
        try:  # a folder on the way the user cannot enter: said like any unreadable trace
            is_dir = p.is_dir()
            files = [f for f in p.iterdir() if f.is_file() and f.name.endswith(TRACE_SUFFIXES)] if is_dir else []
        except OSError as e:
            raise TraceError(p, f"cannot be read ({e.strerror})") from None
        if is_dir:
            found = sorted(files, key=lambda f: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", f.name)])
            if not found:
                raise TraceError(p, "is a folder without trace files (.sqlite, .json, .json.gz)")
            out += found
        else:
            out.append(p)
    return out


# Traces read in parallel worker processes first when there are several this large in all: the
# workers fill the frame cache (the SQLite or JSON reading is the cost), then this process
# opens each trace from the cache. Smaller runs are read here: starting a worker costs more.
PARALLEL_BYTES = 256 << 20


def open_run(paths: list[str], use_cache: bool = True, jobs: int | None = None) -> Run:
    """The run of the traces at `paths` (files or folders). With the cache on and several large
    traces, each is first read by one of `jobs` worker processes (default: one per core)."""
    return make_run(open_run_traces(paths, use_cache, jobs))


def open_run_traces(paths: list[str], use_cache: bool = True, jobs: int | None = None) -> list[Trace]:
    """The traces of the run at `paths`, opened as open_run opens them."""
    files = trace_paths(paths)
    if use_cache and len(files) > 1 and (jobs or 0) != 1:
        if jobs or run_bytes(files) >= PARALLEL_BYTES:
            for _ in read_in_workers(files, jobs):
                pass
    return [open_trace(p, use_cache=use_cache) for p in files]


def run_bytes(files: list[Path]) -> int:
    """The traces' size on disk, all together (what decides on worker processes)."""
    return sum(f.stat().st_size for f in files if f.is_file())


def read_in_workers(files: list[Path], jobs: int | None = None, quiet: bool = False) -> Iterator[int]:
    """Read what a run needs from each trace into the frame cache (warm), in `jobs` worker
    processes (default one per core), yielding how many traces are done as each one finishes.
    A trace that fails here (damage, a worker killed for memory) fails again, with its one-line
    reason, when it is opened from the cache; the workers are ended when the program leaves.
    `quiet`: the workers write nothing to the terminal (the explorer owns it)."""
    import atexit
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    workers = min(len(files), jobs or os.cpu_count() or 1)
    _start_resource_tracker()
    # spawn, not fork: polars' thread pool does not survive a fork
    pool = ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=silent if quiet else None
    )
    atexit.register(_end_workers, pool)  # the explorer leaves with os._exit after the atexit handlers
    try:
        futures = [pool.submit(make_tables, str(f), WARM, True) for f in files]
        for n, done in enumerate(as_completed(futures), 1):
            try:
                done.result()
            except Exception:  # the pool broke, or a bug: met again in this process, said there
                pass
            yield n
    except BaseException:  # left early (an error, the generator closed): no worker goes on
        _end_workers(pool)
        raise
    else:
        pool.shutdown()
    finally:
        atexit.unregister(_end_workers)


def _start_resource_tracker() -> None:
    """multiprocessing's resource tracker is started with sys.stderr's descriptor; under the
    explorer sys.stderr is Textual's capture, which has none, so it gets /dev/null instead."""
    from multiprocessing import resource_tracker

    try:
        usable = sys.stderr.fileno() >= 0
    except (AttributeError, OSError, ValueError):
        usable = False
    if usable:
        return
    shown, sys.stderr = sys.stderr, open(os.devnull, "w")
    try:
        resource_tracker.ensure_running()
    finally:
        sys.stderr.close()
        sys.stderr = shown


def _end_workers(pool) -> None:
    """Stop the pool's processes now (not after the trace each is reading)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


# what a run needs of each trace, made in a worker process into the frame cache (warm): the
# GPU ops (reading the trace is the cost) and the steps (no range tree in the reducing process)
WARM = ("attribution.gpu_ops", "steps")


def make_run(traces: list[Trace]) -> Run:
    units, notes = numbered(pl.concat([_units(t, i) for i, t in enumerate(traces)], how="vertical"))
    return Run(traces, units, notes)


@derived
def lone_run(trace: Trace) -> Run:
    """The run of `trace` alone, made once for the trace: its Ranks and Iterations tables share
    its store (the steps, the ops by rank), as they did when one caller made both."""
    return make_run([trace])


def numbered(units: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """The run's units (of every trace, UNIT_SCHEMA and any other columns) by rank, each with its
    final number, and the note saying why the numbers are not the traces' own, if they are not."""
    notes = []
    if units["rank"].n_unique() < units.height:
        notes.append(
            "ranks numbered in file, device and process order: "
            + ", ".join(sorted(set(units["source"].to_list())))
            + " gave some the same number"
        )
        units = units.sort(["trace", "device", "global_pid"], nulls_last=True).with_columns(
            pl.int_range(pl.len(), dtype=pl.Int64).alias("rank"), pl.lit("order").alias("source")
        )
    return units.sort("rank"), notes


@derived
def owned_ops(trace: Trace) -> pl.DataFrame:
    """gpu_ops with each op the trace does not tie to a launching process (no correlation to a
    launch: old torch.profiler traces, NCCL kernels of some traces) given to the process whose
    work ran on its device, when only one did: it is that rank's GPU, not a rank of its own."""
    ops = gpu_ops(trace)
    if ops.height == 0 or ops["global_pid"].null_count() == 0:
        return ops
    owner = (
        ops.filter(pl.col("global_pid").is_not_null() & pl.col("device").is_not_null())
        .group_by("device")
        .agg(pl.col("global_pid").unique().alias("_owner"))
        .filter(pl.col("_owner").list.len() == 1)
        .with_columns(pl.col("_owner").list.first())
    )
    return (
        ops.join(owner, on="device", how="left")
        .with_columns(pl.coalesce("global_pid", "_owner").alias("global_pid"))
        .drop("_owner")
    )


def _units(trace: Trace, index: int) -> pl.DataFrame:
    """(process, device) pairs that ran GPU work in one trace, with their rank and its source."""
    u = trace_units(trace)
    return u.select(pl.lit(index, dtype=pl.Int64).alias("trace"), *u.columns).cast(UNIT_SCHEMA)


def named_by_file(units: pl.DataFrame) -> bool:
    """Whether ranks were numbered from the file's name: another name of the same file (a
    link) numbers them otherwise, so what is made of them is not kept for the file."""
    return "file name" in units["source"].to_list()


@derived(key="ranks.units", version="1", persist=True, keep=lambda u: not named_by_file(u))
def trace_units(trace: Trace) -> pl.DataFrame:
    """The units of one trace (UNIT_SCHEMA without its index in a run), kept in the frame cache:
    a second look does not read every GPU op to find the processes and devices."""
    schema = pl.Schema({k: v for k, v in UNIT_SCHEMA.items() if k != "trace"})
    ops = owned_ops(trace)
    if ops.height == 0:
        return pl.DataFrame(schema=schema)
    u = ops.select("global_pid", "device").unique().sort(["device", "global_pid"], nulls_last=True)
    given, source = _trace_rank(trace)
    if given is not None and (u["global_pid"].drop_nulls().n_unique() <= 1 or source == "file name"):
        ranks = pl.lit(given, dtype=pl.Int64) + pl.int_range(pl.len(), dtype=pl.Int64)
    else:
        ranks, source = pl.int_range(pl.len(), dtype=pl.Int64), "device"
    return u.select("global_pid", "device", ranks.alias("rank"), pl.lit(source).alias("source")).cast(schema)


def _trace_rank(trace: Trace) -> tuple[int | None, str]:
    meta = trace.metadata
    for key, source in (("DIST_RANK", "distributedInfo"), ("CAPTURE_RANK", "capture")):
        if str(meta.get(key, "")).isdigit():
            return int(meta[key]), source
    env = _launch_environment(trace)
    for var in RANK_VARIABLES:
        if env.get(var, "").isdigit():
            return int(env[var]), f"${var}"
    m = RANK_IN_NAME.search(trace.name)
    if m:
        return int(m.group(1)), "file name"
    return None, ""


def _launch_environment(trace: Trace) -> dict[str, str]:
    """The environment of the process an nsys session launched (META_DATA_CAPTURE), so a
    per-rank `nsys profile` under torchrun knows its RANK."""

    src = trace.source.db if isinstance(trace.source, NsysSource) else None
    if src is None or not src.has("META_DATA_CAPTURE"):
        return {}
    rows = src.rows("SELECT value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:ENVIRONMENT_VARIABLE'")
    env = {}
    for (value,) in rows:
        k, _, v = str(value).partition("=")
        env[k] = v.strip('"')
    return env


def rank_table(run: Run) -> pl.DataFrame:
    """One row per rank: where it comes from (file, process id, device) and how it was numbered."""
    names = pl.DataFrame(
        {"trace": list(range(len(run.traces))), "Trace": [t.name for t in run.traces]},
        schema={"trace": pl.Int64, "Trace": pl.String},
    )
    pids = pl.concat(
        [
            t.processes.select("global_pid", "pid").with_columns(pl.lit(i, dtype=pl.Int64).alias("trace"))
            for i, t in enumerate(run.traces)
        ]
    )
    return (
        run.units.join(names, on="trace", how="left")
        .join(pids.unique(["trace", "global_pid"]), on=["trace", "global_pid"], how="left")
        .select(
            pl.col("rank").alias("Rank"),
            "Trace",
            pl.col("pid").alias("Process"),
            pl.col("device").alias("Device"),
            pl.col("source").alias("Rank from"),
        )
        .sort("Rank")
    )


KINDS = ("compute", "communication", "memory")


@derived
def rank_ops(run: Run) -> pl.DataFrame:
    """Every GPU op of the run with its rank: rank, start, end, t (when its launch call
    started: gpu_time.launch_timeline), kind (compute, communication or memory: copies and
    sets), collective (communication kernels) and bytes (copies, sets, and collectives where
    the trace records them). No kernel names: 8 ranks of a million kernels would hold 8
    million of them."""

    parts = []
    for i, t in enumerate(run.traces):
        ops = owned_ops(t)
        if ops.height == 0:
            continue
        ops = ops.select("Idx", "start", "end", "device", "global_pid", "Kernel", "kind", "bytes", "correlation")
        ops = ops.join(launch_timeline(t).select("Idx", "t"), on="Idx", how="left").with_columns(
            pl.coalesce("t", "start").alias("t")
        )
        coll = _collective_bytes(t)
        if coll is not None:  # torch.profiler records a collective's size on its kernel
            ops = (
                ops.join(coll, on=["correlation", "device", "start"], how="left")
                .with_columns(pl.coalesce("bytes", "coll_bytes").alias("bytes"))
                .drop("coll_bytes")
            )
        cats = name_categories(ops.filter(pl.col("kind") == "kernel")["Kernel"])
        comm = cats.filter(pl.col("name_category") == "communication").select(
            "Kernel", pl.col("Kernel").str.extract(COLLECTIVE_RE, 1).alias("collective")
        )
        ops = ops.join(comm, on="Kernel", how="left").with_columns(
            pl.when(pl.col("kind") != "kernel")
            .then(pl.lit("memory"))
            .when(pl.col("Kernel").is_in(comm["Kernel"].implode()))
            .then(pl.lit("communication"))
            .otherwise(pl.lit("compute"))
            .alias("kind")
        )
        ops = ops.with_columns(
            pl.when(pl.col("kind") == "communication")
            .then(_canonical_collective(pl.col("collective")))
            .alias("collective")
        )
        units = run.units.filter(pl.col("trace") == i).select("global_pid", "device", "rank")
        parts.append(
            ops.join(units, on=["global_pid", "device"], how="inner", nulls_equal=True).select(
                "rank", "start", "end", "t", "kind", "collective", "bytes"
            )
        )
    schema = pl.Schema(
        {
            "rank": pl.Int64,
            "start": pl.Int64,
            "end": pl.Int64,
            "t": pl.Int64,
            "kind": pl.String,
            "collective": pl.String,
            "bytes": pl.Int64,
        }
    )
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts).cast(schema).sort(["rank", "start"])


def _canonical_collective(c: pl.Expr) -> pl.Expr:
    """The collective's name as NCCL spells it (AllReduce), whatever case the kernel used; the
    other kernels of a communication library (ncclDevKernel_Generic) are `other`."""
    spelled = {k.lower(): k for k in COLLECTIVES}
    return c.str.to_lowercase().replace_strict(spelled, default=None, return_dtype=pl.String).fill_null("other")


def _collective_bytes(trace: Trace) -> pl.DataFrame | None:
    if not isinstance(trace.source, KinetoSource) or "coll_bytes" not in trace.source.frames["kernels"].columns:
        return None
    k = trace.columns("kernels", ["correlation", "device", "start", "coll_bytes"])
    k = k.filter(pl.col("coll_bytes").is_not_null())
    return k.unique(["correlation", "device", "start"]) if k.height else None
