"""Mixed precision (chapters 3.3, 5.2): autocast's bytes held for backward, and GradScaler's rule."""
from __future__ import annotations

from .checks import at_least, whole, widths as check_widths
from .memory import mlp_activation_bytes


def autocast_weight_copy_bytes(widths: list[int], bytes_per_value: int = 2) -> int:
    """The 16-bit weight copies an MLP's Linears keep for backward under autocast.

    Backward needs a layer's weight to pass the gradient on to its input, so
    autograd saves the cast copy of every weight but the first layer's: the
    data needs no gradient. (Biases are added, never multiplied: nothing saved.)
    """
    check_widths("widths", widths), whole("bytes_per_value", bytes_per_value)
    return bytes_per_value * sum(a * b for a, b in zip(widths[1:-1], widths[2:]))


def autocast_saved_bytes(batch: int, widths: list[int]) -> int:
    """Bytes held for backward under autocast: 16-bit activations plus the weight copies."""
    return mlp_activation_bytes(batch, widths, "autocast") + autocast_weight_copy_bytes(widths)


def autocast_break_even_batch(widths: list[int]) -> int:
    """The smallest batch at which autocast holds fewer bytes for backward than fp32.

    fp32 holds 4*B*A bytes and autocast 2*B*A + C (A values per sample, C the
    copies' bytes), so autocast saves memory only when B > C / (2*A).
    """
    per_sample = mlp_activation_bytes(1, widths, "fp32") - mlp_activation_bytes(1, widths, "autocast")
    return autocast_weight_copy_bytes(widths) // per_sample + 1


def grad_scale_trace(init_scale: float, found_inf: list[bool], growth_interval: int = 2000,
                     growth_factor: float = 2.0, backoff_factor: float = 0.5) -> list[float]:
    """The scale GradScaler uses at each step, given the steps whose gradients overflowed.

    After an inf/nan the step is skipped and the scale multiplied by
    ``backoff_factor``; after ``growth_interval`` good steps in a row it is
    multiplied by ``growth_factor``.
    """
    at_least("init_scale", init_scale, 1e-300), whole("growth_interval", growth_interval)
    at_least("growth_factor", growth_factor, 1e-300), at_least("backoff_factor", backoff_factor, 1e-300)
    scale, good, trace = init_scale, 0, []
    for inf in found_inf:
        trace.append(scale)
        if inf:
            scale, good = scale * backoff_factor, 0
        else:
            good += 1
            if good == growth_interval:
                scale, good = scale * growth_factor, 0
    return trace
