"""A run summarized one rank file at a time: each file's tables written as Parquet into a cache
folder (shared by the machines of a cluster), the run's tables reduced from them.

`summarize` is the per-file step (read, attribute, summarize), run anywhere the file can be
read: a worker process of a cluster (kview.cluster), or this process. It writes the file's
ranks, its iteration table and its collective kernels, each with its rank as that file alone
numbers it, and returns the tables' paths. `SummarizedRun` then numbers the ranks of every file
as one run would (ranks.numbered) and reduces: the per-rank tables are stacked, the matching of
collectives across ranks is folded one file at a time (collectives.instance_parts), so what the
reducing process holds grows with the iterations and collectives of one rank, not with the
number of ranks. Every table equals the one a run of all the traces opened together gives
(tests/test_cluster.py), because both are made by the same functions.

An entry is keyed by the file's resolved path, inode, size and mtime, and by the versions of
kview and of its tables; every Parquet file carries the key in its metadata and is checked
against it when read, and the entry's manifest is written last, so a half-written, stale or
foreign entry is never read (it is summarized again).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from kview import __version__, atomic_write
from kview.analysis.collectives import (
    collective_ops,
    collectives_of,
    combine_instances,
    instance_parts,
    rank_waits,
    shared_instances,
    straggler_table,
    stragglers_of,
)
from kview.analysis.compare import column, columns_side_by_side, rank_windows
from kview.analysis.critical_path import iterations_bound_by
from kview.analysis.iterations import stats_of
from kview.analysis.rank_summary import summary_of
from kview.analysis.ranks import UNIT_SCHEMA, Run, make_run, numbered
from kview.derived import table_of, version_of
from kview.errors import TraceError
from kview.io.cache import FORMAT_VERSION
from kview.trace import open_trace

# the summaries' own version: changes whenever what `summarize` writes changes (columns); the
# rules of the derived tables it asks for are their own versions (kview.derived.version_of)
SUMMARY_VERSION = "4"  # 2: the iterations with their critical path verdict; 3: a step owns the GPU work it launched;
# 4: an op that waited for its launch call, not the GPU, adds launch time to the critical path


@functools.cache
def table_versions() -> str:
    """What an entry's tables were made by: kview, the readers' frames, the summaries, and
    every derived table `summarize` may ask for."""
    tables = version_of(summarize, *SUMMARIES.values())
    return f"kview {__version__}, frames {FORMAT_VERSION}, summary {SUMMARY_VERSION}, tables {tables}"


TABLES = ("units", "iterations", "collective_ops")
# the summary's tables, made by the one-file run's store by their keys (units are the file's own)
SUMMARIES = {"iterations": table_of(iterations_bound_by).key, "collective_ops": table_of(collective_ops).key}
META_KEY = "kview.rank_file"
MANIFEST = "manifest.json"
# instance parts of this many files stacked before they are combined into one (bounds memory)
FOLD_FILES = 16


def entry_key(path: str | os.PathLike, extra: str = "") -> str:
    """The cache key of the rank file at `path` as it is now (OSError if it cannot be seen)."""
    resolved = os.path.realpath(path)
    st = os.stat(resolved)
    ident = f"{resolved}\0{st.st_ino}\0{st.st_size}\0{st.st_mtime_ns}\0{table_versions()}\0{extra}"
    return hashlib.blake2b(ident.encode(), digest_size=16).hexdigest()


def entry_dir(cache_dir: str | os.PathLike, path: str | os.PathLike, key: str) -> Path:
    """Where a rank file's tables are kept: its name (for a person looking), then its key."""
    return Path(cache_dir) / f"{Path(path).name[:80]}-{key}"


def cached_tables(cache_dir: str | os.PathLike, path: str | os.PathLike, extra: str = "") -> dict[str, str] | None:
    """The paths of the file's tables in the cache, if a complete entry of the file as it is now
    is there (its manifest and every table carry the key); else None."""
    try:
        key = entry_key(path, extra)
        d = entry_dir(cache_dir, path, key)
        manifest = json.loads((d / MANIFEST).read_text())
        if manifest.get("key") != key:
            return None
        tables = {name: str(d / f"{name}.parquet") for name in manifest["tables"]}
        for f in tables.values():
            if pl.read_parquet_metadata(f).get(META_KEY) != key:
                return None
        return tables
    except (OSError, ValueError, KeyError, TypeError, pl.exceptions.PolarsError):
        return None


