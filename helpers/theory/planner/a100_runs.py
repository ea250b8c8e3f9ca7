"""Two more published runs on A100 80 GB GPUs beside Narayanan et al.'s Table 1 (``published``):
Megatron-Turing NLG 530B at three sizes of Selene, and BLOOM 176B on Jean Zay. Issue 35 sets the
planner beside at least five published runs; with Table 1 and Llama 3 (``llama3``) these make four
sources and eight more rows.

MT-NLG (Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B",
arXiv 2201.11990): 105 layers, hidden 20,480, 128 heads, sequence 2,048, a batch of 1,920
sequences; 8-way tensor and 35-way pipeline parallelism (DeepSpeed's 1F1B pipeline, Megatron's
tensor slicing) on Selene's DGX A100 nodes; on 280, 350 and 420 nodes an iteration took 60.1,
50.2 and 44.4 s, which the paper gives as 126, 121 and 113 teraFLOP/s per GPU. Equation 3 of
Narayanan et al. (full recomputation counted) reproduces those from the times within 0.5%, so
that is the FLOP convention, and full recomputation is what ran. The vocabulary is GPT-2's,
padded as Megatron pads it (``published.VOCAB``); dropout, as Megatron-LM's GPT trained then
(Table 1's model too; without its masks the planner would fit the mesh with no recomputation
at all); no ZeRO (assumed: DeepSpeed offered ZeRO-1, which would only free memory here); Selene
is ``published.selene``.

BLOOM (BigScience 2022, arXiv 2211.05100; the released launch script
``bigscience/train/tr11-176B-ml/tr11-176B-ml.slurm``): 70 layers, hidden 14,336, 112 heads,
sequence 2,048, vocabulary padded to 250,880, ALiBi (no position table), a GeLU MLP 4h wide,
biases, tied embeddings, no dropout; TP 4, PP 12, 48 nodes (so DP 8), micro-batch 2, a batch of
2,048 sequences, activation checkpointing (full), bf16 with DeepSpeed's ZeRO-1-equivalent
optimizer; 48 nodes of 8 A100 80 GB, four 100 Gb/s Omni-Path links a node. "About 150 TFLOPs"
per GPU is BigScience's figure at that batch (the model card; the paper's fastest configuration,
156), counted with Megatron-DeepSpeed's formula, which is equation 3.

Assumed for BLOOM, as for Selene (``published``): NVLink at 300 GB/s a direction, Selene's
latencies and 2 GiB reserved, and Table 1's fitted efficiencies; its 50 GB/s a node across nodes
is 6.25 GB/s a GPU. Not modelled: the script's ``CUDA_LAUNCH_BLOCKING=1`` (a workaround for hangs,
which serializes the host and the GPU), and Megatron-DeepSpeed's partition counting the two
embeddings as layers (its first stage holds 5 transformer layers, the planner's 6).
"""
from __future__ import annotations

from . import published
from .cluster import Cluster
from .llama3 import Run
from .model import Layout, Model
from .plan import fastest, plan, rank_of

GiB = published.GiB
MT_NLG = Model(layers=105, hidden=20480, heads=128, seq=2048, vocab=published.VOCAB, dropout=True)
BLOOM = Model(layers=70, hidden=14336, heads=112, seq=2048, vocab=250880, learned_positions=False)
# (model, GPUs, tp, pp, dp, batch (sequences), micro-batch (None: not published), teraFLOP/s per GPU,
#  seconds an iteration (None: not published))
RUNS = (
    ("MT-NLG 530B", 2240, 8, 35, 8, 1920, None, 126, 60.1),
    ("MT-NLG 530B", 2800, 8, 35, 10, 1920, None, 121, 50.2),
    ("MT-NLG 530B", 3360, 8, 35, 12, 1920, None, 113, 44.4),
    ("BLOOM 176B", 384, 4, 12, 8, 2048, 2, 150, None),
)
MODELS = {"MT-NLG 530B": MT_NLG, "BLOOM 176B": BLOOM}
SOURCES = {"MT-NLG 530B": "Smith et al. 2022", "BLOOM 176B": "BigScience 2022, tr11-176B-ml.slurm"}
# What their stacks offered (Megatron-DeepSpeed, 2021-22): ZeRO-1 at most, full recomputation or
# none, no flash attention, no sequence or context parallelism, DeepSpeed's 1F1B (no interleaving)
# and the gradients reduced after the backward.
STACK = dict(zero=(0, 1), recompute=("none", "full"), cp=(1,), sp=False, flash=False, overlap=False,
             virtual=(1,))


def jean_zay(gpus: int) -> Cluster:
    """``gpus`` A100 80 GB of Jean Zay (8 a node), with the values the module's docstring states."""
    return Cluster(gpus=gpus, gpus_per_node=8, memory_bytes=80 * GiB, peak_flops=published.PEAK_FLOPS,
                   intra_bandwidth=300e9, inter_bandwidth=50e9 / 8, intra_latency_s=5e-6, inter_latency_s=10e-6,
                   efficiency=published.MATMUL_EFFICIENCY, reserved_bytes=2 * GiB,
                   attention_efficiency=published.ATTENTION_EFFICIENCY)


def cluster_of(run) -> Cluster:
    return jean_zay(run[1]) if run[0].startswith("BLOOM") else published.selene(run[1])


def published_layout(run, model: Model, cluster: Cluster):
    """The run's (dp, tp, pp) with full recomputation, ZeRO-1 where it ran (BLOOM) and none where it is
    assumed (MT-NLG), at its micro-batch, or its fastest where the paper gives none."""
    _, gpus, tp, pp, dp, batch, micro = run[:7]
    zero = 1 if run[0].startswith("BLOOM") else 0
    sizes = (micro,) if micro else published.MICRO_BATCHES
    return fastest(model, cluster, (Layout(dp, tp, pp, 1, 1, zero, "full", b, 1, False, False, False) for b in sizes),
                   batch * model.seq)


def compare(runs=RUNS) -> list[Run]:
    """Each run priced at its published layout, and ranked among what its stack offered (``STACK``)."""
    out = []
    for run in runs:
        model, cluster = MODELS[run[0]], cluster_of(run)
        mine, tokens = published_layout(run, model, cluster), run[5] * model.seq
        ranked = plan(model, cluster, tokens, micro_batches=published.MICRO_BATCHES, **STACK)
        predicted = published.equation_3_flops(model, run[5]) / (run[1] * mine.step_s) / 1e12
        ly = mine.layout
        out.append(Run(run[1], (ly.dp, ly.tp, ly.pp, ly.cp), model.seq, run[7], predicted, mine.memory_bytes / GiB,
                       mine.fits, ly.virtual, rank_of(ranked, ly.mesh()), ranked[0].layout.mesh() if ranked else (),
                       mine.step_s / ranked[0].step_s - 1 if ranked else float("inf"), mine.why_not))
    return out
