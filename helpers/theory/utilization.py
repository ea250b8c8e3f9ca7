"""How close a run comes to its hardware (chapter 8.1): MFU, the peak it is set against, and days.

MFU and HFU are PaLM's terms (Chowdhery et al. 2022, Appendix B): the model's FLOPs a second over
the hardware's peak, and what the hardware ran (recomputation included) over the same peak. The
papers' peak is the data sheet's, a chip's arithmetic units at its clock; chapter 8.1 sets a
measured matmul peak beside that arithmetic for the CPU it runs on.
"""
from __future__ import annotations

from dataclasses import dataclass

from .checks import at_least, positive, whole

SECONDS_PER_DAY = 86400


def mfu(achieved_flops_per_s, peak_flops_per_s):
    """Model FLOPs utilization: the model's FLOPs (recomputation not counted) per second over the
    hardware's peak (Chowdhery et al. 2022, PaLM, Appendix B)."""
    return at_least("achieved_flops_per_s", achieved_flops_per_s) / positive("peak_flops_per_s", peak_flops_per_s)


def peak_flops(cores: int, clock_hz: float, flops_per_cycle: int) -> float:
    """A data sheet's peak: every core's arithmetic units busy every cycle at one clock."""
    whole("cores", cores), whole("flops_per_cycle", flops_per_cycle)
    return cores * positive("clock_hz", clock_hz) * flops_per_cycle


def training_days(tokens: float, n_params: float, gpus: int, flops_per_gpu: float) -> float:
    """Narayanan et al. 2021, Eq. 4: end-to-end training time ≈ 8 T P / (n X) seconds, in days:
    8 = Eq. 3's 4 passes of 2 FLOPs per multiply-add, T tokens, P parameters, n GPUs at X FLOP/s."""
    at_least("tokens", tokens), at_least("n_params", n_params), whole("gpus", gpus)
    return 8.0 * tokens * n_params / (gpus * positive("flops_per_gpu", flops_per_gpu)) / SECONDS_PER_DAY


@dataclass(frozen=True)
class PublishedRun:
    """A training run as its paper reports it: the model's sizes and how fast it trained."""

    name: str
    n_params: float
    layers: int
    heads: int
    head_dim: int
    seq: int
    tokens_per_s: float
    chips: int
    peak_flops_per_chip: float  # the data sheet's, as the paper used it
    published_mfu: float  # the paper's own figure

    def mfu_by(self, flops_per_token: float) -> float:
        """The run's MFU with its FLOPs a token counted one way (PaLM's, Kaplan's, ...)."""
        return mfu(self.tokens_per_s * flops_per_token, self.chips * self.peak_flops_per_chip)


# PaLM 540B (Chowdhery et al. 2022): its sizes (118 layers, 48 heads of 256, 540.35B parameters,
# sequence 2048) and Appendix B's run: 238.3K tokens/s on 6144 TPU v4 chips of 275
# TFLOP/s (bfloat16), 46.2% MFU.
PALM_540B = PublishedRun("PaLM 540B", 540.35e9, 118, 48, 256, 2048, 238.3e3, 6144, 275e12, 0.462)
