"""`kview bench attention`: the attention benchmark of the LM notes, d_model x sequence length.

For every implementation, dtype, d_model and sequence length asked for: random Q, K, V of shape
(batch, seq, d_model) (one head, as the notes do), `--warmup` untimed passes, then `--iters`
forward passes timed one by one (the GPU synchronized after each), the memory in use before the
backward pass (what the forward pass keeps for it, plus Q, K, V and the output), and `--iters`
backward passes timed the same way (each after an untimed forward). A cell that runs out of
memory reads OOM and the sweep goes on with the next configuration; on the CPU memory is not
measured ("-").

Implementations: `naive` is the notes' attention written out (Q K^T / sqrt(d), the max-subtracted
softmax of the LM, then P V: the score matrix is materialized), `sdpa` is
torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels where the
GPU and dtype allow). `--compile` runs each through torch.compile.

Rows are plain dicts, so `-f json` needs only torch (the GPU machines that lack polars);
the other formats go through kview's renderers.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import sys
import timeit

from kview.io.memory_budget import parse_size

FORMATS = ("table", "csv", "tsv", "md", "json")
IMPLS = ("naive", "sdpa")
DTYPES = ("fp32", "bf16", "fp16")
OOM = "OOM"
COLUMNS = (
    "Impl",
    "Dtype",
    "Compiled",
    "Batch",
    "d_model",
    "Seq",
    "Forward (ms)",
    "Backward (ms)",
    "Mem before backward (MiB)",
    "Peak (MiB)",
    "Device",
)


def _ints(s: str, flag: str) -> list[int]:
    try:
        vals = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{flag}: expected a comma list of integers, got {s!r}") from None
    if not vals or min(vals) < 1:
        raise argparse.ArgumentTypeError(f"{flag}: expected positive integers, got {s!r}")
    return vals


def _names(s: str, known: tuple[str, ...]) -> list[str]:
    vals = [x.strip() for x in s.split(",") if x.strip()]
    bad = [v for v in vals if v not in known]
    if bad or not vals:
        raise argparse.ArgumentTypeError(f"unknown {', '.join(bad) or 'value'} (choose from {', '.join(known)})")
    return vals


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kview bench attention",
        description="Benchmark attention over d_model x sequence length, as the LM notes' table: forward and "
        "backward mean (ms) and the memory in use before the backward pass; OOM where a configuration "
        "does not fit, and the sweep goes on. Runs on the GPU when CUDA is available, else on the CPU "
        "(and says so).",
        epilog="example: kview bench attention --d-model 16,32,64,128 --seq 256,1024,4096,8192,16384 "
        "--dtype fp32,bf16 --impl naive,sdpa -f md",
    )
    p.add_argument(
        "--d-model",
        default="16,32,64,128",
        type=lambda s: _ints(s, "--d-model"),
        help="head dimension(s), a comma list (default: 16,32,64,128)",
    )
    p.add_argument(
        "--seq",
        default="256,1024,4096,8192,16384",
        type=lambda s: _ints(s, "--seq"),
        help="sequence length(s), a comma list (default: 256,1024,4096,8192,16384)",
    )
    p.add_argument("--batch", type=lambda s: _ints(s, "--batch")[0], default=8, help="batch size (default: 8)")
    p.add_argument(
        "--dtype",
        default="fp32",
        type=lambda s: _names(s, DTYPES),
        help=f"{', '.join(DTYPES)}, or a comma list (default: fp32)",
    )
    p.add_argument(
        "--impl",
        default="naive",
        type=lambda s: _names(s, IMPLS),
        help="naive (scores materialized, as the notes), sdpa (torch's scaled_dot_product_attention), "
        "or a comma list (default: naive)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run each implementation through torch.compile (compiling happens in the warm-up; default: off)",
    )
    p.add_argument("--causal", action="store_true", help="mask future positions (default: off, as the notes)")
    p.add_argument(
        "--iters",
        type=lambda s: _ints(s, "--iters")[0],
        default=100,
        help="timed forward and backward passes per cell (default: 100)",
    )
    p.add_argument("--warmup", type=int, default=5, help="untimed passes before timing (default: 5)")
    p.add_argument(
        "--memory-limit",
        default=None,
        metavar="SIZE",
        help="let the process use at most SIZE of GPU memory (e.g. 8G, as on the notes' 8 GB GPU), "
        "through torch.cuda.set_per_process_memory_fraction (default: the whole GPU)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed of Q, K, V (default: 0)")
    p.add_argument("-f", "--format", default="table", choices=FORMATS, help="output format (default: table)")
    return p


def naive_attention(q, k, v, causal: bool = False):
    """Q K^T / sqrt(d) -> the LM's max-subtracted softmax -> P V, every intermediate materialized."""
    import torch

    # deferred with torch (above): the parser and --help need none
    from kview.models.transformer_lm import softmax

    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        scores = torch.where(mask, scores, float("-inf"))
    return torch.matmul(softmax(scores, dim=-1), v)


