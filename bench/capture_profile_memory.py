"""torch.profiler with profile_memory=True over a few training steps of the HF Llama example's model
(random weights from a config, nothing downloaded): the `[memory]` events kview's memory view reads
from a trace itself. Writes one Chrome-trace JSON (gzip when the name ends in .gz).
    python bench/capture_profile_memory.py --out mem_torch.json.gz
"""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--steps", type=int, default=2, help="profiled steps (one warm-up step runs first)")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--hidden", type=int, default=512)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--seq", type=int, default=256)
args = p.parse_args()

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
config = LlamaConfig(
    hidden_size=args.hidden,
    num_hidden_layers=args.layers,
    num_attention_heads=8,
    num_key_value_heads=8,
    intermediate_size=4 * args.hidden,
    vocab_size=8000,
    max_position_embeddings=max(args.seq, 512),
    attn_implementation="sdpa",
)
with torch.device(device):
    model = LlamaForCausalLM(config)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)
acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
with profile(
    activities=acts,
    profile_memory=True,
    record_shapes=True,
    schedule=schedule(wait=0, warmup=1, active=args.steps),
    on_trace_ready=lambda prof: prof.export_chrome_trace(args.out),
) as prof:
    for _ in range(1 + args.steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
print(f"wrote {args.out}")