def _write_entry(cache_dir: str, path: str, key: str, frames: dict[str, pl.DataFrame]) -> dict[str, str]:
    d = entry_dir(cache_dir, path, key)
    d.mkdir(parents=True, exist_ok=True)
    tables = {}
    for name, frame in frames.items():
        dest = d / f"{name}.parquet"
        with atomic_write.replacing(dest) as tmp:
            frame.write_parquet(tmp, compression="lz4", statistics=False, metadata={META_KEY: key})
        tables[name] = str(dest)
    with atomic_write.replacing(d / MANIFEST) as tmp:  # last: the entry is complete once it is there
        tmp.write_text(json.dumps({"key": key, "trace": path, "tables": list(frames)}))
    return tables


def summarize(
    path: str, cache_dir: str, use_cache: bool = True, compare: tuple[str, str, str | None] | None = None
) -> dict[str, str]:
    """The per-rank step: the tables of the rank file at `path` (read, attributed, summarized;
    or found in `cache_dir` from an earlier run), written into `cache_dir`: table -> Parquet
    path. With `compare` (by, metric, root) the tables are its ranks and their columns of
    `kview compare --ranks` instead. A file that cannot be read raises TraceError naming it."""
    extra = compare_key(compare)
    found = cached_tables(cache_dir, path, extra)
    if found is not None:
        return found

    try:
        key = entry_key(path, extra)
    except OSError as e:
        raise TraceError(path, f"cannot be read ({e.strerror})") from None
    trace = open_trace(path, use_cache=use_cache)
    run = make_run([trace])  # the file alone: its ranks numbered as it numbers them
    units = run.units.join(
        trace.processes.select("global_pid", "pid").unique("global_pid"), on="global_pid", how="left"
    ).select(*UNIT_SCHEMA.names(), pl.col("pid").cast(pl.Int64), pl.lit(trace.name).alias("Trace"))
    if compare is None:
        frames = {"units": units, **{name: run.store.by_key(key) for name, key in SUMMARIES.items()}}
    else:
        frames = {"units": units, "columns": _columns(run, *compare)}
    try:
        return _write_entry(cache_dir, path, key, frames)
    except OSError as e:
        raise TraceError(path, f"its summary cannot be written into {cache_dir} ({e.strerror or e})") from None


def compare_key(compare: tuple[str, str, str | None] | None) -> str:
    return "" if compare is None else "compare\0" + "\0".join(str(x) for x in compare)


COLUMN_SCHEMA = pl.Schema({"rank": pl.Int64, "item": pl.String, "v": pl.Int64})


def _columns(run: Run, by: str, metric: str, root: str | None) -> pl.DataFrame:
    """Each rank's column of `kview compare --ranks` (rank, item, v) of a one-file run."""

    ranks = run.units.sort("rank")["rank"].to_list()  # rank_windows' order
    parts = [
        column(w, by, metric).with_columns(pl.lit(r, dtype=pl.Int64).alias("rank"))
        for w, r in zip(rank_windows(run, root), ranks)
    ]
    return (
        pl.concat([p.select(COLUMN_SCHEMA.names()).cast(COLUMN_SCHEMA) for p in parts])
        if parts
        else pl.DataFrame(schema=COLUMN_SCHEMA)
    )


@dataclass(frozen=True)
class Step:
    """The per-rank step a run asks of every file, as one callable a worker runs: the run's
    tables, or with `compare` (by, metric, root) its columns of `kview compare --ranks`."""

    cache_dir: str
    # the frame cache: off by default, the summaries are this step's cache (a worker writing
    # every trace's frames into its own user cache dir costs a quarter of the step and disk
    # on every node for a copy no one reads again)
    use_cache: bool = False
    compare: tuple[str, str, str | None] | None = None

    def __call__(self, path: str) -> dict[str, str]:
        return summarize(path, self.cache_dir, self.use_cache, self.compare)

    def cached(self, path: str) -> dict[str, str] | None:
        return cached_tables(self.cache_dir, path, compare_key(self.compare))