def sdpa_attention(q, k, v, causal: bool = False):
    """torch's fused attention; a head dimension of 1 is added so the flash and memory-efficient
    kernels (which want 4-D inputs) are eligible."""
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1), is_causal=causal).squeeze(1)


IMPL_FUNCS = {"naive": naive_attention, "sdpa": sdpa_attention}


def is_oom(e: BaseException) -> bool:
    import torch

    if isinstance(e, getattr(torch, "OutOfMemoryError", ())) or isinstance(
        e, getattr(torch.cuda, "OutOfMemoryError", ())
    ):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text
    )


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def measure(impl: str, dtype: str, d: int, n: int, a, device: str) -> dict:
    """One cell of the table; OOM in what did not fit."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    row: dict = {
        "Impl": impl,
        "Dtype": dtype,
        "Compiled": bool(a.compile),
        "Batch": a.batch,
        "d_model": d,
        "Seq": n,
        "Forward (ms)": OOM,
        "Backward (ms)": OOM,
        "Mem before backward (MiB)": OOM,
        "Peak (MiB)": OOM,
    }
    fn = IMPL_FUNCS[impl]
    if a.compile:
        torch._dynamo.reset()  # a fresh compile per shape: no recompile limit falls back to eager
        fn = torch.compile(fn)
    causal = bool(a.causal)
    state: dict = {}
    stage = "forward"
    try:
        g = torch.Generator(device=device).manual_seed(a.seed)
        q, k, v = (
            torch.randn(a.batch, n, d, device=device, dtype=dt, generator=g, requires_grad=True) for _ in range(3)
        )
        state.update(q=q, k=k, v=v)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            for _ in range(a.warmup):
                fn(q, k, v, causal)
            sync()
            times = []
            for _ in range(a.iters):
                t0 = timeit.default_timer()
                fn(q, k, v, causal)
                sync()
                times.append(timeit.default_timer() - t0)
        row["Forward (ms)"] = statistics.fmean(times) * 1e3
        stage = "backward"
        dout = torch.randn(a.batch, n, d, device=device, dtype=dt, generator=g)
        state["dout"] = dout
        times = []
        for i in range(a.warmup + a.iters):
            for t in (q, k, v):
                t.grad = None
            out = fn(q, k, v, causal)
            sync()
            if i == 0:
                row["Mem before backward (MiB)"] = torch.cuda.memory_allocated() / 2**20 if device == "cuda" else None
            t0 = timeit.default_timer()
            out.backward(dout)
            sync()
            del out
            if i >= a.warmup:
                times.append(timeit.default_timer() - t0)
        row["Backward (ms)"] = statistics.fmean(times) * 1e3
        row["Peak (MiB)"] = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    except Exception as e:  # noqa: BLE001 - only out-of-memory is a result; the rest is re-raised
        if not is_oom(e):
            raise
        row["oom_in"] = stage
    state.clear()
    _free(device)
    if row.pop("oom_in", None) == "forward" or row["Forward (ms)"] == OOM:
        row["Mem before backward (MiB)"] = OOM
    if device != "cuda":
        row["Peak (MiB)"] = None
    return row


def device_of() -> tuple[str, str]:
    import torch

    if torch.cuda.is_available():
        return "cuda", torch.cuda.get_device_name()
    return "cpu", "cpu"


def limit_memory(size: str | None, device: str) -> str | None:
    """--memory-limit: the share of the GPU this process may use; a line saying what was set."""
    if size is None or device != "cuda":
        return None
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    want = parse_size(size)
    torch.cuda.set_per_process_memory_fraction(min(1.0, want / total))
    return f"GPU memory limited to {want / 2**30:.1f} GiB of {total / 2**30:.1f} GiB"


def run(a) -> list[dict]:
    device, name = device_of()
    rows = []
    for impl in a.impl:
        for dtype in a.dtype:
            for d in a.d_model:
                for n in a.seq:
                    row = measure(impl, dtype, d, n, a, device)
                    row["Device"] = name
                    rows.append(row)
                    print(
                        f"kview bench attention: {impl} {dtype} d_model={d} seq={n}: "
                        f"forward {_cell(row['Forward (ms)'], 4)} ms, backward {_cell(row['Backward (ms)'], 4)} ms, "
                        f"before backward {_cell(row['Mem before backward (MiB)'], 2)} MiB",
                        file=sys.stderr,
                        flush=True,
                    )
    return rows


def _cell(v, decimals: int) -> str:
    if v is None:
        return "-"
    if isinstance(v, str) or isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.{decimals}f}"
    return str(v)


DECIMALS = {"Forward (ms)": 4, "Backward (ms)": 4, "Mem before backward (MiB)": 2, "Peak (MiB)": 2}


def to_json(rows: list[dict]) -> str:
    """The rows as kview's JSON renderer writes a table (a list of row objects); numbers rounded
    as the other formats show them, OOM as the string "OOM", not measured as null."""
    out = [
        {c: (round(r[c], DECIMALS[c]) if c in DECIMALS and isinstance(r[c], float) else r[c]) for c in COLUMNS}
        for r in rows
    ]
    return json.dumps(out, ensure_ascii=False, indent=1) + "\n"


def render(rows: list[dict], fmt: str) -> str:
    if fmt == "json":
        return to_json(rows)
    import polars as pl

    # deferred with polars (above): a GPU machine may have torch only
    from kview.output import render as rnd

    cols = {}
    for c in COLUMNS:
        vals = [r[c] for r in rows]
        if c in DECIMALS:
            text = [_cell(v, DECIMALS[c]) for v in vals]
            if fmt in ("table", "md"):  # numbers right-aligned although the column holds OOM
                w = max(len(t) for t in text) if text else 0
                text = [t.rjust(w) for t in text]
            cols[c] = pl.Series(c, text, dtype=pl.String)
        else:
            cols[c] = pl.Series(c, vals)
    return rnd.render(pl.DataFrame(cols), fmt)


def main(argv: list[str]) -> int:
    try:
        a = parser().parse_args(argv)
    except argparse.ArgumentTypeError as e:
        print(f"kview bench attention: {e}", file=sys.stderr)
        return 2
    if a.warmup < 0:
        print("kview bench attention: --warmup: must be >= 0", file=sys.stderr)
        return 2
    try:
        import torch  # noqa: F401
    except ImportError as e:
        print(f"kview bench attention: needs torch (pip install 'kview[capture]'): {e}", file=sys.stderr)
        return 2
    device, _ = device_of()
    if device == "cpu":
        print("kview bench attention: no CUDA device: timing on the CPU (memory is not measured)", file=sys.stderr)
    try:
        note = limit_memory(a.memory_limit, device)
    except ValueError as e:
        print(f"kview bench attention: --memory-limit: {e}", file=sys.stderr)
        return 2
    if note:
        print(f"kview bench attention: {note}", file=sys.stderr)
    rows = run(a)
    sys.stdout.write(render(rows, a.format))
    return 0
