"""Transformer LM of the benchmarking seed (CS336 assignment 2 staff model), in plain PyTorch.

Pre-norm blocks with RMSNorm, RoPE on Q and K, causal softmax attention written out by hand,
SwiGLU feed-forward, untied LM head. Bias-free linears with truncated-normal init. Every part
runs inside an NVTX range named as in the seed reports, so `kview` tables line up with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from kview.models.annotate import annotate

VOCAB_SIZE = 10_000
BATCH_SIZE = 4
ROPE_THETA = 10_000.0


@dataclass(frozen=True)
class LMConfig:
    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int
    vocab_size: int = VOCAB_SIZE
    context_length: int = 512

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads


# Table 1 of the seed; "tiny" is for CPU tests.
SIZES: dict[str, LMConfig] = {
    "tiny": LMConfig(d_model=64, d_ff=256, num_layers=2, num_heads=4),
    "small": LMConfig(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": LMConfig(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large": LMConfig(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl": LMConfig(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B": LMConfig(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


def parameter_count(cfg: LMConfig) -> int:
    """Closed form: 2*V*d (embeddings + head) + L*(4d^2 + 3*d*d_ff + 2d) + d (final norm)."""
    d, f, v, n = cfg.d_model, cfg.d_ff, cfg.vocab_size, cfg.num_layers
    return 2 * v * d + n * (4 * d * d + 3 * d * f + 2 * d) + d


class Linear(nn.Module):
    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        std = math.sqrt(2.0 / (d_in + d_out))
        w = torch.empty(d_out, d_in)
        nn.init.trunc_normal_(w, std=std, a=-3 * std, b=3 * std)
        self.weight = nn.Parameter(w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight)


class Embedding(nn.Module):
    def __init__(self, num: int, dim: int):
        super().__init__()
        w = torch.empty(num, dim)
        nn.init.trunc_normal_(w, std=1.0, a=-3.0, b=3.0)
        self.weight = nn.Parameter(w)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.to(torch.float32)
        out = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * self.weight).to(dtype)


class RotaryEmbedding(nn.Module):
    """Rotation of adjacent (interleaved) pairs, one module shared by all layers."""

    def __init__(self, d_head: int, context_length: int, theta: float = ROPE_THETA):
        super().__init__()
        k = torch.arange(0, d_head, 2, dtype=torch.float32)
        inv_freq = theta ** (-k / d_head)
        angles = torch.outer(torch.arange(context_length, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos[positions], self.sin[positions]
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((cos * x1 - sin * x2, sin * x1 + cos * x2), dim=-1)
        return out.flatten(-2)


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(q, k, v, mask):
    with annotate("scaled_dot_product_attention"):
        with annotate("computing attention scores"):
            scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
            scores = torch.where(mask, scores, float("-inf"))
        with annotate("computing softmax"):
            probs = softmax(scores, dim=-1)
        with annotate("final matmul"):
            return torch.matmul(probs, v)


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, cfg: LMConfig, rope: RotaryEmbedding):
        super().__init__()
        d = cfg.d_model
        self.num_heads = cfg.num_heads
        self.q_proj, self.k_proj, self.v_proj = Linear(d, d), Linear(d, d), Linear(d, d)
        self.output_proj = Linear(d, d)
        self.rope = rope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        h = self.num_heads
        with annotate("attention projections"):
            q = self.q_proj(x).view(b, s, h, d // h).transpose(1, 2)
            k = self.k_proj(x).view(b, s, h, d // h).transpose(1, 2)
            v = self.v_proj(x).view(b, s, h, d // h).transpose(1, 2)
        with annotate("rope encoding"):
            pos = torch.arange(s, device=x.device)
            q, k = self.rope(q, pos), self.rope(k, pos)
        with annotate("causal mask construction"):
            idx = torch.arange(s, device=x.device)
            mask = idx[:, None] >= idx[None, :]
        out = scaled_dot_product_attention(q, k, v, mask)
        out = out.transpose(1, 2).contiguous().view(b, s, d)
        with annotate("output projection"):
            return self.output_proj(out)


class SwiGLU(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.w1, self.w2, self.w3 = Linear(d, d_ff), Linear(d_ff, d), Linear(d, d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.w1(x)
        return self.w2(a * torch.sigmoid(a) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LMConfig, rope: RotaryEmbedding):
        super().__init__()
        self.ln1, self.ln2 = RMSNorm(cfg.d_model), RMSNorm(cfg.d_model)
        self.attn = MultiHeadSelfAttention(cfg, rope)
        self.ffn = SwiGLU(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with annotate("attention_sublayer"):
            x = x + self.attn(self.ln1(x))
        with annotate("ffn_sublayer"):
            return x + self.ffn(self.ln2(x))


class TransformerLM(nn.Module):
    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embeddings = Embedding(cfg.vocab_size, cfg.d_model)
        rope = RotaryEmbedding(cfg.d_head, cfg.context_length)
        self.layers = nn.ModuleList(TransformerBlock(cfg, rope) for _ in range(cfg.num_layers))
        self.ln_final = RMSNorm(cfg.d_model)
        self.lm_head = Linear(cfg.d_model, cfg.vocab_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        with annotate("token_embeddings"):
            x = self.token_embeddings(ids)
        for i, layer in enumerate(self.layers):
            with annotate(f"layer_{i}"):
                x = layer(x)
        with annotate("final_norm"):
            x = self.ln_final(x)
        with annotate("lm_head"):
            return self.lm_head(x)


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Max-subtracted log-softmax, mean over all positions (as the seed's nn_utils)."""
    logits = logits.reshape(-1, logits.shape[-1])
    targets = targets.reshape(-1)
    shifted = logits - logits.amax(dim=-1, keepdim=True)
    logz = torch.log(torch.exp(shifted).sum(dim=-1))
    picked = shifted.gather(-1, targets[:, None]).squeeze(-1)
    return (logz - picked).mean()


def build(size: str = "small", context_length: int = 512, num_layers: int | None = None) -> TransformerLM:
    cfg = SIZES[size]
    changes = {"context_length": context_length}
    if num_layers is not None:
        changes["num_layers"] = num_layers
    cfg = LMConfig(**{**cfg.__dict__, **changes})
    return TransformerLM(cfg)


def random_batch(cfg: LMConfig, batch: int = BATCH_SIZE, device="cpu"):
    ids = torch.randint(0, cfg.vocab_size, (batch, cfg.context_length), device=device)
    targets = torch.randint(0, cfg.vocab_size, (batch, cfg.context_length), device=device)
    return ids, targets
