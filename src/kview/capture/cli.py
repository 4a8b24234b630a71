"""`kview capture`: run a workload under Nsight Systems (when installed) or torch.profiler and
write a trace in the nsys SQLite schema."""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from kview.errors import TraceError

from kview.capture.workload import DTYPES, MODES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kview capture", description="Capture a workload into an nsys-schema trace.")
    p.add_argument("model", choices=["lm", "bert", "dlrm", "ncf"])
    p.add_argument("--size", default="small", help="LM size: tiny, small, medium, large, xl, 2.7B")
    p.add_argument("--ctx", type=int, default=None, help="context / sequence length")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--mode", default="train", choices=MODES, help="backward = forward+backward; train adds AdamW")
    p.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--backend", default="auto", choices=["auto", "nsys", "torch"])
    p.add_argument("--shapes", action="store_true", help="record tensor shapes of every op")
    p.add_argument("-o", "--output", required=True, help="trace to write (.sqlite)")
    return p


def workload_args(a) -> list[str]:
    out = ["--model", a.model, "--size", a.size, "--mode", a.mode, "--dtype", a.dtype,
           "--warmup", str(a.warmup), "--steps", str(a.steps)]
    for flag, v in (("--ctx", a.ctx), ("--batch", a.batch), ("--layers", a.layers)):
        if v is not None:
            out += [flag, str(v)]
    return out


def capture_nsys(a, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kview-capture-") as tmp:
        rep = Path(tmp) / "trace"
        cmd = ["nsys", "profile", "--trace=cuda,nvtx,osrt", "--sample=none", "--cpuctxsw=none",
               f"--pytorch={'autograd-shapes-nvtx' if a.shapes else 'autograd-nvtx'}",
               "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--force-overwrite", "true",
               "-o", str(rep), sys.executable, "-m", "kview.capture.workload", *workload_args(a)]
        print(f"kview capture: profiling under nsys ({' '.join(workload_args(a))})", file=sys.stderr)
        run(cmd, capture=True)
        print("kview capture: exporting to SQLite", file=sys.stderr)
        run(["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o", str(out), str(rep) + ".nsys-rep"],
            capture=True)


def capture_torch(a, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kview-capture-") as tmp:
        js = Path(tmp) / "trace.json"
        args = workload_args(a) + ["--kineto-json", str(js)] + (["--shapes"] if a.shapes else [])
        print(f"kview capture: profiling under torch.profiler ({' '.join(workload_args(a))})", file=sys.stderr)
        r = run([sys.executable, "-m", "kview.capture.workload", *args], capture=True)
        info = {}
        for line in r.stderr.splitlines():
            if line.startswith("KVIEW_CAPTURE "):
                info = json.loads(line.split(" ", 1)[1])
        convert_kineto(js, out, info, " ".join(["kview", "capture", *sys.argv[2:]]))


def convert_kineto(js: Path, out: Path, info: dict, command: str) -> Path:
    """A torch.profiler trace (JSON) -> an nsys-schema SQLite trace, with the capture facts."""
    from kview.io.kineto_reader import read

    from kview.capture import nsys_schema_writer

    k = read(js)
    meta = {**k.metadata, "EXPORT_PRODUCT_NAME": "kview capture (torch.profiler)",
            "EXPORT_SCHEMA_VERSION": "kview-1", "CAPTURE_BACKEND": "torch",
            **{f"CAPTURE_{key.upper()}": str(v) for key, v in info.items()}, "CAPTURE_COMMAND": command}
    return nsys_schema_writer.write(out, strings=k.strings, kernels=k.kernels, runtime=k.runtime, memcpy=k.memcpy,
                                    memset=k.memset, nvtx_events=k.nvtx_events, processes=k.processes,
                                    devices=k.devices, metadata=meta)


def run(cmd: list[str], capture: bool = False) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, text=True, capture_output=capture)
    if r.returncode != 0:
        tail = (r.stderr or "").strip().splitlines()[-1:] if capture else []
        raise TraceError(cmd[0], f"capture step failed (exit {r.returncode}){': ' + tail[0] if tail else ''}")
    return r


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    out = Path(a.output)
    if out.suffix != ".sqlite":
        print("kview capture: the output must end in .sqlite", file=sys.stderr)
        return 2
    backend = a.backend
    if backend == "auto":
        backend = "nsys" if shutil.which("nsys") else "torch"
    try:
        (capture_nsys if backend == "nsys" else capture_torch)(a, out)
    except TraceError as e:
        print(f"kview capture: {e.problem}", file=sys.stderr)
        return 2
    print(f"kview capture: wrote {out} ({backend} backend)", file=sys.stderr)
    return 0
