"""NCF / NeuMF as in the NCF kernel-catalogue seed (DeepLearningExamples reference).

MF branch: user and item embeddings of 64, elementwise product. MLP branch: embeddings of
128 each, concatenated, Linear 256-256-128-64 with ReLU and dropout. Final Linear(128 -> 1)
over cat(mf, mlp); BCE-with-logits loss. 138493 users and 26744 items (ML-20m).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from kview.models.annotate import annotate

USERS, ITEMS = 138_493, 26_744
MF_DIM = 64
MLP_LAYERS = [256, 256, 128, 64]


class NeuMF(nn.Module):
    def __init__(self, users: int = USERS, items: int = ITEMS, dropout: float = 0.5):
        super().__init__()
        half = MLP_LAYERS[0] // 2
        self.mf_user, self.mf_item = nn.Embedding(users, MF_DIM), nn.Embedding(items, MF_DIM)
        self.mlp_user, self.mlp_item = nn.Embedding(users, half), nn.Embedding(items, half)
        for e in (self.mf_user, self.mf_item, self.mlp_user, self.mlp_item):
            nn.init.normal_(e.weight, 0.0, 0.01)
        self.mlp = nn.ModuleList(nn.Linear(a, b) for a, b in zip(MLP_LAYERS[:-1], MLP_LAYERS[1:]))
        for lin in self.mlp:
            nn.init.xavier_uniform_(lin.weight)
        self.final = nn.Linear(MF_DIM + MLP_LAYERS[-1], 1)
        nn.init.kaiming_uniform_(self.final.weight, a=1, nonlinearity="sigmoid")
        self.dropout = dropout

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        with annotate("MF_User_Embedding"):
            mu = self.mf_user(user)
        with annotate("MF_Item_Embedding"):
            mi = self.mf_item(item)
        with annotate("GMF"):
            mf = mu * mi
        with annotate("MLP_User_Embedding"):
            xu = self.mlp_user(user)
        with annotate("MLP_Item_Embedding"):
            xi = self.mlp_item(item)
        with annotate("MLP_Concat"):
            x = torch.cat([xu, xi], dim=1)
        for i, lin in enumerate(self.mlp):
            with annotate(f"MLP_{i}"):
                x = F.relu(lin(x))
                with annotate("Dropout"):
                    x = F.dropout(x, self.dropout, self.training)
        with annotate("NeuMF_Concat"):
            x = torch.cat([mf, x], dim=1)
        with annotate("NeuMF_MLP"):
            return self.final(x)


def build(batch: int = 1_048_576, device="cpu", users: int = USERS, items: int = ITEMS):
    model = NeuMF(users, items).to(device)
    user = torch.randint(0, users, (batch,), device=device)
    item = torch.randint(0, items, (batch,), device=device)
    labels = torch.randint(0, 2, (batch, 1), device=device).float()

    def loss_fn():
        out = model(user, item)
        with annotate("Loss"):
            return F.binary_cross_entropy_with_logits(out, labels)

    return model, loss_fn


def parameter_count(users: int = USERS, items: int = ITEMS) -> dict[str, int]:
    """Closed-form parameter counts of NeuMF: embeddings, MLP tower, final layer."""
    mlp = sum(a * b + b for a, b in zip(MLP_LAYERS[:-1], MLP_LAYERS[1:]))
    return {
        "embeddings": (users + items) * (MF_DIM + MLP_LAYERS[0] // 2),
        "mlp": mlp,
        "final": MF_DIM + MLP_LAYERS[-1] + 1,
    }
