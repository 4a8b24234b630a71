"""`kview bench`: time the steps of a built-in workload, as the seed's benchmark table does.

For each context length, dtype, pass and warm-up count asked for: run the warm-up steps, then
time --steps steps (synchronizing the GPU after each), and report the mean and sample standard
deviation of one step and the peak GPU memory. Passes: forward, forward+backward (`backward`),
and a full training step with AdamW (`train`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import timeit

from kview.capture import attention_bench
from kview.capture.options import DTYPE_NAMES, LM_SIZES, MODELS, MODES

FORMATS = ("table", "csv", "tsv", "md", "json")


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kview bench",
        description="Time forward, forward+backward and training steps of a built-in workload: mean and "
        "standard deviation of one step over --steps timed steps after --warmup warm-up steps, "
        "and peak GPU memory, with sweeps over context length, dtype and warm-up. Runs on the GPU "
        "when CUDA is available, else on the CPU (and says so).",
        epilog="example: kview bench lm --size small --ctx 256,512 --dtype fp32,bf16 --warmup 0,1,5\n"
        "attention: kview bench attention --help (d_model x sequence length, forward/backward, memory, OOM)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "model",
        choices=MODELS,
        metavar="MODEL",
        help=f"the workload: {', '.join(MODELS)}; or `attention` (kview bench attention --help)",
    )
    p.add_argument("--size", default="small", choices=LM_SIZES, help="LM size (default: small)")
    p.add_argument("--ctx", default=None, help="context length, or a comma list to sweep (default: LM 512, BERT 128)")
    p.add_argument(
        "--batch", type=int, default=None, help="batch size (default: LM 4, BERT 4, DLRM 32768, NCF 1048576)"
    )
    p.add_argument("--layers", type=int, default=None, help="number of layers (default: LM by size, BERT 2)")
    p.add_argument(
        "--modes",
        default="forward,backward,train",
        help="passes to time, a comma list of forward, backward (forward+backward), train "
        "(adds AdamW) (default: forward,backward,train)",
    )
    p.add_argument(
        "--dtype",
        default="fp32",
        help=f"{', '.join(DTYPE_NAMES)} (bf16/fp16 under autocast), or a comma list (default: fp32)",
    )
    p.add_argument("--warmup", default="5", help="warm-up steps, or a comma list to sweep, e.g. 0,1,2,5 (default: 5)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per row (default: 10)")
    p.add_argument(
        "--memory-snapshot",
        default=None,
        metavar="PICKLE",
        help="record the allocator history of the last pass into PICKLE, for `kview memory PICKLE` and "
        "the Memory view (GPU only; default: off)",
    )
    p.add_argument("-f", "--format", default="table", choices=FORMATS, help="output format (default: table)")
    return p


def measure(model_name, a, ctx, dtype, mode, warmup, snapshot=None) -> dict:
    import torch

    # deferred with torch (above): the parser and --help need none
    from kview.capture.workload import BUILDERS, DTYPES, step

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ns = argparse.Namespace(size=a.size, ctx=ctx, batch=a.batch, layers=a.layers)
    if model_name == "lm" and ns.ctx is None:
        ns.ctx = 512
    model, loss_fn = BUILDERS[model_name](ns, device)
    # only a training step uses it; making one imports torch._dynamo (seconds of CPU at start-up)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False) if mode == "train" else None
    dt = DTYPES[dtype]
    autocast = (lambda: torch.autocast(device_type=device, dtype=dt)) if dt else contextlib.nullcontext

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step(model, loss_fn, opt, mode, autocast)
    sync()
    clock = None
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        if snapshot:
            # deferred: torch
            from kview.capture import memory_history
            from kview.models import annotate

            clock = memory_history.start()
            annotate.also_record_functions(True)  # the phases as the snapshot's own annotations
    times = []
    for _ in range(a.steps):
        t0 = timeit.default_timer()
        step(model, loss_fn, opt, mode, autocast)
        sync()
        times.append(timeit.default_timer() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    if clock is not None:
        annotate.also_record_functions(False)
        memory_history.finish(snapshot, clock)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "Model": model_name if model_name != "lm" else f"lm-{a.size}",
        "Device": _device_name(device),
        "Ctx": ns.ctx,
        "Dtype": dtype,
        "Pass": mode,
        "Warmup": warmup,
        "Mean (s)": statistics.fmean(times),
        "Std (s)": statistics.stdev(times) if len(times) > 1 else 0.0,
        "Peak Mem (GiB)": peak,
    }


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def main(argv: list[str]) -> int:
    if argv[:1] == ["attention"]:
        return attention_bench.main(argv[1:])
    a = parser().parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES] + [d for d in a.dtype.split(",") if d not in DTYPE_NAMES]
    if bad:
        print(f"kview bench: unknown mode or dtype {', '.join(bad)}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        print(f"kview bench: needs torch (pip install 'kview[capture]'): {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kview bench: no CUDA device: timing on the CPU (peak GPU memory is not measured)", file=sys.stderr)
        if a.memory_snapshot:
            print("kview bench: --memory-snapshot records GPU allocations only; none on the CPU", file=sys.stderr)
            a.memory_snapshot = None
    ctxs = _ints(a.ctx) if a.ctx else [None]
    rows = []
    for ctx in ctxs:
        for dtype in a.dtype.split(","):
            for mode in modes:
                for w in _ints(a.warmup):
                    snap = a.memory_snapshot if (mode == modes[-1] and a.memory_snapshot) else None
                    rows.append(measure(a.model, a, ctx, dtype, mode, w, snap))
    rounded = {"Mean (s)": 6, "Std (s)": 6, "Peak Mem (GiB)": 3}
    rows = [{k: (round(v, rounded[k]) if k in rounded and v is not None else v) for k, v in r.items()} for r in rows]
    if a.format == "json":  # without polars: the GPU machines that have only torch
        sys.stdout.write(json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    else:
        import polars as pl

        # deferred with polars (above): a GPU machine may have torch only
        from kview.output import render

        sys.stdout.write(
            render.render(pl.DataFrame(rows).with_columns(pl.col("Peak Mem (GiB)").cast(pl.Float64)), a.format)
        )
    if a.memory_snapshot:
        print(
            f"kview bench: wrote the allocator history of the last pass to {a.memory_snapshot}: its timeline, peak "
            f"and largest allocations with `kview memory {a.memory_snapshot}`, or the Memory view of "
            f"`kview {a.memory_snapshot}`",
            file=sys.stderr,
        )
    return 0
