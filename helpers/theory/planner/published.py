"""Narayanan et al. 2021, Table 1: GPT models from 1.7 to 1008 billion parameters trained with
Megatron-LM on up to 3072 A100s, and the cluster they ran on. The planner is checked against it.

Sources, all from the paper (arXiv 2104.04473, "Efficient Large-Scale Language Model Training on
GPU Clusters Using Megatron-LM"), section 5 and 5.1: V = 51,200, s = 2048; "we use the interleaved
pipeline schedule with the scatter/gather optimization enabled"; FLOPs by equation (3), which
counts activation recomputation's extra forward; A100 peak 312 teraFLOP/s in 16-bit; Selene's
nodes: 8 A100 80 GB GPUs on NVLink and NVSwitch, eight 200 Gb/s HDR InfiniBand HCAs per node.

What the paper does not give, and what is used here instead (assumptions, and one fit):
- NVLink 3 per GPU: 12 links x 25 GB/s = 300 GB/s per direction (NVIDIA's A100 datasheet:
  600 GB/s both ways). InfiniBand: one 200 Gb/s HCA per GPU = 25 GB/s per direction.
- latency of one ring step: 5 us inside a node, 10 us across (NCCL's order of magnitude).
- memory: 80 GiB, of which 2 GiB are taken as reserved (CUDA context, NCCL buffers): a round guess.
- Megatron-LM of 2021: full recomputation, no ZeRO, attention that materializes its scores,
  no sequence parallelism (it came in 2022), data-parallel all-reduce after the backward and
  blocking pipeline sends (``overlap=False``), micro-batch size and number of chunks not in the
  table: each published layout is priced at its fastest micro-batch size (1, 2, 4 or 8) and
  chunk count (2-8, interleaved as the paper says) that the schedule allows.
- Compute at two fractions of peak, fitted on half the rows (``FIT_ROWS``: the 1st, 3rd, ... 9th)
  and checked on all ten, so the other five are held out. The matmuls run at
  ``MATMUL_EFFICIENCY``; the attention core (QKᵀ, softmax, scores x V) at ``ATTENTION_EFFICIENCY``:
  Megatron-LM of 2021 materialized the b x heads x s² scores, and its softmax, mask and dropout
  on them are bound by memory, not by the tensor cores. That share of a layer's FLOPs (equation
  3 counts s / (6h + s) of them) falls from 13% at 1.7B to 1% at 1T, which is why one efficiency
  for every row cannot follow the published rise from 137 to 163 TFLOP/s. ``fit_efficiencies``
  finds the pair that minimizes the fitted rows' largest error; a unit test fits again and gets
  these two.
"""
from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster
from .model import Layout, Model
from .plan import fastest, plan, rank_of
from .price import Priced

MATMUL_EFFICIENCY, ATTENTION_EFFICIENCY = 0.62, 0.14  # fit_efficiencies(FIT_ROWS), on a 0.01 grid
PEAK_FLOPS = 312e12
GiB = 2 ** 30
SEQ, VOCAB = 2048, 51200
# (billions of parameters, heads, hidden, layers, tp, pp, GPUs, batch (sequences),
#  achieved teraFLOP/s per GPU, % of peak): Table 1, row by row.
TABLE_1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52),
)
FIT_ROWS = TABLE_1[0::2]  # 1.7, 7.5, 39.1, 145.6 and 529.6 billion; the other five are held out
# Megatron-LM in 2021, as the planner's search options and ``Layout`` fields
MEGATRON_2021 = dict(zero=(0,), recompute=("full",), cp=(1,), sp=False, flash=False, overlap=False)
MICRO_BATCHES, CHUNKS = (1, 2, 4, 8), (2, 3, 4, 6, 8)


def model_of(row) -> Model:
    _, heads, hidden, layers = row[:4]
    return Model(layers=layers, hidden=hidden, heads=heads, seq=SEQ, vocab=VOCAB, dropout=True)


def selene(gpus: int, efficiency: float = MATMUL_EFFICIENCY, attention: float | None = ATTENTION_EFFICIENCY) -> Cluster:
    """``gpus`` A100 80 GB of Selene (8 a node), with the values the module's docstring states."""
    return Cluster(gpus=gpus, gpus_per_node=8, memory_bytes=80 * GiB, peak_flops=PEAK_FLOPS,
                   intra_bandwidth=300e9, inter_bandwidth=25e9, intra_latency_s=5e-6,
                   inter_latency_s=10e-6, efficiency=efficiency, reserved_bytes=2 * GiB,
                   attention_efficiency=attention)


