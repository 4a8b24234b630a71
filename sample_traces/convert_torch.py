"""Convert the torch.profiler sample traces (*_torch.json.gz) into kview's nsys-schema SQLite,
exactly as `kview capture --backend torch` does after its profiling run.

    python sample_traces/convert_torch.py
"""

from __future__ import annotations

import re
from pathlib import Path

from kview.capture.nsys_schema_writer import convert_kineto

HERE = Path(__file__).resolve().parent
GPU = {"torch": "2.11.0+cu130", "cuda": "13.0", "device": "NVIDIA H200", "dtype": "fp32"}


def info_of(stem: str) -> tuple[dict, str]:
    if m := re.match(r"lm-(\w+)_ctx(\d+)_(\w+)_torch", stem):
        size, ctx, mode = m.groups()
        return (
            {"model": "lm", "size": size, "ctx": ctx, "mode": mode, **GPU},
            f"kview capture lm --size {size} --ctx {ctx} --mode {mode} --warmup 2 --steps 1 --backend torch --shapes",
        )
    model = stem.split("_")[0].split("-")[0]
    args = {"bert": "--layers 2 --ctx 128 --batch 4", "dlrm": "--batch 32768", "ncf": "--batch 1048576"}[model]
    return (
        {"model": model, "mode": "train", **GPU},
        f"kview capture {model} {args} --mode train --warmup 2 --steps 1 --backend torch --shapes",
    )


def main() -> None:
    for js in sorted(HERE.glob("*_torch.json.gz")):
        stem = js.name[: -len(".json.gz")]
        info, cmd = info_of(stem)
        out = convert_kineto(js, HERE / f"{stem}.sqlite", info, cmd)
        print(f"{js.name} -> {out.name}")


if __name__ == "__main__":
    main()
