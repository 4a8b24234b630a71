"""Train a Hugging Face transformers Llama built from a config (random weights, nothing
downloaded) on random tokens. A plain script that knows nothing about kview:
    kview capture --annotate --skip 2 --steps 2 -o llama.sqlite -- python examples/train_hf_llama.py
The defaults are a small model; --hidden 2560 --layers 32 --heads 32 --intermediate 10240 is the
2.7B class of the CS336 tables. Under torchrun, --dist ddp (DistributedDataParallel) or --dist fsdp
(FSDP2 `fully_shard` per decoder layer, module names unchanged) trains one replica or shard per GPU:
    kview capture --annotate -o llama_ddp.sqlite -- torchrun --standalone --nproc-per-node 2 \
        examples/train_hf_llama.py --dist ddp --slow-rank 1
"""
import argparse
import json
import os
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=6)
p.add_argument("--batch", type=int, default=4)
p.add_argument("--seq", type=int, default=512)
p.add_argument("--hidden", type=int, default=1024)
p.add_argument("--layers", type=int, default=8)
p.add_argument("--heads", type=int, default=16)
p.add_argument("--intermediate", type=int, default=2816)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16 runs under autocast")
p.add_argument("--attn", default="sdpa", help="attn_implementation: sdpa or eager")
p.add_argument("--dist", default="none", choices=["none", "ddp", "fsdp"], help="under torchrun: DDP or FSDP2")
p.add_argument("--slow-rank", type=int, default=None, help="this rank sleeps --slow-ms before each step (a straggler)")
p.add_argument("--slow-ms", type=float, default=20.0)
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
rank = 0
if args.dist != "none":
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", 0))
    if device == "cuda":
        torch.cuda.set_device(local)
        device = f"cuda:{local}"
        dist.init_process_group("nccl", device_id=torch.device(device))
    else:
        dist.init_process_group("gloo")
    rank = dist.get_rank()
torch.manual_seed(0)  # the same initial weights on every rank
config = LlamaConfig(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                     num_key_value_heads=args.heads, intermediate_size=args.intermediate, vocab_size=args.vocab,
                     max_position_embeddings=max(args.seq, 2048), attn_implementation=args.attn)
with torch.device(device):
    model = LlamaForCausalLM(config)
model.train()
params = sum(p.numel() for p in model.parameters())
if args.dist == "ddp":
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(model, device_ids=[torch.device(device).index] if "cuda" in device else None)
elif args.dist == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
g = torch.Generator().manual_seed(rank)  # each rank its own batch
ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(device)
autocast = torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

times = []
for step in range(args.steps):
    t0 = time.perf_counter()
    if rank == args.slow_rank:
        time.sleep(args.slow_ms / 1e3)  # e.g. a slow data loader on one rank
    with autocast:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
print(json.dumps({"script": "train_hf_llama", "dist": args.dist, "rank": rank, "params": params, "batch": args.batch,
                  "seq": args.seq, "device": device, "step_times_s": [round(t, 6) for t in times],
                  "loss": loss.item()}))
if args.dist != "none":
    dist.destroy_process_group()
