"""Closed-form models of distributed training, and their fits to measurements.

Each formula is defined once here and shown in the chapter that teaches it.
"""
from __future__ import annotations

import numpy as np


# --- Speedup (chapter 4.1) -------------------------------------------------------------

def amdahl(p, alpha):
    """Strong scaling: S(p) = 1 / (alpha + (1 - alpha) / p) for a fixed total workload.

    alpha is the serial fraction of the one-device run; the ceiling as p grows is 1 / alpha.
    """
    p = np.asarray(p, dtype=float)
    return 1.0 / (alpha + (1.0 - alpha) / p)


# --- Communication (chapter 4.2) -------------------------------------------------------

def comm_time(message_bytes, bandwidth, latency):
    """The article's cost of one transfer: T_comm = M / B + L (seconds, bytes, bytes/s)."""
    return np.asarray(message_bytes, dtype=float) / bandwidth + latency


def step_time(t_compute, message_bytes, bandwidth, latency):
    """The article's step: T_total = T_compute + M / B + L, with no overlap."""
    return t_compute + comm_time(message_bytes, bandwidth, latency)
