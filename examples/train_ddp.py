"""Data-parallel training of a small transformer with torch.distributed (NCCL on GPUs, gloo on
CPUs), one process per rank. A plain script that knows nothing about kview:
    kview capture -o ddp.sqlite -- torchrun --standalone --nproc-per-node 2 examples/train_ddp.py
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--seq", type=int, default=128)
p.add_argument("--dim", type=int, default=256)
p.add_argument("--layers", type=int, default=2)
p.add_argument("--slow-rank", type=int, default=None, help="this rank sleeps --slow-ms before each step (a straggler)")
p.add_argument("--slow-ms", type=float, default=20.0)
args = p.parse_args()

local = int(os.environ.get("LOCAL_RANK", 0))
if torch.cuda.is_available():
    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group("nccl", device_id=device)
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(1000, args.dim)
        layer = nn.TransformerEncoderLayer(args.dim, nhead=4, dim_feedforward=4 * args.dim, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=args.layers, enable_nested_tensor=False)
        self.head = nn.Linear(args.dim, 1000)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)))


model = DDP(Model().to(device), device_ids=[local] if device.type == "cuda" else None)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(rank)
ids = torch.randint(0, 1000, (args.batch, args.seq), generator=g).to(device)
times = []
for step in range(args.steps):
    t0 = time.perf_counter()
    if rank == args.slow_rank:
        time.sleep(args.slow_ms / 1e3)  # e.g. a slow data loader on one rank
    logits = model(ids)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(json.dumps({"script": "train_ddp", "rank": rank, "world": dist.get_world_size(), "device": str(device),
                  "step_times_s": [round(t, 6) for t in times]}))
dist.destroy_process_group()
