"""What theory's formulas accept: one check for each kind of input, each a ValueError naming the reason.

A formula handed an impossible input (a stage past the last, p = -1, zero blocks, a negative
size, a NaN) would otherwise price it: it returns a number, or a KeyError from deep inside.
Every check takes a number or an array of them (the formulas are numpy-vectorized), refuses
bools and strings, and returns its input unchanged.
"""
from __future__ import annotations

import math

import numpy as np


def _numbers(name: str, value):
    """The value as a plain float, or as a float array when it is not a plain int or float. The
    scalar path skips numpy: a planner's search checks hundreds of thousands of scalars, and
    numpy's reductions over one number were most of its time."""
    if type(value) is float or (type(value) is int and abs(value) < 2**1023):  # not bool: type(True) is bool
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value!r}")
        return float(value)
    a = np.asarray(value)
    if a.dtype.kind not in "iuf" or a.size == 0:
        raise ValueError(f"{name} must be a number (or an array of numbers), got {value!r}")
    a = a.astype(float)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return a


def _any(mask) -> bool:
    return mask if type(mask) is bool else bool(np.any(mask))


def whole(name: str, value, least: int = 1):
    """A count: a whole number, at least ``least`` (ranks, stages, micro-batches, blocks, layers)."""
    a = _numbers(name, value)
    fraction = (not a.is_integer()) if type(a) is float else _any(a != np.floor(a))
    if fraction or _any(a < least):
        raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    return value


def at_least(name: str, value, least: float = 0.0):
    """A size or a time: a finite number, at least ``least`` (bytes, seconds)."""
    if _any(_numbers(name, value) < least):
        raise ValueError(f"{name} must be >= {least:g}, got {value!r}")
    return value


def positive(name: str, value):
    """A rate or a size that divides: a finite number above zero (a peak, FLOP/s a GPU)."""
    if _any(_numbers(name, value) <= 0):
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def within(name: str, value, low: float, high: float):
    """A fraction or a bounded amount: a finite number in [low, high]."""
    a = _numbers(name, value)
    if _any(a < low) or _any(a > high):
        raise ValueError(f"{name} must be in [{low:g}, {high:g}], got {value!r}")
    return value


def below(name: str, value, count: int):
    """An index: a whole number in 0..count-1 (a stage of p stages, a rank of p ranks)."""
    if _any(_numbers(name, whole(name, value, 0)) >= count):
        raise ValueError(f"{name} must be in 0..{count - 1}, got {value!r}")
    return value


def one_of(name: str, value, options):
    """A name from a fixed set: refused with the set, not a KeyError."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {sorted(options)}, got {value!r}")
    return value


def widths(name: str, value, least_layers: int = 2) -> list:
    """An MLP's widths [in, hidden..., out]: at least ``least_layers`` of them, each >= 1."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) < least_layers:
        raise ValueError(f"{name} must list at least {least_layers} layer widths, got {value!r}")
    for w in value:
        whole(f"each of {name}", w)
    return list(value)
