"""Run one workload for warm-up and profiled steps, with the phase ranges of the seeds.

Run as ``python -m kview.capture.workload``. Under ``nsys profile --capture-range=cudaProfilerApi``
only the profiled steps are recorded (torch.cuda.profiler.start/stop bracket them); with
``--kineto-json PATH`` the profiled steps run under torch.profiler and the Chrome trace is saved.
Imports only torch and kview.models, so it runs on a GPU box without kview's core dependencies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

import torch

from kview.capture import memory_history
from kview.capture.options import MODES
from kview.models import bert, dlrm, ncf, transformer_lm
from kview.models.annotate import annotate

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def build_lm(args, device):
    model = transformer_lm.build(args.size, args.ctx, args.layers).to(device)
    ids, targets = transformer_lm.random_batch(model.cfg, args.batch or transformer_lm.BATCH_SIZE, device)

    def loss_fn():
        logits = model(ids)
        with annotate("loss_computation"):
            return transformer_lm.cross_entropy(logits, targets)

    return model, loss_fn


def build_bert(args, device):
    return bert.build(layers=args.layers or 2, seq_len=args.ctx or 128, batch=args.batch or 4, device=device)


def build_dlrm(args, device):
    return dlrm.build(batch=args.batch or 32768, device=device)


def build_ncf(args, device):
    return ncf.build(batch=args.batch or 1_048_576, device=device)


BUILDERS = {"lm": build_lm, "bert": build_bert, "dlrm": build_dlrm, "ncf": build_ncf}


def step(model, loss_fn, optimizer, mode: str, autocast) -> None:
    with annotate("forward_pass"):
        with autocast():
            if mode == "forward":
                with torch.no_grad():
                    loss_fn()
                return
            loss = loss_fn()
    with annotate("backward_pass"):
        loss.backward()
    if mode == "train":
        with annotate("optimizer_step"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kview.capture.workload")
    p.add_argument("--model", default="lm", choices=sorted(BUILDERS))
    p.add_argument("--size", default="small")
    p.add_argument("--ctx", type=int, default=None, help="context / sequence length (LM 512, BERT 128)")
    p.add_argument("--batch", type=int, default=None, help="batch (LM 4, BERT 4, DLRM 32768, NCF 1048576)")
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--mode", default="train", choices=MODES)
    p.add_argument("--dtype", default="fp32", choices=sorted(DTYPES))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--kineto-json", default=None, help="profile with torch.profiler and save its trace here")
    p.add_argument("--shapes", action="store_true")
    p.add_argument(
        "--memory-snapshot",
        default=None,
        help="record the allocator history of the profiled steps into this pickle (CUDA only)",
    )
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.model == "lm" and args.ctx is None:
        args.ctx = 512
    model, loss_fn = BUILDERS[args.model](args, device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
    dt = DTYPES[args.dtype]
    autocast = (lambda: torch.autocast(device_type=device, dtype=dt)) if dt else contextlib.nullcontext

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    with annotate("warmup"):
        for _ in range(args.warmup):
            step(model, loss_fn, optimizer, args.mode, autocast)
    sync()

    memory = args.memory_snapshot if device == "cuda" else None
    facts: dict = {}

    def profiled_steps():
        clock = memory_history.start(annotate) if memory else None
        for _ in range(args.steps):
            with annotate("profiled_step"):
                step(model, loss_fn, optimizer, args.mode, autocast)
            sync()
        if memory:
            facts.update(memory_history.finish(memory, clock))

    if args.kineto_json:
        from torch.profiler import ProfilerActivity, profile

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=acts, record_shapes=args.shapes) as prof:
            profiled_steps()
        prof.export_chrome_trace(args.kineto_json)
    else:
        if device == "cuda":
            torch.cuda.profiler.start()
        profiled_steps()
        if device == "cuda":
            torch.cuda.profiler.stop()
    info = {
        "model": args.model,
        "size": args.size,
        "ctx": args.ctx,
        "mode": args.mode,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
    }
    if facts:
        info.update({k: facts[k] for k in ("max_memory_allocated", "max_memory_reserved", "requested_bytes_peak")})
    print("KVIEW_CAPTURE " + json.dumps(info), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
