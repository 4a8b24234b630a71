"""DLRM as in the DLRM kernel-catalogue seed (DeepLearningExamples reference), plain PyTorch.

Bottom MLP 13-512-256-128 (ReLU after every layer), 26 embedding tables of 100000 + 100*i rows
(dim 128), dot interaction by bmm keeping the strict lower triangle (351 values), padded to
480, top MLP 1024-1024-512-256-1, BCE-with-logits loss.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from kview.models.annotate import annotate

NUM_DENSE = 13
EMB_DIM = 128
BOTTOM = [512, 256, 128]
TOP = [1024, 1024, 512, 256, 1]


def table_sizes(n: int = 26) -> list[int]:
    return [100_000 + 100 * i for i in range(n)]


def _mlp(sizes: list[int], last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        lin = nn.Linear(a, b)
        nn.init.normal_(lin.weight, 0.0, math.sqrt(2.0 / (a + b)))
        nn.init.normal_(lin.bias, 0.0, math.sqrt(1.0 / b))
        layers.append(lin)
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, tables: list[int] | None = None):
        super().__init__()
        tables = tables or table_sizes()
        self.bottom = _mlp([NUM_DENSE, *BOTTOM], last_relu=True)
        self.embeddings = nn.ModuleList(nn.Embedding(n, EMB_DIM) for n in tables)
        for e, n in zip(self.embeddings, tables):
            nn.init.uniform_(e.weight, -math.sqrt(1.0 / n), math.sqrt(1.0 / n))
        f = len(tables) + 1
        li, lj = torch.tril_indices(f, f, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        n_inter = EMB_DIM + f * (f - 1) // 2
        self.pad = (-(n_inter) % 8) or 0
        self.top = _mlp([n_inter + self.pad, *TOP], last_relu=False)
        with torch.no_grad():
            if self.pad:
                self.top[0].weight[:, -self.pad :] = 0

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        with annotate("Bottom_MLP"):
            x = self.bottom(dense)
        embs = []
        for i, e in enumerate(self.embeddings):
            with annotate(f"Embedding_{i}"):
                embs.append(e(sparse[:, i]))
        with annotate("Interaction"):
            t = torch.cat([x] + embs, dim=1).view(x.shape[0], -1, EMB_DIM)
            z = torch.bmm(t, t.transpose(1, 2))
            flat = z[:, self.li, self.lj]
        with annotate("Concat"):
            parts = [x, flat]
            if self.pad:
                parts.append(torch.zeros(x.shape[0], self.pad, device=x.device, dtype=x.dtype))
            r = torch.cat(parts, dim=1)
        with annotate("Top_MLP"):
            return self.top(r)


def build(batch: int = 32768, device="cpu", tables: list[int] | None = None):
    model = DLRM(tables).to(device)
    n = len(model.embeddings)
    sizes = [e.num_embeddings for e in model.embeddings]
    dense = torch.randn(batch, NUM_DENSE, device=device)
    sparse = torch.stack([torch.randint(0, s, (batch,), device=device) for s in sizes], dim=1)
    labels = torch.randint(0, 2, (batch, 1), device=device).float()
    assert sparse.shape == (batch, n)

    def loss_fn():
        out = model(dense, sparse)
        with annotate("Loss"):
            return F.binary_cross_entropy_with_logits(out, labels)

    return model, loss_fn


def parameter_count(tables: list[int] | None = None) -> dict[str, int]:
    """Closed-form parameter counts: bottom MLP, top MLP (input padded to a multiple of 8), tables."""
    tables = tables or table_sizes()
    f = len(tables) + 1
    n_in = EMB_DIM + f * (f - 1) // 2
    n_in += -n_in % 8

    def mlp(sizes):
        return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))

    return {"bottom": mlp([NUM_DENSE, *BOTTOM]), "top": mlp([n_in, *TOP]), "embeddings": sum(tables) * EMB_DIM}
