"""Run every trace-viewing kview command in every format and record its bytes, to prove that a
refactor leaves kview's outputs byte-identical.

    python bench/same_outputs.py OUT            # run every case into OUT (manifest: OUT/manifest.json)
    python bench/same_outputs.py OUT --only 'S\\.stats'   # only the cases whose name matches
    python bench/same_outputs.py --list         # the cases, one a line
    python bench/same_outputs.py --compare A B  # every difference, a short diff each; exit 1 if any

`python -m kview.cli` runs with this interpreter (`--python` for another), so PYTHONPATH or the
active venv decides which kview is measured; OUT/meta.json records which one it was. A command
on a trace runs with `-f json|table|md|csv|tsv` on stdout and with `-o out.txt` (the table, not
fitted; stats also `-o out.json` and `-o out.csv`, one file per report); a single table picked
with `--table`/`-r` in CSV (the one format its whole command cannot print). Each case runs its
first variant cold (an empty XDG_CACHE_HOME), then every variant warm (that cache again).
stdout, stderr, the exit code and the files written are kept per run, `CASE/VARIANT.cold|warm.*`.

Everything a run can see is fixed so two runs of the same code give the same bytes: the traces
are copied to one folder (/tmp/kview-same/traces) with a fixed mtime, each case runs in its own
fixed work and cache folders there, with COLUMNS=120, TZ=UTC, LANG=C.UTF-8, HOME and
KVIEW_MAX_MEMORY fixed. Only one harness runs at a time on a machine (a lock in that folder).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import difflib
import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = Path("/tmp/kview-same")  # fixed: paths printed in outputs must not depend on where OUT is
TRACES = ROOT / "traces"
FIXED_MTIME = 1_700_000_000  # the copied traces' mtime, so nothing keyed on it can vary

# name -> (source in the repository, path under TRACES); .xz sources are decompressed
TRACE_FILES = {
    "S": ("sample_traces/lm-small_ctx256_train_nsys.sqlite", "lm-small_ctx256_train_nsys.sqlite"),
    "K": ("tests/fixtures/kineto/traces__b200__eager_trace.json.gz", "traces__b200__eager_trace.json.gz"),
    "D0": ("tests/fixtures/capture/ddp_nsys.rank0.sqlite.xz", "ddp/ddp_nsys.rank0.sqlite"),
    "D1": ("tests/fixtures/capture/ddp_nsys.rank1.sqlite.xz", "ddp/ddp_nsys.rank1.sqlite"),
    # none of the three traces above holds memory events: this one is for `kview memory` only
    "M": ("tests/fixtures/memory/mem_torch.json.gz", "mem_torch.json.gz"),
}
DDP_DIR = "ddp"  # the folder of the two DDP ranks, for the commands that read a folder

FORMATS = ("json", "table", "md", "csv", "tsv")
# a table picked with --table or -r: its table, md and json are part of the whole command's
# output, so only CSV (which needs one table) is new (the machine has 2 cores shared by many)
ONE = ("csv",)
MAIN = (*FORMATS, "o:out.txt")  # a whole command: every format, and the table not fitted in a file
STATS_REPORTS = (
    "nvtx_sum nvtx_pushpop_sum nvtx_startend_sum osrt_sum cuda_api_sum cuda_gpu_kern_sum "
    "cuda_gpu_kern_gb_sum cuda_gpu_mem_time_sum cuda_gpu_mem_size_sum nvtx_kern_sum "
    "nvtx_gpu_proj_sum cuda_kern_exec_sum"
).split()


@dataclass(frozen=True)
class Case:
    name: str  # TRACE.command.variant, also the folder of its outputs
    args: tuple[str, ...]  # after `python -m kview.cli`; {S} {K} {D0} {D1} {M} {DDP} are trace paths
    # the variants: formats on stdout, "o:NAME" for -o NAME; the first one also runs cold
    outputs: tuple[str, ...] = MAIN


def _cases() -> list[Case]:
    cases: list[Case] = []

    def add(name: str, line: str, outputs: tuple[str, ...] | None = None) -> None:
        args = tuple(shlex.split(line))
        cases.append(Case(name, args) if outputs is None else Case(name, args, outputs))

    # every command in every format on the sample; the other two traces (other readers, other
    # shapes: torch.profiler JSON, two streams with NCCL) in fewer formats and without the single
    # tables: about 450 runs, 20-40 minutes on the 2 busy cores this has to share
    main_outputs = {"S": MAIN, "K": ("json", "table", "md", "csv", "o:out.txt"), "D0": ("json", "table", "csv")}
    for t in ("S", "K", "D0"):
        tr, main = "{" + t + "}", main_outputs[t]
        every = t == "S"  # the single tables (--table, -r, options) on the sample only

        add(f"{t}.stats", f"stats {tr}", main)
        if every:  # -r all -o P.csv: one file per report
            add(f"{t}.stats.all", f"stats {tr} -r all", (*FORMATS, "o:out.txt", "o:out.json", "o:out.csv"))
            add(f"{t}.stats.two", f"stats {tr} -r cuda_gpu_kern_sum,nvtx_sum", ("md", "o:out.csv"))
            for r in STATS_REPORTS:
                add(f"{t}.stats.{r}", f"stats {tr} -r {r}", ONE)
        else:
            add(f"{t}.stats.all", f"stats {tr} -r all", main)
        add(f"{t}.kernels", f"kernels {tr}", main)
        if t != "D0":
            add(f"{t}.kernels.absolute", f"kernels {tr} --absolute", ONE)  # the file's own clock
        if every:
            add(f"{t}.kernels.filter", f"kernels {tr} --filter 'gemm dur>10us'", ("table", "csv"))
            add(f"{t}.kernels.bprop", f"kernels {tr} --filter 'dir:bprop -cat:elementwise'", ONE)
        add(f"{t}.layers", f"layers {tr}", main)
        add(f"{t}.overview", f"overview {tr}", main)
        add(f"{t}.phases", f"phases {tr}", main)
        add(f"{t}.compare", f"compare {tr}", main)
        if every:
            for by in ("category", "kernel", "layer"):
                add(f"{t}.compare.by-{by}", f"compare {tr} --by {by}", ONE)
            add(f"{t}.compare.cpu", f"compare {tr} --metric cpu", ONE)
        add(f"{t}.efficiency", f"efficiency {tr}", main)
        if every:
            for table in ("gpus", "steps", "layers", "categories", "kernels", "tensor-cores", "peaks"):
                add(f"{t}.efficiency.{table}", f"efficiency {tr} --table {table}", ONE)
            add(f"{t}.efficiency.gpu", f"efficiency {tr} --gpu H100-SXM --table kernels", ONE)
            add(f"{t}.memory", f"memory {tr}", ("table", "json"))  # refused: no memory events
        add(f"{t}.ranks", f"ranks {tr}", main)
        add(f"{t}.iterations", f"iterations {tr}", main)
        add(f"{t}.launches", f"launches {tr}", main)
        if every:
            for table in ("kernels", "ops", "queue", "idle", "gaps", "queue-series"):
                add(f"{t}.launches.{table}", f"launches {tr} --table {table}", ONE)
            add(f"{t}.launches.gaps-all", f"launches {tr} --table gaps --top 0 --kernel-wait 1000", ONE)
        add(f"{t}.critical-path", f"critical-path {tr}", main)
        if every:
            add(f"{t}.critical-path.steps", f"critical-path {tr} --table steps", ONE)
            add(f"{t}.critical-path.ops", f"critical-path {tr} --table ops --top 0", ONE)
        add(f"{t}.timeline", f"timeline {tr}", main)
        if t != "D0":
            window = "--from 20ms --to 40ms --width 100 --rows gpu,nvtx --depth 2"
            add(f"{t}.timeline.window", f"timeline {tr} {window}", ("table", "csv"))
            add(f"{t}.export", f"export {tr}", ("o:out.json",))
        if every:
            add(f"{t}.export.window", f"export {tr} --from 10ms --to 30ms --filter gemm", ("o:out.json.gz",))
    add("S.compare.ranges", "compare {S} --ranges forward_pass,backward_pass,optimizer_step")
    add("S.layers.pattern", r"layers {S} --pattern '^layer_\d+$'", ("table",))
    add("S.compare.root", "compare {S} {K} --root forward_pass", ("table", "json"))
    add("SK.compare", "compare {S} {K}")
    add("SK.diff", "diff {S} {K}")
    add("D.compare", "compare {D0} {D1}")
    add("D.compare.by-kernel", "compare {D0} {D1} --by kernel", ONE)
    add("D.compare.ranks", "compare --ranks {DDP}")
    add("D.diff", "diff {D1} {D0}")
    add("D.diff.top", "diff {D0} {D1} --top 5", ("table",))
    add("D.diff.gate", "diff {D1} {D0} --gate 10")
    add("D.diff.gate-scopes", "diff {D1} {D0} --gate layer:5% --gate total:2% --gate-min 0", ("table", "json"))
    add("D.ranks", "ranks {DDP}")
    for table in ("ranks", "time", "collectives", "stragglers", "waits"):
        add(f"D.ranks.{table}", f"ranks {{DDP}} --table {table}", ONE)
    add("D.ranks.files", "ranks {D0} {D1}", ("json",))
    add("D.iterations", "iterations {DDP}")
    for table in ("iterations", "statistics"):
        add(f"D.iterations.{table}", f"iterations {{DDP}} --table {table}", ONE)
    add("D.timeline", "timeline {DDP}")
    add("D.timeline.files", "timeline {D0} {D1} --width 100 --rows gpu,api", ("table", "csv"))
    add("M.memory", "memory {M}")
    for table in ("summary", "timeline", "phases", "steps", "by-site", "by-size", "top"):
        add(f"M.memory.{table}", f"memory {{M}} --table {table}", ONE)
    add("M.memory.plot", "memory {M} --width 80 --height 6 --top 3", ("table", "md"))
    return cases


def _trace_paths() -> dict[str, str]:
    paths = {k: str(TRACES / dst) for k, (_, dst) in TRACE_FILES.items()}
    paths["DDP"] = str(TRACES / DDP_DIR)
    return paths


def _place_traces() -> None:
    """Copy the traces to TRACES (once: a copy with the right bytes is kept) with a fixed mtime."""
    for src, dst in TRACE_FILES.values():
        source, target = REPO / src, TRACES / dst
        data = lzma.decompress(source.read_bytes()) if src.endswith(".xz") else source.read_bytes()
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(target.name + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
        target.chmod(0o444)
        os.utime(target, (FIXED_MTIME, FIXED_MTIME))


def _env(cache: Path) -> dict[str, str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(ROOT / "home"),
        "XDG_CACHE_HOME": str(cache),
        "COLUMNS": "120",  # terminal tables fitted to 120 columns (piped stdout is fitted to COLUMNS)
        "LINES": "40",
        "TZ": "UTC",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "KVIEW_MAX_MEMORY": "8G",  # the default (the memory available) varies with the machine's load
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for k in ("PYTHONPATH", "VIRTUAL_ENV"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def _normalize(data: bytes) -> bytes:
    """Where an output is not determined by the code and the trace, make it so, visibly.

    Nothing needed normalizing so far: two runs of the same commit give the same bytes."""
    return data


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", s)


def _run_case(case: Case, python: str, out: Path) -> list[str]:
    """Every variant of one case, cold then warm; returns the files written under out."""
    paths = _trace_paths()
    args = [a.format(**paths) for a in case.args]
    work, cache = ROOT / "work" / case.name, ROOT / "cache" / case.name
    dest = out / case.name
    dest.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    shutil.rmtree(cache, ignore_errors=True)
    # the first variant cold (the cache empty: the trace is read and the cache written), then
    # every variant warm (read from that cache); the cache is behind the document, not the writer
    runs = [(case.outputs[0], "cold")] + [(v, "warm") for v in case.outputs]
    for variant, temp in runs:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        if variant.startswith("o:"):
            extra = ["-o", variant[2:]]  # relative to the fixed work folder (cwd)
        else:
            extra = ["-f", variant]
        proc = subprocess.run(
            [python, "-m", "kview.cli", *args, *extra],
            cwd=work,
            env=_env(cache),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=600,
        )
        stem = f"{_safe(variant.replace('o:', 'o-'))}.{temp}"
        for suffix, data in (
            ("out", proc.stdout),
            ("err", proc.stderr),
            ("rc", f"{proc.returncode}\n".encode()),
        ):
            (dest / f"{stem}.{suffix}").write_bytes(_normalize(data))
            written.append(f"{case.name}/{stem}.{suffix}")
        for f in sorted(p for p in work.rglob("*") if p.is_file()):
            rel = f.relative_to(work).as_posix()
            target = dest / f"{stem}.file.{_safe(rel)}"
            data = f.read_bytes()
            if rel.endswith(".gz"):  # keep the JSON inside readable in a diff; the gzip bytes too
                (dest / f"{stem}.file.{_safe(rel)}.unzipped").write_bytes(gzip.decompress(data))
                written.append(f"{case.name}/{stem}.file.{_safe(rel)}.unzipped")
            target.write_bytes(_normalize(data))
            written.append(f"{case.name}/{stem}.file.{_safe(rel)}")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    return written


def _code_facts(python: str) -> dict[str, str]:
    probe = (
        "import kview, kview.cli; print(kview.__file__)\n"
        "try:\n import kview.tui; print(kview.tui.__file__)\n"
        "except ImportError as e:\n print('not-importable:' + type(e).__name__)"
    )
    res = subprocess.run(
        [python, "-c", probe], cwd="/", env=_env(ROOT / "cache" / "_probe"), capture_output=True, text=True, check=True
    )
    kview_file, tui_file = res.stdout.split()
    src = Path(kview_file).parent
    head = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    return {"kview": kview_file, "kview.tui": tui_file, "commit": head, "dirty": dirty, "python": python}


def run(out: Path, python: str, only: str | None, jobs: int) -> int:
    if out.exists() and any(out.iterdir()):
        print(f"same_outputs: {out} is not empty", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    ROOT.mkdir(parents=True, exist_ok=True)
    lock = open(ROOT / "lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"same_outputs: another run holds {ROOT / 'lock'}", file=sys.stderr)
        return 2
    _place_traces()
    cases = [c for c in _cases() if only is None or re.search(only, c.name)]
    facts = _code_facts(python)
    print(
        f"kview from {facts['kview']} (commit {facts['commit'][:10]}{', dirty' if facts['dirty'] else ''}); "
        f"{len(cases)} cases, {sum(len(c.outputs) + 1 for c in cases)} runs",
        flush=True,
    )
    t0 = time.monotonic()
    written: list[str] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(_run_case, c, python, out): c for c in cases}
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            written += fut.result()
            if i % 20 == 0 or i == len(cases):
                print(f"  {i}/{len(cases)} cases, {time.monotonic() - t0:.0f} s", flush=True)
    manifest = {rel: hashlib.sha256((out / rel).read_bytes()).hexdigest() for rel in sorted(written)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    # the traces' own bytes: a fixture changed between two runs is a difference of its own
    facts["traces"] = " ".join(
        f"{k}={hashlib.sha256((TRACES / dst).read_bytes()).hexdigest()[:16]}" for k, (_, dst) in TRACE_FILES.items()
    )
    facts["cases"] = str(len(cases))
    facts["runs"] = str(sum(len(c.outputs) + 1 for c in cases))
    facts["seconds"] = f"{time.monotonic() - t0:.0f}"
    facts["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    (out / "meta.json").write_text(json.dumps(facts, indent=1) + "\n")  # not compared
    print(f"{len(manifest)} files in {out}/manifest.json", flush=True)
    return 0


def compare(a: Path, b: Path, context_lines: int = 30) -> int:
    ma = json.loads((a / "manifest.json").read_text())
    mb = json.loads((b / "manifest.json").read_text())
    different = sorted(k for k in ma.keys() & mb.keys() if ma[k] != mb[k])
    only_a, only_b = sorted(ma.keys() - mb.keys()), sorted(mb.keys() - ma.keys())
    meta = [json.loads((d / "meta.json").read_text()) if (d / "meta.json").exists() else {} for d in (a, b)]
    print(f"A: {a} (kview {meta[0].get('kview')}, commit {meta[0].get('commit', '?')[:10]})")
    print(f"B: {b} (kview {meta[1].get('kview')}, commit {meta[1].get('commit', '?')[:10]})")
    print(
        f"{len(ma)} files in A, {len(mb)} in B; {len(different)} differ, {len(only_a)} only in A, "
        f"{len(only_b)} only in B"
    )
    if meta[0].get("traces") and meta[1].get("traces") and meta[0]["traces"] != meta[1]["traces"]:
        print(f"THE TRACES DIFFER: A {meta[0].get('traces')}, B {meta[1].get('traces')}")
    for k in only_a:
        print(f"ONLY IN A: {k}")
    for k in only_b:
        print(f"ONLY IN B: {k}")
    # one line per differing run (case, variant, cold/warm), then the diffs
    for k in different:
        print(f"DIFFERS: {k}")
    for k in different:
        ta = (a / k).read_bytes().decode("utf-8", "replace").splitlines()
        tb = (b / k).read_bytes().decode("utf-8", "replace").splitlines()
        diff = list(difflib.unified_diff(ta, tb, f"A/{k}", f"B/{k}", n=1, lineterm=""))
        print()
        print("\n".join(diff[:context_lines]))
        if len(diff) > context_lines:
            print(f"... {len(diff) - context_lines} more diff lines")
    return 1 if different or only_a or only_b else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", nargs="?", type=Path, help="an empty folder for the outputs")
    p.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two output folders")
    p.add_argument("--only", help="only the cases whose name matches this regex")
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs kview")
    p.add_argument("--jobs", type=int, default=2)
    args = p.parse_args()
    if args.list:
        for c in _cases():
            print(c.name, " ".join(c.args), "|", " ".join(c.outputs))
        return 0
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        p.error("give an output folder, --compare A B or --list")
    return run(args.out, args.python, args.only, args.jobs)


if __name__ == "__main__":
    sys.exit(main())
