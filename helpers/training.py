"""The small kit every recipe trains and times with: one step, one snapshot, one clock, one median.

* ``train_step``: forward, backward, update, under the book's AMP policy when asked;
* ``snapshot`` / ``flat_params``: a model's weights, copied off its device, to compare runs;
* ``turns``: the order in which variants take their turn, rotated, so machine noise hits all alike;
* ``Timeline``: spans and phase laps on the host's monotonic clock, which all ranks share;
* ``DeviceClock``: moments read without waiting for the device (CUDA events on a GPU), for overlap;
* ``median``: the one median of the package (the mean of the middle two for an even count).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Iterable, Sequence, TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import amp, devices

T = TypeVar("T")

PHASES = ("data", "forward", "backward", "comm", "optimizer")  # one training step, in order


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
               scaler: torch.amp.GradScaler | None = None, dtype: torch.dtype | None = None) -> float:
    """One step of cross-entropy training; returns the loss.

    ``dtype=None`` is plain float32. With a dtype, the forward and the loss run
    under autocast (the article's section 3.3); backward runs each op in the dtype
    its forward ran in. With a ``scaler``, the loss is scaled before backward, and
    the step is skipped if a gradient came out inf or nan.
    """
    with amp.autocast_to(x.device, dtype):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()  # loss * scale: small gradients move up into float16's range
        scaler.step(optimizer)  # unscale the gradients; skip the step if any is inf or nan
        scaler.update()  # halve the scale after a skip, double it after growth_interval good steps
    return loss.item()


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside DDP (or DataParallel): its state_dict keys carry no ``module.`` prefix."""
    return model.module if isinstance(getattr(model, "module", None), nn.Module) else model


def snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's state_dict, copied to the CPU: what a rank returns so runs can be compared."""
    return {k: v.detach().cpu().clone() for k, v in unwrap(model).state_dict().items()}


def flat_params(model: nn.Module) -> torch.Tensor:
    """Every parameter in one CPU vector."""
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()


def turns(items: Sequence[T], round_: int) -> list[T]:
    """The order of round ``round_``: rotated by one each round, so no variant always goes first."""
    k = round_ % len(items) if items else 0
    return list(items[k:]) + list(items[:k])


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


class Timeline:
    """What happened when, on ``time.perf_counter`` (the host's monotonic clock, shared by every
    process on the host, so spans from different ranks line up on one time axis).

    Two ways to use it: ``span(kind, tag)`` records ``(kind, tag, start, end)`` in ``spans``;
    ``start()`` then ``lap(phase)`` charges the time since the last lap to ``phases[phase]``.
    On a GPU it waits for the device before reading the clock.
    """

    def __init__(self, device: torch.device | None = None, phases: Iterable[str] = ()):
        self.device, self.phase_names = device, tuple(phases)
        self.spans: list[tuple] = []
        self.phases = dict.fromkeys(self.phase_names, 0.0)
        self._last = time.perf_counter()

    def now(self) -> float:
        devices.sync(self.device)  # else we would time kernel launches, not kernels
        return time.perf_counter()

    def record(self, kind: str, tag, start: float, end: float) -> None:
        self.spans.append((kind, tag, start, end))

    @contextlib.contextmanager
    def span(self, kind: str, tag=0):
        start = self.now()
        try:
            yield
        finally:
            self.record(kind, tag, start, self.now())

    def start(self) -> None:
        self.phases = dict.fromkeys(self.phase_names, 0.0)
        self._last = self.now()

    def lap(self, phase: str) -> None:
        now = self.now()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self._last
        self._last = now


class DeviceClock:
    """Moments read without waiting for the device, to see work overlap on it.

    On a CPU a moment is ``time.perf_counter()``. On a GPU it is a CUDA event recorded on the current
    stream: the moment the GPU reached that point of its queue, not when the host queued it (NCCL's
    all_reduce returns at once). ``start()`` synchronizes and pairs the host's clock with an event;
    ``seconds(moment)`` then places any later moment on the host's clock, shared by every rank.
    ``Timeline.now`` waits for the device instead, which is right for spans but would serialize
    the overlap that this clock is meant to show.
    """

    def __init__(self, device: torch.device | None = None):
        self.device = device
        self.cuda = device is not None and device.type == "cuda"
        self.origin: tuple[float, object] | None = None

    def start(self) -> None:
        devices.sync(self.device)  # the queue is empty: an event recorded now runs now
        self.origin = (time.perf_counter(), self.now())

    def now(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, moment) -> float:
        """A moment on the host's clock; on a GPU it first waits until every recorded event has run."""
        if not self.cuda:
            return moment
        if self.origin is None:
            raise RuntimeError("DeviceClock.seconds() before start(): no moment pairs the two clocks")
        devices.sync(self.device)
        host, event = self.origin
        return host + event.elapsed_time(moment) / 1e3
