"""A mixture of experts in the GPT's MLP slot (chapter 8.3): a top-k router and E copies of the MLP.

Each token's hidden vector goes to the k experts its router scores highest, and the block's output
is their outputs weighted by the router's probabilities (Shazeer et al. 2017). The experts are
``gpt.MLP``s, the same MLP the dense GPT has, so ``to_moe`` swaps each ``Block.mlp`` for a
``MoE`` and leaves the rest of the model as it was::

    model = to_moe(gpt.build("gpt-tiny"), experts=4, k=1, capacity_factor=1.25)
    logits, loss = model(x, y)
    (loss + 0.01 * aux_loss(model)).backward()   # Switch's auxiliary loss, alpha = 0.01

Where this process holds only some of the experts (expert parallelism, ``recipes/experts.py``),
``MoE.exchange`` sends each expert its tokens and brings their outputs back; the routing, the
capacity and the weighting stay here, written once for both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .gpt import GPT, MLP, GPTConfig


class Router(nn.Module):
    """A Linear from hidden to one score per expert; softmax, then each token's top k.

    With k > 1 the k probabilities are renormalized to sum to 1 (Mixtral's choice); with k = 1 the
    gate is the probability itself, as in Switch, so the router still gets a gradient.
    """

    def __init__(self, hidden: int, experts: int, k: int):
        super().__init__()
        if not 1 <= k <= experts:
            raise ValueError(f"k must be between 1 and the number of experts ({experts}), got {k}")
        self.gate = nn.Linear(hidden, experts, bias=False)
        self.k = k

    def forward(self, x: torch.Tensor):
        """x (tokens, hidden) -> probs (tokens, experts), weights (tokens, k), choices (tokens, k)."""
        probs = F.softmax(self.gate(x).float(), dim=-1)
        weights, choices = probs.topk(self.k, dim=-1)
        if self.k > 1:
            weights = weights / weights.sum(-1, keepdim=True)
        return probs, weights.to(x.dtype), choices


@dataclass
class Dispatch:
    """Which of a group's token slots go to the experts, sorted by expert.

    A slot is one (choice, token) pair, numbered choice-major: every token's first choice comes
    before any second choice, so a full expert drops second choices first (GShard's priority).
    """

    slots: torch.Tensor    # the kept slots, sorted by expert (stable: in arrival order within one)
    tokens: torch.Tensor   # each kept slot's token
    counts: torch.Tensor   # tokens each expert receives, after the capacity cut (experts,)
    loads: torch.Tensor    # tokens routed to each expert, before it (experts,)


def capacity(tokens: int, experts: int, k: int, capacity_factor: float | None) -> int | None:
    """Slots per expert: ceil(factor * tokens * k / experts); None (no limit) without a factor."""
    if capacity_factor is None:
        return None
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be positive (or None for no limit), got {capacity_factor}")
    return math.ceil(capacity_factor * tokens * k / experts)


def plan(choices: torch.Tensor, experts: int, limit: int | None) -> Dispatch:
    """The dispatch of one group's ``choices`` (tokens, k): each expert takes its first ``limit``."""
    n_tokens = choices.shape[0]
    slot_expert = choices.t().reshape(-1)  # choice-major
    onehot = F.one_hot(slot_expert, experts)
    position = (onehot.cumsum(0) * onehot).sum(-1) - 1  # how many slots reached this expert before
    kept = torch.arange(slot_expert.numel(), device=choices.device)
    if limit is not None:
        kept = kept[position < limit]
    slots = kept[torch.argsort(slot_expert[kept], stable=True)]
    return Dispatch(slots, slots % n_tokens, torch.bincount(slot_expert[slots], minlength=experts),
                    torch.bincount(slot_expert, minlength=experts))


def run_experts(experts: nn.ModuleList, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
    """Rows of ``x`` sorted by expert, ``counts[i]`` of them for ``experts[i]``: each expert's output."""
    return torch.cat([e(part) for e, part in zip(experts, x.split(counts))])


def load_balancing_loss(probs: torch.Tensor, loads: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's Eq. 4 without alpha: E * sum_i f_i P_i, with f_i the fraction of the
    group's slots routed to expert i (before the capacity cut) and P_i the router's mean probability
    for it. 1 when both are uniform, E when every token goes to one expert with probability 1."""
    experts = probs.shape[-1]
    f = loads.to(probs.dtype) / loads.sum()
    return experts * (f * probs.mean(0)).sum()


class MoE(nn.Module):
    """Router and experts in the MLP's slot: (batch, seq, hidden) in, the same shape out.

    ``groups`` splits the batch (along its first dimension) into groups that are routed, cut to
    capacity and balanced apart, as GShard's groups are: a job of n expert-parallel ranks whose
    batches are the n groups makes the same choices as this one process.
    """

    def __init__(self, cfg: GPTConfig, experts: int = 4, k: int = 1, capacity_factor: float | None = None,
                 groups: int = 1):
        super().__init__()
        if experts < 1 or groups < 1:
            raise ValueError(f"experts and groups must be at least 1, got {experts} and {groups}")
        capacity(1, experts, k, capacity_factor)  # refuses a factor <= 0 now, not at the first batch
        self.router = Router(cfg.hidden, experts, k)
        self.experts = nn.ModuleList(MLP(cfg) for _ in range(experts))
        self.n_experts, self.k, self.capacity_factor, self.groups = experts, k, capacity_factor, groups
        self.exchange = None  # expert parallelism: (moe, rows sorted by expert, counts) -> outputs
        self.aux = torch.zeros(())
        self.stats: dict = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        if b % self.groups:
            raise ValueError(f"a batch of {b} does not split into {self.groups} groups evenly")
        outs, aux, loads, counts = [], [], 0, 0
        for xg in x.reshape(self.groups, -1, h):
            probs, weights, choices = self.router(xg)
            d = plan(choices, self.n_experts, capacity(len(xg), self.n_experts, self.k, self.capacity_factor))
            rows = xg[d.tokens]
            if self.exchange is None:
                y = run_experts(self.experts, rows, d.counts.tolist())
            else:
                y = self.exchange(self, rows, d.counts)
            gate = weights.t().reshape(-1)[d.slots]  # each kept slot's weight, choice-major like slots
            outs.append(torch.zeros_like(xg).index_add(0, d.tokens, y * gate[:, None]))
            aux.append(load_balancing_loss(probs, d.loads))
            loads, counts = loads + d.loads, counts + d.counts
        self.aux = torch.stack(aux).mean()
        self.stats = {"loads": loads.detach().cpu(), "counts": counts.detach().cpu()}
        return torch.cat(outs).reshape(b, s, h)


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


def to_moe(model: GPT, experts: int = 4, k: int = 1, capacity_factor: float | None = None,
           groups: int = 1) -> GPT:
    """``model`` with each block's MLP replaced by a fresh ``MoE`` (seed torch first), initialized as
    ``GPT`` initializes its MLPs: N(0, 0.02), and each expert's ``proj`` shrunk with depth."""
    cfg = model.cfg
    for block in model.blocks:
        moe = MoE(cfg, experts, k, capacity_factor, groups).to(block.ln2.weight.device)
        moe.apply(GPT._init)
        for e in moe.experts:
            nn.init.normal_(e.proj.weight, std=0.02 / math.sqrt(2 * cfg.layers))
        block.mlp = moe
    return model


def aux_loss(model: nn.Module) -> torch.Tensor:
    """The mean of the MoE layers' load-balancing losses from the last forward (times alpha: yours)."""
    layers = moe_layers(model)
    if not layers:
        raise ValueError("the model has no MoE layer: build it with to_moe")
    return torch.stack([m.aux for m in layers]).mean()


def loads(model: nn.Module) -> dict[str, torch.Tensor]:
    """Per MoE layer, from the last forward: tokens routed to each expert ('loads') and those it
    took after the capacity cut ('counts'), each (layers, experts)."""
    layers = moe_layers(model)
    return {key: torch.stack([m.stats[key] for m in layers]) for key in ("loads", "counts")}
