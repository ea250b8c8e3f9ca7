"""The GPT of part 8: a decoder-only transformer, small enough to train on a laptop's cores.

In the spirit of nanoGPT: pre-LayerNorm blocks, causal self-attention through
``F.scaled_dot_product_attention``, a 4h GELU MLP, learned positions and (by default)
an output head tied to the token embedding. Chapters 8.1-8.5 count it, shard it and
compose its parallelisms, so its layout is chosen for sharding, not for speed:

- ``wq``, ``wk`` and ``wv`` are three Linears, not one fused ``qkv``: tensor parallelism
  splits each column-wise by heads, and a fused weight would split across q, k and v.
- every submodule a parallelism plan names (``blocks.0.attn.wq``, ``blocks.0.mlp.fc``, ...)
  has the same name in torchtitan's plans' sense: colwise in, rowwise out.

Parameters, with tied embeddings: 12·l·h² + 13·l·h per layer stack, V·h + s·h for the
embeddings and 2h for the final LayerNorm (``theory.transformer`` has the closed form).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 256        # bytes: the text is read byte by byte (helpers.text)
    seq: int = 128          # the context: the longest sequence, and the learned positions
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    dropout: float = 0.0
    tied: bool = True       # the output head shares the token embedding's weight

    def __post_init__(self):
        for name in ("vocab", "seq", "layers", "hidden", "heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"GPTConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must divide into heads ({self.heads}) evenly")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        h = cfg.hidden
        self.wq, self.wk, self.wv = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.proj = nn.Linear(h, h)
        self.head_dim, self.dropout = cfg.head_dim, cfg.dropout
        self.resid_drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads, not cfg.heads: under tensor parallelism a rank holds only its share of them.
        q, k, v = (w(x).view(b, s, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, s, -1)))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.hidden, 4 * cfg.hidden)
        self.proj = nn.Linear(4 * cfg.hidden, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(cfg.hidden), CausalSelfAttention(cfg)
        self.ln2, self.mlp = nn.LayerNorm(cfg.hidden), MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig = GPTConfig()):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab, cfg.hidden)
        self.pos_emb = nn.Embedding(cfg.seq, cfg.hidden)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        self.apply(self._init)
        # GPT-2's scaled init: each residual branch's last Linear shrinks with depth, so the
        # residual stream's variance stays put however many blocks add to it.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * cfg.layers))
        if cfg.tied:
            self.head.weight = self.tok_emb.weight

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Logits (batch, seq, vocab); with ``targets``, (logits, mean cross-entropy)."""
        s = idx.shape[1]
        if s > self.cfg.seq:
            raise ValueError(f"a sequence of {s} tokens is longer than the model's context ({self.cfg.seq})")
        pos = torch.arange(s, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """``idx`` extended by ``new_tokens`` sampled tokens (the context slides past ``cfg.seq``)."""
        if temperature <= 0:
            raise ValueError(f"temperature must be positive, got {temperature}")
        was_training = self.training
        self.eval()
        for _ in range(new_tokens):
            logits = self(idx[:, -self.cfg.seq:])[:, -1] / temperature
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
            idx = torch.cat([idx, nxt], dim=1)
        self.train(was_training)
        return idx


# The sizes the chapters train; each name means one configuration everywhere.
CONFIGS = {
    "gpt-tiny": GPTConfig(seq=64, layers=2, hidden=64, heads=4),     # tests and 8-rank runs
    "gpt-small": GPTConfig(seq=128, layers=4, hidden=128, heads=4),  # 8.1's model: 0.8 M parameters
}


def build(name_or_cfg: str | GPTConfig) -> GPT:
    """A fresh GPT by its name in ``CONFIGS``, or from a config (seed torch first)."""
    if isinstance(name_or_cfg, GPTConfig):
        return GPT(name_or_cfg)
    if name_or_cfg not in CONFIGS:
        raise ValueError(f"unknown GPT {name_or_cfg!r}; the sizes are {sorted(CONFIGS)}, or pass a GPTConfig")
    return GPT(CONFIGS[name_or_cfg])
