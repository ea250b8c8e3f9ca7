"""What the planner is told about the hardware: GPUs, their memory, peak and links, and how close
to peak their kernels run; or one machine's gloo ranks as such a cluster (``machine_cluster``)."""
from __future__ import annotations

from dataclasses import dataclass

from ..checks import at_least, whole, within


@dataclass(frozen=True)
class Cluster:
    """GPUs and their links. Bandwidths: bytes/s per GPU per direction; latencies: seconds per
    step of a ring; ``peak_flops``: FLOP/s of one GPU at the precision trained in.

    ``efficiency`` is the fraction of ``peak_flops`` the GPUs' kernels run at while computing,
    one number for every layout: executed FLOPs over peak, PaLM's HFU (not MFU).
    ``attention_efficiency``, where given, is that fraction for the attention core alone (QKᵀ,
    softmax and scores x V) where its scores are materialized (no flash attention): its softmax,
    mask and dropout then read and write b x heads x s² values, bound by memory, not by the
    matmul units. ``flash_efficiency``, where given, is the fraction a fused (flash) kernel reaches,
    which keeps them on chip: on an H100, FlashAttention-2 reaches about 0.35 and FlashAttention-3
    0.75 (Shah et al. 2024); where not given, ``efficiency``.
    ``reserved_bytes`` per GPU are out of reach of the model: the CUDA context, communication
    buffers, fragmentation.
    A group of GPUs inside one node talks at ``intra_*``; a ring over nodes with k of its
    members in each node crosses each node's boundary on k NICs at once (one ring per NIC, as
    NCCL does), so its bandwidth is min(intra, k x inter) at ``inter_latency_s``.
    """

    gpus: int
    gpus_per_node: int
    memory_bytes: float
    peak_flops: float
    intra_bandwidth: float
    inter_bandwidth: float
    intra_latency_s: float
    inter_latency_s: float
    efficiency: float = 0.5
    reserved_bytes: float = 0.0
    attention_efficiency: float | None = None
    flash_efficiency: float | None = None

    def __post_init__(self):
        whole("Cluster.gpus", self.gpus), whole("Cluster.gpus_per_node", self.gpus_per_node)
        for name in ("memory_bytes", "peak_flops", "intra_bandwidth", "inter_bandwidth"):
            at_least(f"Cluster.{name}", getattr(self, name), 1e-300)
        for name in ("intra_latency_s", "inter_latency_s", "reserved_bytes"):
            at_least(f"Cluster.{name}", getattr(self, name))
        within("Cluster.efficiency", self.efficiency, 1e-6, 1.0)
        for name in ("attention_efficiency", "flash_efficiency"):
            if getattr(self, name) is not None:
                within(f"Cluster.{name}", getattr(self, name), 1e-6, 1.0)
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"{self.gpus} GPUs do not fill nodes of {self.gpus_per_node}")

    def attention(self, flash: bool) -> float:
        """The fraction of peak at which the attention core computes: ``flash_efficiency`` in a fused
        kernel, ``attention_efficiency`` with its scores materialized, ``efficiency`` where not given."""
        own = self.flash_efficiency if flash else self.attention_efficiency
        return self.efficiency if own is None else own


def machine_cluster(devices: int, memory_bytes: float, peak_flops: float, step_latency_s: float,
                    seconds_per_byte: float, efficiency: float = 1.0, flash_efficiency: float | None = None) -> Cluster:
    """One machine as a cluster: ``devices`` ranks (a CPU's cores split between gloo ranks) on one
    node, every link the ring that chapter 4.2 fitted (``theory.ring_from_fit``: seconds per ring
    step, seconds per byte). ``peak_flops``: one rank's measured FLOP/s, hence efficiency 1;
    ``flash_efficiency``: its fused attention's measured FLOP/s over that."""
    at_least("seconds_per_byte", seconds_per_byte, 1e-300)
    bandwidth = 1.0 / seconds_per_byte
    return Cluster(devices, devices, memory_bytes, peak_flops, bandwidth, bandwidth,
                   step_latency_s, step_latency_s, efficiency, flash_efficiency=flash_efficiency)
