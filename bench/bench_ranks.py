"""8 rank files summarized in parallel processes against one rank (issue 17, item 6).

Builds rank files by tiling a real trace (`tile_trace.py --distinct-labels`, once; `--tile 1`
takes the trace as it is) and hard-linking the result as `TRACE.rank0.sqlite` .. `rank7` (each
its own path, so its own frame cache entry and its rank from its name; no copy on disk),
then times whole `kview ranks ... -f json` processes, each with an empty cache (cold: the
SQLite reading is most of the cost):

- one rank: `kview ranks rank0`;
- eight ranks: `kview ranks rank0 .. rank7`, read by worker processes (one per core,
  ranks.open_run) that fill the frame cache, then summarized from it;
- eight ranks read one after another in the one process (the same command with the parallel
  reading turned off), for reference.

The target: eight ranks take at most 1.5x one rank's time per core, i.e.
wall(8) <= 1.5 * 8 * wall(1) / cores; the script prints that ratio.

    python bench/bench_ranks.py /work/data/dense/dense_llama2.7b_nsys.sqlite --tile 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_scale import child  # noqa: E402

SERIAL = "import sys; import kview.analysis.ranks as r; r.PARALLEL_BYTES = 1 << 62; from kview.cli import main; "


def rank_files(source: str, tile: int, out: Path, ranks: int) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(source).name.removesuffix(".sqlite")
    tiled = out / f"{stem}_x{tile}.sqlite"
    if not tiled.exists():
        if tile == 1:
            _link(Path(source), tiled)
        else:
            here = Path(__file__).parent
            cmd = [sys.executable, str(here / "tile_trace.py"), "--distinct-labels", source, str(tile), str(tiled)]
            subprocess.run(cmd, check=True)
    files = []
    for r in range(ranks):
        f = out / f"{stem}_x{tile}.rank{r}.sqlite"
        if not f.exists():
            _link(tiled, f)
        files.append(f)
    return files


def _link(source: Path, to: Path) -> None:
    try:
        os.link(source, to)
    except OSError:  # another file system
        shutil.copy(source, to)


def timed(argv: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="kview-bench-cache-") as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        return child(argv, env)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", help="an nsys export to tile into rank files")
    ap.add_argument("--tile", type=int, default=2, help="copies of the trace in each rank file (default 2)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "kview_bench_ranks"))
    ap.add_argument("--serial", action="store_true", help="also time the eight ranks read in one process")
    args = ap.parse_args()
    files = [str(f) for f in rank_files(args.trace, args.tile, Path(args.out), args.ranks)]
    cores = os.cpu_count() or 1
    kview = [sys.executable, "-c", "import sys; from kview.cli import main; sys.exit(main(sys.argv[1:]))"]
    one = timed([*kview, "ranks", files[0], "-f", "json"])
    many = timed([*kview, "ranks", *files, "-f", "json"])
    res = {
        "files": len(files),
        "file_bytes": Path(files[0]).stat().st_size,
        "cores": cores,
        "one_rank": one,
        "all_ranks_parallel": many,
    }
    if args.serial:
        res["all_ranks_serial"] = timed(
            [sys.executable, "-c", SERIAL + "sys.exit(main(sys.argv[1:]))", "ranks", *files, "-f", "json"]
        )
    per_core = len(files) * one["wall_s"] / min(cores, len(files))
    res["ratio_to_one_rank_per_core"] = round(many["wall_s"] / per_core, 2)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
