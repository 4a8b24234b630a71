"""Rank files summarized on a Dask cluster (`--cluster ADDRESS` or `--cluster local:N`).

Dask distributed runs plain Python functions on workers that users already start on Slurm, PBS
or LSF (dask-jobqueue), Kubernetes (dask-kubernetes) or by hand (`dask scheduler`, `dask
worker`), so the per-rank step (rank_files.summarize) is sent as it is: no actors, no object
store, no runtime of its own to install on the nodes besides the package. Each worker writes
the file's tables into the shared cache folder and returns their paths; this process reduces
them (rank_files.SummarizedRun). The engine is the optional extra `kview[cluster]`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kview.analysis.rank_files import Step
from kview.analysis.ranks import _start_resource_tracker
from kview.errors import KviewError, UsageError, shown
from kview.trace import silent

LOCAL = re.compile(r"^local(?::(\d+))?$")


@dataclass
class Done:
    """One rank file's outcome: its tables (None: it failed, `problem` says why)."""

    path: str
    tables: dict[str, str] | None
    problem: str = ""
    cached: bool = False


@contextmanager
def connected(address: str, quiet: bool = False):
    """A Dask client of the cluster at `address`, or of a local cluster of N worker processes
    (`local:N`; `local`: one per core) started here and ended on leaving. `quiet`: the local
    workers write nothing to the terminal (the explorer owns it)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError(
            "needs the cluster extra (pip install 'kview[cluster]')", what=f"--cluster {shown(address)}"
        ) from None
    m = LOCAL.match(address)
    if m:
        n = int(m.group(1)) if m.group(1) else None
        if n is not None and n < 1:
            raise UsageError("takes local:N with N of 1 or more", what="--cluster")
        if quiet:
            _start_resource_tracker()
        # one task at a time per worker process: the per-rank step is CPU-bound Python and polars
        with (
            LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",  # any free port: two clusters never meet on 8787
                silence_logs=logging.CRITICAL,
            ) as cluster,
            Client(cluster) as client,
        ):
            if quiet:
                client.run(silent)  # the workers' processes (a local cluster's nannies are this one)
            yield client
        return
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"cannot reach the scheduler ({e})", what=f"--cluster {shown(address)}") from None
    with client:
        yield client


def summarize_on(client, files: list[str], step: Step) -> Iterator[Done]:
    """Each rank file's summary, as it finishes, made by a worker of `client`'s cluster (which
    reads it from the step's cache folder when an earlier run left it there). A file that fails
    (cannot be read, its worker died) is a Done without tables naming the problem; the other
    files go on."""
    from distributed import as_completed

    # pure=False: a file edited between two runs of one client is summarized again
    futures = {client.submit(step, path, pure=False): path for path in files}
    for future in as_completed(list(futures)):
        path = futures[future]
        try:
            yield Done(path, future.result())
        except Exception as e:  # the worker's error, raised here: named with its file
            yield Done(path, None, _problem(e))
        finally:
            future.release()


def _problem(e: Exception) -> str:
    if isinstance(e, KviewError):
        return e.problem
    name = type(e).__name__
    if name == "KilledWorker":  # the worker died with the file (out of memory, a crash) too often
        return "its worker died while summarizing it (out of memory?)"
    return f"failed on its worker ({name}: {e})"


def summarize_run(
    address: str,
    files: list[str],
    step: Step,
    progress: Callable[[int, int, Done], None] | None = None,
    quiet: bool = False,
) -> list[Done]:
    """Every rank file's Done, in the files' order, each reported to `progress` (count done,
    count in all, the file's Done) as it finishes."""
    out: dict[str, Done] = {}

    def finished(done: Done) -> None:
        out[done.path] = done
        if progress is not None:
            progress(len(out), len(files), done)

    for path in files:  # a rerun: what the cache holds needs no cluster
        found = step.cached(path)
        if found is not None:
            finished(Done(path, found, cached=True))
    left = [f for f in files if f not in out]
    if left:
        with connected(address, quiet) as client:
            for done in summarize_on(client, left, step):
                finished(done)
    return [out[f] for f in files]
