"""`kview capture`: profile your own program, or one of the built-in workloads, and write a
trace in the nsys SQLite schema.

    kview capture [options] -o TRACE.sqlite -- COMMAND [ARGS...]
    kview capture MODEL [options] -o TRACE.sqlite

Nsight Systems is used when `nsys` is on PATH, torch.profiler otherwise (--backend chooses).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kview.capture import command as cmd
from kview.capture.memory_file import finalize, memory_name
from kview.capture.options import DTYPE_NAMES, LM_SIZES, MODELS, MODES
from kview.capture.process_group import run_in_group
from kview.errors import KviewError, TraceError

USAGE = """kview capture [options] -o TRACE.sqlite -- COMMAND [ARGS...]
       kview capture MODEL [options] -o TRACE.sqlite"""
EPILOG = """examples:
  kview capture -o run.sqlite -- python train.py --lr 3e-4
  kview capture --annotate --skip 5 --steps 2 -o run.sqlite -- python -m mypkg.train
  kview capture --backend torch -o run.sqlite -- torchrun --nproc-per-node 2 train.py   (run.rank0.sqlite, run.rank1.sqlite)
  kview capture lm --size small --ctx 256 --mode train -o lm.sqlite

COMMAND is `python SCRIPT`, `python -m MODULE`, a .py script, or `torchrun ...`; it runs unchanged
(same sys.argv) with kview's hooks: a step ends at each optimizer step unless the program calls
kview.capture.step() or torch.profiler's prof.step(), and each profiled step is an NVTX range step_N.
Under torchrun each rank writes TRACE.rank{R}.sqlite; open them together with `kview TRACE.rank*.sqlite`."""


def _nonneg(s: str) -> int:
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return v


def _pos(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kview capture",
        usage=USAGE,
        epilog=EPILOG,
        description="Profile a program or a built-in workload into an nsys-schema SQLite trace.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        nargs="?",
        choices=MODELS,
        metavar="MODEL",
        help=f"a built-in workload ({', '.join(MODELS)}) instead of a COMMAND",
    )
    p.add_argument("-o", "--output", required=True, help="trace to write (.sqlite); per rank TRACE.rank{R}.sqlite")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "nsys", "torch"],
        help="auto: nsys when on PATH, else torch.profiler (default: auto)",
    )
    p.add_argument(
        "--shapes",
        action="store_true",
        help="record tensor shapes of every op (nsys --pytorch=autograd-shapes-nvtx; default: off)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="also record the CUDA allocator's history (torch.cuda.memory._record_memory_history) of the "
        "profiled steps into TRACE.memory.pickle (`kview memory`, the Memory view), and under nsys "
        "its CUDA memory usage (--cuda-memory-usage=true) (default: off)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="overwrite the traces of an earlier capture (default: refuse before running)",
    )
    p.add_argument(
        "--steps",
        type=_pos,
        default=None,
        help="steps to profile (default: COMMAND: all, to the end of the run; MODEL: 1)",
    )
    g = p.add_argument_group("COMMAND form")
    g.add_argument("--skip", type=_nonneg, default=None, help="steps to run before profiling starts (default: 0)")
    g.add_argument(
        "--annotate",
        action="store_true",
        help="a range per module call named by its path (layers.3.mlp), through global module hooks",
    )
    g.add_argument(
        "--annotate-depth",
        type=_nonneg,
        default=None,
        metavar="D",
        help="with --annotate: only modules at most D levels below the model (default: all)",
    )
    g.add_argument(
        "--annotate-include",
        default=None,
        metavar="REGEX",
        help="with --annotate: only modules whose path or class name matches (default: all)",
    )
    g.add_argument(
        "--annotate-exclude",
        default=None,
        metavar="REGEX",
        help="with --annotate: skip modules whose path or class name matches (default: none)",
    )
    g.add_argument(
        "--one-file",
        action="store_true",
        help="torchrun under nsys: one report holding every rank instead of one per rank",
    )
    g.add_argument(
        "--keep-json",
        action="store_true",
        help="torch backend: also keep the torch.profiler trace as TRACE[.rank{R}].json.gz",
    )
    g = p.add_argument_group("MODEL form")
    g.add_argument("--size", default="small", choices=LM_SIZES, help="LM size (default: small)")
    g.add_argument("--ctx", type=_pos, default=None, help="context / sequence length (default: LM 512, BERT 128)")
    g.add_argument(
        "--batch", type=_pos, default=None, help="batch size (default: LM 4, BERT 4, DLRM 32768, NCF 1048576)"
    )
    g.add_argument("--layers", type=_pos, default=None, help="number of layers (default: LM by size, BERT 2)")
    g.add_argument(
        "--mode", default="train", choices=MODES, help="backward = forward+backward; train adds AdamW (default: train)"
    )
    g.add_argument("--dtype", default="fp32", choices=DTYPE_NAMES, help="bf16/fp16 run under autocast (default: fp32)")
    g.add_argument("--warmup", type=_nonneg, default=2, help="warm-up steps before the profiled ones (default: 2)")
    return p


def workload_args(a, tmp: Path | None = None) -> list[str]:
    out = [
        "--model",
        a.model,
        "--size",
        a.size,
        "--mode",
        a.mode,
        "--dtype",
        a.dtype,
        "--warmup",
        str(a.warmup),
        "--steps",
        str(a.steps),
    ]
    if a.memory and tmp is not None:
        out += ["--memory-snapshot", str(tmp / "memory.pickle")]
    for flag, v in (("--ctx", a.ctx), ("--batch", a.batch), ("--layers", a.layers)):
        if v is not None:
            out += [flag, str(v)]
    return out


def capture_nsys(a, out: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="kview-capture-") as tmp:
        rep = Path(tmp) / "trace"
        cmd = [
            "nsys",
            "profile",
            "--trace=cuda,nvtx,osrt",
            "--sample=none",
            "--cpuctxsw=none",
            f"--pytorch={'autograd-shapes-nvtx' if a.shapes else 'autograd-nvtx'}",
            *(["--cuda-memory-usage=true"] if a.memory else []),
            "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop",
            "--force-overwrite",
            "true",
            "-o",
            str(rep),
            sys.executable,
            "-m",
            "kview.capture.workload",
            *workload_args(a, Path(tmp)),
        ]
        print(f"kview capture: profiling under nsys ({' '.join(workload_args(a))})", file=sys.stderr)
        r = run(cmd, capture=True, tmp=Path(tmp))
        print("kview capture: exporting to SQLite", file=sys.stderr)
        run(
            ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep) + ".nsys-rep"],
            capture=True,
            tmp=Path(tmp),
        )
        info = _workload_info(r.stderr)
        _memory_beside(a, Path(tmp), out, info)
        return info


def _memory_beside(a, tmp: Path, out: Path, info: dict) -> None:
    """--memory: align the snapshot with the finished trace and move it beside it."""
    if not a.memory:
        return

    snap = tmp / "memory.pickle"
    if not snap.exists():
        info["memory_note"] = "no CUDA device: no allocator history was recorded"
        return
    note = finalize(snap, out)
    shutil.move(str(snap), memory_name(out))
    info["memory_written"] = str(memory_name(out))
    if note:
        info["memory_note"] = note


def _workload_info(stderr: str) -> dict:
    for line in stderr.splitlines():
        if line.startswith("KVIEW_CAPTURE "):
            return json.loads(line.split(" ", 1)[1])
    return {}


def capture_torch(a, out: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="kview-capture-") as tmp:
        js = Path(tmp) / "trace.json"
        args = workload_args(a, Path(tmp)) + ["--kineto-json", str(js)] + (["--shapes"] if a.shapes else [])
        print(f"kview capture: profiling under torch.profiler ({' '.join(workload_args(a))})", file=sys.stderr)
        r = run([sys.executable, "-m", "kview.capture.workload", *args], capture=True, tmp=Path(tmp))
        info = _workload_info(r.stderr)
        # deferred: polars and the Kineto reader, for the torch backend only
        from kview.capture.nsys_schema_writer import convert_kineto

        convert_kineto(js, out, info, " ".join(["kview", "capture", *sys.argv[2:]]))
        _memory_beside(a, Path(tmp), out, info)
        return info


def run(cmd: list[str], capture: bool = False, tmp: Path | None = None) -> subprocess.CompletedProcess:
    """One step of a capture, in a process group of its own (a signal to kview reaches it and
    removes `tmp`, process_group.py)."""

    try:
        r = run_in_group(cmd, tmp=tmp, capture_output=capture)
    except FileNotFoundError as e:
        raise TraceError(cmd[0], f"cannot be started ({e.strerror})") from None
    if r.returncode != 0:
        tail = (r.stderr or "").strip().splitlines()[-1:] if capture else []
        raise TraceError(cmd[0], f"capture step failed (exit {r.returncode}){': ' + tail[0] if tail else ''}")
    return r


CPU_NOTE = "ran on the CPU: no CUDA device was used, so the trace holds CPU ops and no GPU kernels"


def main(argv: list[str]) -> int:
    if "--" in argv:
        at = argv.index("--")
        opts, command = argv[:at], argv[at + 1 :]
    else:
        opts, command = argv, None
    p = parser()
    a = p.parse_args(opts)
    out = Path(a.output)
    if out.suffix != ".sqlite":
        p.error("the output must end in .sqlite")
    if (command is None) == (a.model is None):
        p.error(
            "give either MODEL or `-- COMMAND [ARGS...]`, not both"
            if command is not None
            else "give a MODEL or `-- COMMAND [ARGS...]`"
        )
    if not out.resolve().parent.is_dir():
        p.error(f"output folder {out.parent} does not exist")
    backend = a.backend
    if backend == "auto":
        backend = "nsys" if shutil.which("nsys") else "torch"
    elif backend == "nsys" and not shutil.which("nsys"):
        print("kview capture: nsys is not on PATH (install Nsight Systems or use --backend torch)", file=sys.stderr)
        return 2
    if command is not None:
        return _main_command(a, command, out, backend)
    if a.skip is not None or a.annotate or a.one_file or a.keep_json:
        p.error("--skip, --annotate, --one-file and --keep-json go with `-- COMMAND`")

    for o in [out] + ([memory_name(out)] if a.memory else []):
        if o.exists() and not a.force:
            print(f"kview capture: output {o}: exists (give --force to overwrite it)", file=sys.stderr)
            return 2
    a.steps = a.steps or 1
    try:
        info = (capture_nsys if backend == "nsys" else capture_torch)(a, out)
    except TraceError as e:
        print(f"kview capture: {e.problem}", file=sys.stderr)
        return 2
    cpu = f"; {CPU_NOTE}" if info.get("device") == "cpu" else ""
    if info.get("memory_note"):
        print(f"kview capture: --memory: {info['memory_note']}", file=sys.stderr)
    also = f" and {info['memory_written']}" if info.get("memory_written") else ""
    print(f"kview capture: wrote {out}{also} ({backend} backend{cpu})", file=sys.stderr)
    return 0


def _main_command(a, command: list[str], out: Path, backend: str) -> int:
    annotate = None
    if a.annotate:
        annotate = {"depth": a.annotate_depth, "include": a.annotate_include, "exclude": a.annotate_exclude}
    elif a.annotate_depth is not None or a.annotate_include or a.annotate_exclude:
        print("kview capture: --annotate-depth/-include/-exclude need --annotate", file=sys.stderr)
        return 2
    try:
        o = cmd.run(
            command,
            out,
            backend=backend,
            skip=a.skip,
            steps=a.steps,
            shapes=a.shapes,
            annotate=annotate,
            one_file=a.one_file,
            keep_json=a.keep_json,
            force=a.force,
            memory=a.memory,
        )
    except cmd.CommandFailed as e:
        print(f"kview capture: {e}", file=sys.stderr)
        return e.code
    except cmd.CommandError as e:
        print(f"kview capture: {e}", file=sys.stderr)
        return 2
    except KviewError as e:
        print(f"kview capture: {e.what}: {e.problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kview capture: interrupted; no trace written", file=sys.stderr)
        return 130
    for note in o.notes:
        print(f"kview capture: {note}", file=sys.stderr)
    print(f"kview capture: wrote {', '.join(str(p) for p in o.written)} ({backend} backend)", file=sys.stderr)
    return 0
