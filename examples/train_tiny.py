"""A tiny language model trained for a few steps on the CPU in a second (kview's CI profiles it).
A plain script that knows nothing about kview; --fail-at N raises in step N."""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--fail-at", type=int, default=None)
p.add_argument("--device", default="cpu")
args = p.parse_args()
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.attn = nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.mlp(torch.relu(self.attn(x)))


class TinyLM(nn.Module):
    def __init__(self, vocab=64, d=16, n=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(n))
        self.head = nn.Linear(d, vocab)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


model = TinyLM().to(args.device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loss_fn = nn.CrossEntropyLoss()
for step in range(1, args.steps + 1):
    if step == args.fail_at:
        raise RuntimeError(f"failing on purpose in step {step}")
    ids = torch.randint(0, 64, (4, 8), device=args.device)
    loss = loss_fn(model(ids).flatten(0, 1), ids.flatten())
    loss.backward()
    opt.step()
    opt.zero_grad()
print(f"trained {args.steps} steps, loss {loss.item():.3f}")
