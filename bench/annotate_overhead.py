"""Step time of a training step with and without kview's module ranges (`--annotate`).

    python bench/annotate_overhead.py --model lm-small|resnet50 --mode plain|hooks [--warmup 5 --steps 20]

`plain` times the step as is; `hooks` first adds kview.capture.annotate(model) (an NVTX push/pop
per module call, no profiler attached: the cost of leaving the annotation on). Run the `plain`
mode under `kview capture [--annotate] --skip W --steps N -- python bench/annotate_overhead.py ...`
for the cost under Nsight Systems (the profiled window is exactly the timed steps). Prints one
JSON line. LM small: the seed's Transformer LM (12 layers, d 768), batch 4, context 512, AdamW;
ResNet-50: torchvision, batch 64, 224x224, SGD with momentum; both fp32.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--model", choices=["lm-small", "resnet50"], required=True)
p.add_argument("--mode", choices=["plain", "hooks"], default="plain")
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--steps", type=int, default=20)
a = p.parse_args()

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
if a.model == "lm-small":
    from kview.models import transformer_lm as lm

    model = lm.build("small", 512).to(dev)
    ids, targets = lm.random_batch(model.cfg, lm.BATCH_SIZE, dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    def loss_fn():
        return lm.cross_entropy(model(ids), targets)
else:
    import torchvision

    model = torchvision.models.resnet50(weights=None).to(dev)
    x = torch.randn(64, 3, 224, 224, device=dev)
    y = torch.randint(0, 1000, (64,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    crit = torch.nn.CrossEntropyLoss()

    def loss_fn():
        return crit(model(x), y)


modules = sum(1 for _ in model.modules())
if a.mode == "hooks":
    from kview.capture import annotate

    annotate(model)

times = []
for i in range(a.warmup + a.steps):
    t0 = time.perf_counter()
    loss = loss_fn()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if dev == "cuda":
        torch.cuda.synchronize()
    if i >= a.warmup:
        times.append(time.perf_counter() - t0)
ms = [t * 1e3 for t in times]
print(
    "OVERHEAD "
    + json.dumps(
        {
            "model": a.model,
            "mode": a.mode,
            "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
            "modules": modules,
            "steps": a.steps,
            "mean_ms": round(statistics.fmean(ms), 3),
            "std_ms": round(statistics.stdev(ms), 3) if len(ms) > 1 else 0.0,
            "median_ms": round(statistics.median(ms), 3),
        }
    )
)
