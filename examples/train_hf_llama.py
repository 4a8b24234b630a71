"""Train a Hugging Face transformers Llama built from a config (random weights, nothing
downloaded) on random tokens. A plain script that knows nothing about kview:
    kview capture --annotate --skip 2 --steps 2 -o llama.sqlite -- python examples/train_hf_llama.py
The defaults are a small model; --hidden 2560 --layers 32 --heads 32 --intermediate 10240 is the
2.7B class of the CS336 tables.
"""
import argparse
import json
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
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
config = LlamaConfig(hidden_size=args.hidden, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                     num_key_value_heads=args.heads, intermediate_size=args.intermediate, vocab_size=args.vocab,
                     max_position_embeddings=max(args.seq, 2048), attn_implementation=args.attn)
with torch.device(device):
    model = LlamaForCausalLM(config)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

times = []
for step in range(args.steps):
    t0 = time.perf_counter()
    with autocast:
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()
    times.append(time.perf_counter() - t0)
params = sum(p.numel() for p in model.parameters())
print(json.dumps({"script": "train_hf_llama", "params": params, "batch": args.batch, "seq": args.seq,
                  "device": device, "step_times_s": [round(t, 6) for t in times], "loss": loss.item()}))