@dataclass
class SummarizedRun:
    """A run from its rank files' summaries (`tables[i]`: table -> Parquet path of files[i]).
    `units`: trace (index into files), global_pid, device, rank (the run's number), source,
    pid, Trace (the file's name) and given (the rank as its file alone numbers it)."""

    files: list[str]
    tables: list[dict[str, str]]
    units: pl.DataFrame = field(init=False)
    notes: list[str] = field(init=False)

    def __post_init__(self) -> None:
        parts = []
        for i, t in enumerate(self.tables):
            u = pl.read_parquet(t["units"])
            parts.append(
                u.with_columns(
                    pl.lit(i, dtype=pl.Int64).alias("trace"),
                    pl.col("rank").alias("given"),
                )
            )
        empty = pl.Schema([*UNIT_SCHEMA.items(), ("pid", pl.Int64), ("Trace", pl.String), ("given", pl.Int64)])
        units = pl.concat(parts) if parts else pl.DataFrame(schema=empty)
        self.units, self.notes = numbered(units)

    @property
    def ranks(self) -> list[int]:
        return sorted(self.units["rank"].unique().to_list())

    def _renumbered(self, i: int, frame: pl.DataFrame, column: str) -> pl.DataFrame:
        """`frame` of file i with its ranks (`column`) as the run numbers them."""
        to = self.units.filter(pl.col("trace") == i).select(pl.col("given").alias(column), pl.col("rank").alias("_r"))
        return frame.join(to, on=column, how="left").with_columns(pl.col("_r").alias(column)).drop("_r")

    def _each(self, table: str, column: str) -> Iterator[pl.DataFrame]:
        for i, t in enumerate(self.tables):
            yield self._renumbered(i, pl.read_parquet(t[table]), column)

    def rank_table(self) -> pl.DataFrame:
        return self.units.select(
            pl.col("rank").alias("Rank"),
            "Trace",
            pl.col("pid").alias("Process"),
            pl.col("device").alias("Device"),
            pl.col("source").alias("Rank from"),
        ).sort("Rank")

    def iteration_table(self) -> pl.DataFrame:
        """iterations.iteration_table of the run with each iteration's critical path verdict, as
        `kview iterations` and the Ranks view show it (critical_path.iterations_bound_by)."""
        return pl.concat(list(self._each("iterations", "Rank"))).sort(["Rank", "Iteration"], nulls_last=True)

    def _collectives(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(collectives by rank, the instances shared by two or more ranks), one file at a time."""
        by_rank: list[pl.DataFrame] = []
        parts: list[pl.DataFrame] = []
        folded: list[pl.DataFrame] = []
        for c in self._each("collective_ops", "rank"):
            by_rank.append(collectives_of(c))
            parts.append(instance_parts(c))
            if len(parts) >= FOLD_FILES:
                folded, parts = [combine_instances(pl.concat(folded + parts))], []
        folded = [combine_instances(pl.concat(folded + parts))]
        coll = pl.concat(by_rank).sort(["Rank", "Time (ns)", "Collective"], descending=[False, True, False])
        return coll, shared_instances(folded[0])

    def compare(self, by: str) -> pl.DataFrame:
        """`kview compare --ranks` (by range, category, kernel or layer) of the files' columns."""

        cols = pl.concat(list(self._each("columns", "rank")))
        labelled = [(f"rank {r}", cols.filter(pl.col("rank") == r).select("item", "v")) for r in self.ranks]
        return columns_side_by_side(labelled, by, spread=True)

    def tables_of(self, command: str) -> dict[str, pl.DataFrame]:
        """The tables of `kview ranks` (ranks, time, collectives, stragglers, waits) or of
        `kview iterations` (iterations, statistics)."""
        iterations = self.iteration_table()
        if command == "iterations":
            return {"iterations": iterations, "statistics": stats_of(iterations)}
        coll, shared = self._collectives()
        waited = pl.concat([rank_waits(c, shared) for c in self._each("collective_ops", "rank")])
        waits = straggler_table(shared)
        return {
            "ranks": self.rank_table(),
            "time": summary_of(iterations, waited),
            "collectives": coll,
            "stragglers": stragglers_of(waits),
            "waits": waits,
        }
