"""Llama 3 405B (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv 2407.21783): the model of
its Table 3 and the three layouts of its Table 4, trained on Meta's H100s. Issue 35 sets the planner
beside published runs of 100B-plus models; this is the first of them after Narayanan et al.'s
Table 1 (``published``), and ``bench/planner.py`` prints where the planner stands on it.

From the paper: 126 layers, model dimension 16,384, FFN dimension 53,248 (SwiGLU), 128 attention
heads, 8 key/value heads, RMSNorm, no tied embeddings, rotary positions, vocabulary 128K (128,256 in
the released config); H100 80 GB HBM3, 8 a server on NVLink, RoCE at 400 Gb/s a GPU (section 3.3.1);
BF16; FSDP sharding the optimizer states and gradients, not the parameters after the forward
(section 3.3.2: ZeRO-2 here); the first stage's first chunk and the last stage's last holding only
the embedding and only the output layer (section 3.3.2, to even the stages' memory:
``Layout.end_chunks``); context parallelism that all-gathers K and V before the attention core, its
latency "exposed in the critical path" (section 3.3.2: ``Layout.cp_ring=False``); Table 4's rows as
``TABLE_4`` says.

Not given, and assumed here: peak 989 TFLOP/s dense BF16 (NVIDIA's H100 SXM datasheet), NVLink 4
at 450 GB/s a direction (its 900 GB/s both ways), 50 GB/s a direction across nodes (400 Gb/s),
Selene's latencies and 2 GiB reserved (``published``), flash attention and sequence parallelism
beside TP (Megatron's), one sequence a micro-batch, no recomputation, reductions that overlap, the
matmuls at the efficiency fitted on Table 1's A100 runs (``published``), which an H100 need not
share, and attention at FlashAttention-2's 35% of an H100's peak (Shah et al. 2024, FlashAttention-3,
section 1: ``FLASH_EFFICIENCY``). The paper does not say how it counts its TFLOP/s; "predicted"
counts the model's FLOPs with the attention core at half (``Model.training_flops(causal=True)``),
the scores a causal kernel computes: counted whole, the 128K row would read 1.4 times higher.
The planner searches what the stack offered (``STACK``): FSDP's sharding strategies (DDP, ZeRO-2
and ZeRO-3; FSDP has no ZeRO-1), all-gather CP, the end chunks.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from . import published
from .cluster import Cluster
from .model import Layout, Model
from .plan import fastest, plan, rank_of
from .price import Priced

GiB = 2 ** 30
MODEL_405B = Model(layers=126, hidden=16384, heads=128, seq=8192, vocab=128256, kv_heads=8, mlp_hidden=53248,
                   gated=True, tied_embeddings=False, learned_positions=False, biases=False)
# Table 4: (GPUs, TP, CP, PP, DP, sequence length, sequences per DP replica a batch, TFLOP/s per GPU,
# BF16 MFU as the paper states it, %)
TABLE_4 = (
    (8192, 8, 1, 16, 64, 8192, 32, 430, 43),
    (16384, 8, 1, 16, 128, 8192, 16, 400, 41),
    (16384, 8, 16, 16, 8, 131072, 16, 380, 38),
)
CHUNKS = (1, 2, 3, 6, 7, 8, 9)  # 126 layers over 16 stages: pp x v <= 126; 8 with the end chunks, a layer a chunk
FLASH_EFFICIENCY = 0.35  # FlashAttention-2 on an H100 (Shah et al. 2024)
STACK = dict(zero=(0, 2, 3), cp=(1, 2, 4, 8, 16), virtual=CHUNKS, end_chunks=(False, True), cp_ring=False)


def h100s(gpus: int) -> Cluster:
    """``gpus`` H100 80 GB, 8 a node, with the values the module's docstring states."""
    return Cluster(gpus=gpus, gpus_per_node=8, memory_bytes=80 * GiB, peak_flops=989e12, intra_bandwidth=450e9,
                   inter_bandwidth=50e9, intra_latency_s=5e-6, inter_latency_s=10e-6,
                   efficiency=published.MATMUL_EFFICIENCY, reserved_bytes=2 * GiB,
                   attention_efficiency=published.ATTENTION_EFFICIENCY, flash_efficiency=FLASH_EFFICIENCY)


def model_of(row) -> Model:
    return replace(MODEL_405B, seq=row[5])


def published_layout(row, model: Model, cluster: Cluster, ends: bool = True) -> Priced | None:
    """The row's (tp, cp, pp, dp) with ZeRO-2, no recomputation, all-gather CP and the embedding and
    head in chunks of their own (section 3.3.2: one layer fewer on the first and the last stage, whose
    first and last chunks hold only the embedding and only the output layer), at its fastest chunk
    count; one that fits first, if any does. ``ends=False``: every chunk holds layers (``end_chunks``)."""
    gpus, tp, cp, pp, dp = row[:5]
    return fastest(model, cluster, (Layout(dp, tp, pp, cp, 1, 2, "none", 1, v, True, True, True, False, ends, False)
                                    for v in CHUNKS), dp * row[6] * row[5])


@dataclass(frozen=True)
class Run:
    """One row of Table 4 against the planner."""

    gpus: int
    mesh: tuple              # (dp, tp, pp, cp)
    seq: int
    published_tflops: float
    predicted_tflops: float
    memory_gib: float
    fits: bool
    virtual: int
    rank: int | None         # the published mesh's place among the planner's meshes that fit
    best_mesh: tuple         # the planner's first (dp, tp, pp, cp, ep)
    slower_than_best: float  # the published layout's predicted step / the best's - 1
    why_not: str

    @property
    def error(self) -> float:
        return self.predicted_tflops / self.published_tflops - 1

    @property
    def passes(self) -> bool:
        """Issue 35's targets: it fits, within 20%, and in the planner's first five or within 10% of its best."""
        near = self.rank is not None and (self.rank <= 5 or self.slower_than_best <= 0.10)
        return self.fits and abs(self.error) <= 0.20 and near


def compare(rows=TABLE_4, stack=STACK, cluster_of=h100s, ends: bool = True) -> list[Run]:
    """Each row priced at its published layout and ranked among what the planner finds with what the
    stack offered (``STACK``) on ``cluster_of(gpus)``, the teraFLOP/s counted with the attention core at
    half; ``ends`` as in ``published_layout``."""
    out = []
    for row in rows:
        model, cluster = model_of(row), cluster_of(row[0])
        mine, tokens = published_layout(row, model, cluster, ends), row[4] * row[6] * row[5]
        ranked = plan(model, cluster, tokens, **stack)
        predicted = tokens / row[5] * model.training_flops("none", causal=True) / (row[0] * mine.step_s) / 1e12
        ly = mine.layout
        out.append(Run(row[0], (ly.dp, ly.tp, ly.pp, ly.cp), row[5], row[7], predicted, mine.memory_bytes / GiB,
                       mine.fits, ly.virtual, rank_of(ranked, ly.mesh()),
                       ranked[0].layout.mesh() if ranked else (),
                       mine.step_s / ranked[0].step_s - 1 if ranked else float("inf"), mine.why_not))
    return out
