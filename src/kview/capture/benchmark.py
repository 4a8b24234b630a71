"""`kview bench`: the seed's benchmark table — mean and standard deviation of forward,
forward+backward and full training steps, with warm-up, dtype and context sweeps, peak GPU
memory per mode, and an optional allocator-history snapshot."""
from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import timeit

from kview.capture.workload import BUILDERS, DTYPES, MODES, step


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kview bench", description=__doc__.splitlines()[0])
    p.add_argument("model", choices=sorted(BUILDERS))
    p.add_argument("--size", default="small")
    p.add_argument("--ctx", default=None, help="context length, or a comma list to sweep")
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--modes", default="forward,backward,train")
    p.add_argument("--dtype", default="fp32", help="fp32, bf16 (autocast) or a comma list")
    p.add_argument("--warmup", default="5", help="warm-up steps, or a comma list to sweep (e.g. 0,1,2,5)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--memory-snapshot", default=None, metavar="PICKLE",
                   help="record the allocator history of the last mode and summarize its largest allocations")
    p.add_argument("-f", "--format", default="table", choices=("table", "csv", "tsv", "md", "json"))
    return p


def measure(model_name, a, ctx, dtype, mode, warmup, snapshot=None) -> dict:
    import torch

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ns = argparse.Namespace(size=a.size, ctx=ctx, batch=a.batch, layers=a.layers)
    if model_name == "lm" and ns.ctx is None:
        ns.ctx = 512
    model, loss_fn = BUILDERS[model_name](ns, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
    dt = DTYPES[dtype]
    autocast = (lambda: torch.autocast(device_type=device, dtype=dt)) if dt else contextlib.nullcontext

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step(model, loss_fn, opt, mode, autocast)
    sync()
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        if snapshot:
            torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    times = []
    for _ in range(a.steps):
        t0 = timeit.default_timer()
        step(model, loss_fn, opt, mode, autocast)
        sync()
        times.append(timeit.default_timer() - t0)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    if device == "cuda" and snapshot:
        torch.cuda.memory._dump_snapshot(snapshot)
        torch.cuda.memory._record_memory_history(enabled=None)
    del model, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"Model": model_name if model_name != "lm" else f"lm-{a.size}", "Ctx": ns.ctx, "Dtype": dtype,
            "Pass": mode, "Warmup": warmup, "Mean (s)": statistics.fmean(times),
            "Std (s)": statistics.stdev(times) if len(times) > 1 else 0.0, "Peak Mem (GiB)": peak}


def largest_allocations(snapshot: str, n: int = 10):
    """The largest allocations recorded in the allocator history, grouped by size and by the
    innermost Python frame outside torch that asked for them."""
    import pickle

    import polars as pl

    with open(snapshot, "rb") as f:
        snap = pickle.load(f)
    rows = []
    for trace in snap.get("device_traces", []):
        for ev in trace:
            if ev.get("action") != "alloc":
                continue
            frames = [fr for fr in (ev.get("frames") or []) if str(fr.get("filename", "")).endswith(".py")]
            user = next((fr for fr in frames if "/torch/" not in str(fr.get("filename", ""))), frames[0] if frames else None)
            where = (f"{user['filename'].rsplit('/', 2)[-1]}:{user.get('line', '')} {user.get('name', '')}" if user
                     else "(no Python frame: autograd engine or C++)")
            rows.append({"Size (MiB)": ev.get("size", 0) / 2**20, "Where": where})
    df = pl.DataFrame(rows, schema={"Size (MiB)": pl.Float64, "Where": pl.String})
    return (df.group_by(["Size (MiB)", "Where"]).agg(pl.len().alias("Count"))
            .sort(["Size (MiB)", "Count"], descending=True).head(n).with_columns(pl.col("Size (MiB)").round(2)))


def main(argv: list[str]) -> int:
    a = parser().parse_args(argv)
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in MODES] + [d for d in a.dtype.split(",") if d not in DTYPES]
    if bad:
        print(f"kview bench: unknown mode or dtype {', '.join(bad)}", file=sys.stderr)
        return 2
    ctxs = _ints(a.ctx) if a.ctx else [None]
    rows = []
    for ctx in ctxs:
        for dtype in a.dtype.split(","):
            for mode in modes:
                for w in _ints(a.warmup):
                    snap = a.memory_snapshot if (mode == modes[-1] and a.memory_snapshot) else None
                    rows.append(measure(a.model, a, ctx, dtype, mode, w, snap))
    import polars as pl

    from kview.output import render

    df = pl.DataFrame(rows).with_columns(pl.col("Mean (s)").round(6), pl.col("Std (s)").round(6),
                                         pl.col("Peak Mem (GiB)").cast(pl.Float64).round(3))
    sys.stdout.write(render.render(df, a.format))
    if a.memory_snapshot:
        try:
            top = largest_allocations(a.memory_snapshot)
            sys.stdout.write("\nLargest live allocations in the snapshot:\n" + render.render(top, a.format))
        except (OSError, ValueError, KeyError) as e:
            print(f"kview bench: could not summarize {a.memory_snapshot}: {e}", file=sys.stderr)
    return 0