def equation_3_flops(model: Model, batch: int) -> float:
    """F = 96 B s l h² (1 + s / 6h + V / 16 l h): FLOPs of one step with recomputation (eq. 3)."""
    s, l, h, v = model.seq, model.layers, model.hidden, model.vocab
    return 96.0 * batch * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))


def published_layout(row, model: Model, cluster: Cluster) -> Priced:
    """The row's (t, p, d) as Megatron-LM 2021 ran it, at its fastest micro-batch and chunking."""
    tp, pp, gpus, batch = row[4:8]
    return fastest(model, cluster, (Layout(gpus // (tp * pp), tp, pp, 1, 1, 0, "full", b, v, False, False, False)
                                    for b in MICRO_BATCHES for v in (CHUNKS if pp > 1 else (1,))), batch * SEQ)


@dataclass(frozen=True)
class Row:
    """One row against the planner: TFLOP/s per GPU published and predicted, memory, rank."""

    billions: float
    tp: int
    pp: int
    dp: int
    gpus: int
    batch: int
    published_tflops: float
    predicted_tflops: float
    error: float             # predicted / published - 1
    memory_gib: float
    fits: bool
    micro_batch: int
    virtual: int
    rank: int | None         # the published mesh's place among the planner's meshes
    best_mesh: tuple         # the planner's first (dp, tp, pp, cp, ep)
    slower_than_best: float  # published layout's predicted step / the best's - 1
    held_out: bool           # not among the rows the efficiencies were fitted on (FIT_ROWS)

    @property
    def passes(self) -> bool:
        top = self.rank is not None and (self.rank <= 5 or self.slower_than_best <= 0.15)
        return self.fits and abs(self.error) <= 0.25 and top


def predicted_tflops(row, efficiency: float = MATMUL_EFFICIENCY, attention: float | None = ATTENTION_EFFICIENCY,
                     ) -> tuple[float, Priced]:
    """The row's published layout priced (``published_layout``), and its teraFLOP/s per GPU as the
    paper counts them (equation 3)."""
    model = model_of(row)
    mine = published_layout(row, model, selene(row[6], efficiency, attention))
    return equation_3_flops(model, row[7]) / (row[6] * mine.step_s) / 1e12, mine


def fit_efficiencies(rows=FIT_ROWS, separate_attention: bool = True) -> tuple[float, float | None]:
    """(matmul, attention) efficiencies on a 0.01 grid with the smallest largest |error| over
    ``rows``: a 0.05 grid over 0.40-0.90 and 0.05-0.60, then 0.01 steps around its best. With
    ``separate_attention=False``, one efficiency for all compute: (it, None)."""
    def worst(pair):
        return max(abs(predicted_tflops(row, *pair)[0] / row[8] - 1) for row in rows)

    def grid(lo, hi, step):
        return [round(lo + i * step, 2) for i in range(round((hi - lo) / step) + 1)]

    attention = grid(0.05, 0.60, 0.05) if separate_attention else [None]
    e, a = min(((e, a) for e in grid(0.40, 0.90, 0.05) for a in attention), key=worst)
    near = grid(max(0.01, a - 0.05), a + 0.05, 0.01) if separate_attention else [None]
    return min(((e2, a2) for e2 in grid(e - 0.05, e + 0.05, 0.01) for a2 in near), key=worst)


def compare(efficiency: float = MATMUL_EFFICIENCY, attention: float | None = ATTENTION_EFFICIENCY,
            rows=TABLE_1) -> list[Row]:
    """Every row of Table 1 priced at its published layout, and ranked by the planner searching
    what Megatron-LM offered in 2021 (``MEGATRON_2021``). ``attention=None``: one efficiency for all."""
    out = []
    for row in rows:
        model, cluster = model_of(row), selene(row[6], efficiency, attention)
        predicted, mine = predicted_tflops(row, efficiency, attention)
        ranked = plan(model, cluster, row[7] * SEQ, micro_batches=MICRO_BATCHES,
                      virtual=(1,) + CHUNKS, **MEGATRON_2021)
        ly = mine.layout
        out.append(Row(row[0], ly.tp, ly.pp, ly.dp, row[6], row[7], row[8], predicted, predicted / row[8] - 1,
                       mine.memory_bytes / GiB, mine.fits, ly.micro_batch, ly.virtual,
                       rank_of(ranked, ly.mesh()), ranked[0].layout.mesh() if ranked else (),
                       mine.step_s / ranked[0].step_s - 1 if ranked else float("inf"), row not in FIT_ROWS))
    return out
