"""A run of many rank files (issue 31): `kview ranks --cluster local:N` against the process pool
and against one rank's time x the number of ranks, and the memory of the reducing process as
the ranks grow.

Rank files are tiled from real captures (the DDP pair in tests/fixtures/capture by default:
`tile_trace.py --distinct-labels`, so the copies read as later steps) and hard-linked under
`--ranks` names `tiled.rank0.sqlite` .. (each its own path: its own frame cache entry and
summary, no copy on disk). Every RANK the files carry is 0 or 1, so the run numbers its ranks
in file order. Each measurement is a whole `kview ranks ... -f json` process with an empty frame
cache (`XDG_CACHE_HOME`), and the load average is taken before and after it (the machine may be
shared). `peak_mib` is the VmHWM of the process that runs kview's command (the client: a local
cluster's workers and the pool's workers are processes of their own, not counted).

- one rank: `kview ranks tiled.rank0.sqlite`, its wall time x ranks is one machine reading them
  one after another;
- pool: `kview ranks run/` with the worker processes of this machine (one per core);
- cluster: `kview ranks run/ --cluster local:W --cache-dir FRESH`, W worker processes;
- rerun: the same command again, every summary read from the cache folder;
- client memory: the rerun's reduction over the first n files, for each n of --memory-ranks, and
  a cold cluster run over the first --cold-small files (the first cold run is over all of them).

The cluster's JSON must equal the pool's (the script stops otherwise).

    python bench/bench_cluster.py --tile 10 --ranks 256 --workers 2
    python bench/bench_cluster.py --tile 40 --ranks 256 --workers 16 --out /tmp/kview_bench_cluster
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DDP = [HERE.parent / "tests" / "fixtures" / "capture" / f"ddp_nsys.rank{r}.sqlite.xz" for r in (0, 1)]

# the client: kview's command line in this process, then its own peak RSS (VmHWM) into a file;
# PARALLEL_BYTES 0: the pool reads every run of several files, whatever its size
CLIENT = """
import sys, kview.analysis.ranks as r
r.PARALLEL_BYTES = 0
from kview.cli import main
code = main(sys.argv[2:])
with open("/proc/self/status") as f:
    kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as f:
    f.write(str(kib))
sys.exit(code)
"""


def rank_files(sources: list[str], tile: int, out: Path, ranks: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    from tile_trace import tile as tile_trace

    tiled = []
    for i, s in enumerate(sources):
        plain = out / f"source{i}.sqlite"
        if not plain.exists():
            if s.endswith(".xz"):
                with lzma.open(s) as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copy(s, plain)
        t = out / f"source{i}_x{tile}.sqlite"
        if not t.exists():
            if tile == 1:
                os.link(plain, t)
            else:
                tile_trace(str(plain), tile, str(t), distinct_labels=True)
        tiled.append(t)
    run = out / f"run_x{tile}"
    run.mkdir(exist_ok=True)
    files = []
    for r in range(ranks):
        f = run / f"tiled.rank{r}.sqlite"
        if not f.exists():
            os.link(tiled[r % len(tiled)], f)
        files.append(f)
    return files


def measured(args: list[str], label: str) -> dict:
    """One kview client process with an empty frame cache: wall, its own peak, the load."""
    with tempfile.TemporaryDirectory(prefix="kview-bench-cluster-") as tmp:
        peak = Path(tmp) / "peak"
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-c", CLIENT, str(peak), *args], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        res = {
            "what": label,
            "wall_s": round(wall, 2),
            "peak_mib": round(int(peak.read_text()) / 1024) if peak.exists() else None,
            "load_before": round(load0, 2),
            "load_after": round(os.getloadavg()[0], 2),
            "rc": p.returncode,
        }
        if p.returncode != 0:
            res["stderr"] = p.stderr[-800:]
        res["_out"] = p.stdout
        return res


def show(res: dict) -> None:
    print(json.dumps({k: v for k, v in res.items() if not k.startswith("_")}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", action="append", help="an nsys export (.sqlite or .sqlite.xz); default: the DDP pair")
    ap.add_argument("--tile", type=int, default=10, help="copies of each source in a rank file (default 10)")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="local cluster's worker processes")
    ap.add_argument("--memory-ranks", default="32,64,128,256", help="reductions measured for client memory")
    ap.add_argument("--cold-small", type=int, default=64, help="a second cold cluster run over this many files")
    ap.add_argument("--skip-pool", action="store_true")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "kview_bench_cluster"))
    args = ap.parse_args()
    out = Path(args.out)
    files = [str(f) for f in rank_files(args.source or [str(p) for p in DDP], args.tile, out, args.ranks)]
    size = os.path.getsize(files[0])
    print(
        json.dumps(
            {"ranks": len(files), "file_mib": round(size / 2**20, 1), "cores": os.cpu_count(), "workers": args.workers}
        ),
        flush=True,
    )
    one = measured(["ranks", files[0], "-f", "json"], "one rank")
    one["x_ranks_s"] = round(one["wall_s"] * len(files), 1)
    one["x_ranks_per_worker_s"] = round(one["wall_s"] * len(files) / args.workers, 1)
    show(one)

    summaries = out / "summaries"
    shutil.rmtree(summaries, ignore_errors=True)
    cluster = ["--cluster", f"local:{args.workers}", "--cache-dir", str(summaries)]
    cold = measured(["ranks", *files, "-f", "json", *cluster], f"cluster local:{args.workers}, {len(files)} ranks")
    show(cold)
    rerun = measured(["ranks", *files, "-f", "json", *cluster], f"rerun from the summaries, {len(files)} ranks")
    show(rerun)
    if rerun["_out"] != cold["_out"]:
        sys.exit("the rerun's tables differ from the first run's")
    if not args.skip_pool:
        pool = measured(["ranks", *files, "-f", "json"], f"process pool ({os.cpu_count()} workers), {len(files)} ranks")
        show(pool)
        if pool["_out"] != cold["_out"]:
            sys.exit("the cluster's tables differ from the process pool's")
        print(json.dumps({"cluster_equals_pool": True}), flush=True)
    for n in [int(x) for x in args.memory_ranks.split(",") if x and int(x) <= len(files)]:
        show(measured(["ranks", *files[:n], "-f", "json", *cluster], f"reduction of {n} ranks (summaries cached)"))
    if 0 < args.cold_small < len(files):
        small = out / "summaries_small"
        shutil.rmtree(small, ignore_errors=True)
        c = ["--cluster", f"local:{args.workers}", "--cache-dir", str(small)]
        show(measured(["ranks", *files[: args.cold_small], "-f", "json", *c], f"cluster, {args.cold_small} ranks"))


if __name__ == "__main__":
    main()
