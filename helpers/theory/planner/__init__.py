"""The planner of chapter 8.5: which layout to train a transformer with on a cluster, and why.

    plan(model, cluster, global_batch_tokens)   -> [Priced], the meshes that fit, fastest first
    price(model, cluster, layout, global_batch_tokens) -> Priced, one layout, fitting or not

``Model`` (layers, hidden, heads, kv_heads, mlp_hidden, gated, seq, vocab, experts, top_k),
``Cluster`` (gpus, gpus_per_node, memory_bytes, peak_flops (FLOP/s), intra-/inter-node
bandwidth (bytes/s per GPU per direction) and latency (s), efficiency: the fraction of peak
the kernels run at, and attention_efficiency where scores are materialized), ``Layout`` (dp, tp, pp, cp, ep, zero, recompute, micro_batch, virtual, sp,
flash, overlap). A ``Priced`` holds memory per GPU (bytes, by kind), the step (seconds, by part:
compute, bubble, tp, cp, ep, pp, dp), whether it fits and why not. A layout that does not divide
(heads over tp, the batch over dp, layers over stages) is a ValueError naming what.

It composes what earlier chapters wrote: ZeRO's states and the ring collectives of
``theory.sharding`` (6.2, 4.2), ``segment_bounds`` for uneven stages, 6.1's bubble. ``published``
holds Narayanan et al. 2021's Table 1 and the cluster it ran on, to check the planner against;
``llama3`` Llama 3 405B's Table 4 (Dubey et al. 2024) and Meta's H100s; ``a100_runs`` MT-NLG 530B
(Smith et al. 2022) at three sizes of Selene and BLOOM 176B on Jean Zay.
"""
from .cluster import Cluster, machine_cluster  # noqa: F401
from .model import RECOMPUTE, VALUE_BYTES, Layout, Model  # noqa: F401
from .plan import divisors, fastest, plan, rank_of  # noqa: F401
from .price import TIME_PARTS, Priced, check, price, stage_memory  # noqa: F401
