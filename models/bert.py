"""BERT-large encoder with MLM and NSP heads (DeepLearningExamples reference), plain PyTorch.

Post-LN encoder layers (hidden 1024, 16 heads, intermediate 4096, tanh-GELU, dropout 0.1),
number of layers a parameter (2, as in the kernel catalogue seed). NVTX ranges nest like the
seed's layer names: Enc_0 > Attn > SelfAttn > Q_Proj, and so on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from kview.models.annotate import annotate


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 30528  # 30522 padded to a multiple of 8, as run_pretraining.py does
    hidden: int = 1024
    layers: int = 2
    heads: int = 16
    intermediate: int = 4096
    max_position: int = 512
    type_vocab: int = 2
    dropout: float = 0.1
    seq_len: int = 128
    batch: int = 4


def _init(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)


class SelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads, self.d = c.heads, c.hidden // c.heads
        self.q, self.k, self.v = (nn.Linear(c.hidden, c.hidden) for _ in range(3))
        self.drop = nn.Dropout(c.dropout)

    def _split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.heads, self.d).transpose(1, 2)

    def forward(self, x, mask):
        with annotate("SelfAttn"):
            with annotate("Q_Proj"):
                q = self.q(x)
            with annotate("K_Proj"):
                k = self.k(x)
            with annotate("V_Proj"):
                v = self.v(x)
            q, k, v = self._split(q), self._split(k), self._split(v)
            with annotate("Q.K"):
                scores = torch.matmul(q, k.transpose(-1, -2))
            with annotate("Scale"):
                scores = scores / math.sqrt(self.d)
            with annotate("Mask"):
                scores = scores + mask
            with annotate("SoftMax"):
                probs = F.softmax(scores, dim=-1)
            with annotate("Dropout"):
                probs = self.drop(probs)
            with annotate("QKV"):
                ctx = torch.matmul(probs, v)
        with annotate("SelfAttention"):
            b, h, s, d = ctx.shape
            return ctx.transpose(1, 2).contiguous().view(b, s, h * d)


class EncoderLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attn = SelfAttention(c)
        self.attn_out = nn.Linear(c.hidden, c.hidden)
        self.attn_ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.ffn_in = nn.Linear(c.hidden, c.intermediate)
        self.ffn_out = nn.Linear(c.intermediate, c.hidden)
        self.ffn_ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)

    def forward(self, x, mask):
        with annotate("Attn"):
            a = self.attn(x, mask)
            with annotate("Output"):
                a = self.drop(self.attn_out(a)) + x
                with annotate("LayerNorm"):
                    x = self.attn_ln(a)
        with annotate("FFN"):
            h = F.gelu(self.ffn_in(x), approximate="tanh")
            h = self.drop(self.ffn_out(h)) + x
            with annotate("LayerNorm"):
                return self.ffn_ln(h)


class BertForPreTraining(nn.Module):
    def __init__(self, c: BertConfig = BertConfig()):
        super().__init__()
        self.c = c
        self.word = nn.Embedding(c.vocab_size, c.hidden)
        self.position = nn.Embedding(c.max_position, c.hidden)
        self.segment = nn.Embedding(c.type_vocab, c.hidden)
        self.emb_ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.drop = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.layers))
        self.pooler = nn.Linear(c.hidden, c.hidden)
        self.mlm_dense = nn.Linear(c.hidden, c.hidden)
        self.mlm_ln = nn.LayerNorm(c.hidden, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab_size))
        self.nsp = nn.Linear(c.hidden, 2)
        _init(self)

    def forward(self, ids, segments, attention_mask):
        mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        with annotate("Embedding"):
            pos = torch.arange(ids.shape[1], device=ids.device)[None, :]
            with annotate("Token"):
                w = self.word(ids)
            with annotate("Position"):
                p = self.position(pos)
            with annotate("Segment"):
                s = self.segment(segments)
            with annotate("Total"):
                x = w + p + s
            with annotate("LayerNorm"):
                x = self.emb_ln(x)
            x = self.drop(x)
        for i, layer in enumerate(self.layers):
            with annotate(f"Enc_{i}"):
                x = layer(x, mask)
        with annotate("NSP"):
            pooled = torch.tanh(self.pooler(x[:, 0]))
            nsp = self.nsp(pooled)
        with annotate("Masked_LM"):
            h = F.gelu(self.mlm_dense(x), approximate="tanh")
            with annotate("LayerNorm"):
                h = self.mlm_ln(h)
            mlm = F.linear(h, self.word.weight) + self.mlm_bias  # decoder tied to the word embeddings
        return mlm, nsp


def build(layers: int = 2, seq_len: int = 128, batch: int = 4, device="cpu"):
    c = BertConfig(layers=layers, seq_len=seq_len, batch=batch)
    model = BertForPreTraining(c).to(device)
    ids = torch.randint(0, c.vocab_size, (batch, seq_len), device=device)
    segments = torch.randint(0, 2, (batch, seq_len), device=device)
    attention = torch.ones(batch, seq_len, dtype=torch.long, device=device)
    mlm_labels = torch.randint(0, c.vocab_size, (batch, seq_len), device=device)
    nsp_labels = torch.randint(0, 2, (batch,), device=device)

    def loss_fn():
        mlm, nsp = model(ids, segments, attention)
        with annotate("Masked_LM_Loss"):
            l1 = F.cross_entropy(mlm.view(-1, c.vocab_size), mlm_labels.view(-1))
        with annotate("Next_Sent_Loss"):
            l2 = F.cross_entropy(nsp, nsp_labels)
        with annotate("Total_Loss"):
            return l1 + l2

    return model, loss_fn


def parameter_count(c: BertConfig = BertConfig()) -> int:
    h, i, L = c.hidden, c.intermediate, c.layers
    emb = (c.vocab_size + c.max_position + c.type_vocab) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
    heads = (h * h + h) + (h * h + h) + 2 * h + c.vocab_size + (h * 2 + 2)  # pooler, mlm dense+ln, bias, nsp
    return emb + L * layer + heads
