"""Mixed precision probed in the notebook's own process (chapters 3.3, 5.2).

Each function asks why a step of the article's recipe is there: what float16 does
to real gradients (``underflow_probe``), how GradScaler moves its scale
(``scaler_dynamics``), which ops autocast lowers (``autocast_op_table``), and what
autocast buys on this machine (``side_by_side``, ``step_times``). The training step
itself is ``helpers.training.train_step``; the recipe that runs it in N ranks, with
a checkpoint in the middle, is ``helpers.recipes.mixed_precision.amp_resume``.
"""
from __future__ import annotations

import copy
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from helpers import amp, data, devices
from helpers.measure import saved_bytes
from helpers.models import SimpleModel, WideMLP, widths
from helpers.training import train_step, turns


# --- The formats themselves -----------------------------------------------------------------

def smallest_subnormal(dtype: torch.dtype) -> float:
    """The smallest positive value of a float format: the last mantissa bit below the smallest normal."""
    return torch.finfo(dtype).tiny * torch.finfo(dtype).eps


def format_limits(dtypes: list[torch.dtype]) -> dict[str, list[float]]:
    """Each format's range and precision from ``torch.finfo``: limit name -> one value per dtype."""
    info = [torch.finfo(dt) for dt in dtypes]
    return {"largest": [f.max for f in info], "smallest normal": [f.tiny for f in info],
            "smallest subnormal": [smallest_subnormal(dt) for dt in dtypes],
            "eps: the step after 1": [f.eps for f in info]}


# --- float16's range, on real gradients ---------------------------------------------------

def output_gradient(model: nn.Module, x, y, dtype: torch.dtype | None = None, scale: float = 1.0):
    """dL/d(logits) as the backward pass holds it, divided back by ``scale`` in float32.

    Under autocast the logits leave a Linear in ``dtype``, so their gradient is
    cast to ``dtype`` on its way back: that cast is where float16 flushes small
    values to zero. Returns (gradient as float32, the dtype backward held it in).
    """
    seen = {}
    with amp.autocast_to(x.device, dtype):
        logits = model(x)
        logits.register_hook(lambda g: seen.setdefault("grad", g))
        loss = F.cross_entropy(logits, y)
    (loss * scale).backward()
    model.zero_grad(set_to_none=True)
    return seen["grad"].float() / scale, seen["grad"].dtype


def flushed(reference: torch.Tensor, grad: torch.Tensor) -> float:
    """The fraction of ``reference``'s nonzero entries that are exactly zero in ``grad``."""
    nonzero = reference != 0
    return ((grad == 0) & nonzero).sum().item() / max(1, nonzero.sum().item())


def underflow_probe(epochs: int = 10, batch_size: int = 64, lr: float = 0.05, probe: int = 256,
                    scale: float = 2.0**16, seed: int = 0, device: torch.device | None = None) -> dict:
    """Train ``SimpleModel`` in plain fp32; after every epoch, take the gradient at its output on
    ``probe`` fixed training samples in fp32, float16, float16 with the loss scaled, and bfloat16.

    Returns per-epoch fractions of the nonzero fp32 gradient that each flushed to zero,
    and the last epoch's gradients themselves.
    """
    device = device or devices.of_process()
    torch.manual_seed(seed)
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    model = SimpleModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    xp, yp = x[:probe], y[:probe]
    rows, losses = [], []
    for epoch in range(epochs + 1):
        if epoch:  # epoch 0 probes the untrained model
            order = torch.randperm(len(y), device=device)
            losses += [train_step(model, optimizer, x[i], y[i]) for i in order.split(batch_size)]
        ref, _ = output_gradient(model, xp, yp)
        grads = {"float32": ref,
                 "float16": output_gradient(model, xp, yp, torch.float16)[0],
                 "float16, scaled": output_gradient(model, xp, yp, torch.float16, scale)[0],
                 "bfloat16": output_gradient(model, xp, yp, torch.bfloat16)[0]}
        rows.append({"epoch": epoch, **{k: flushed(ref, g) for k, g in grads.items() if k != "float32"}})
    return {"rows": rows, "grads": {k: g.cpu() for k, g in grads.items()}, "losses": losses,
            "scale": scale, "probe": probe}


# --- GradScaler's life --------------------------------------------------------------------

def scaler_dynamics(steps: int = 80, init_scale: float = 2.0**20, growth_interval: int = 10,
                    batch_size: int = 64, lr: float = 0.05, seed: int = 0,
                    device: torch.device | None = None) -> dict:
    """Train ``SimpleModel`` with float16 autocast and a GradScaler; record the scale each step used
    and whether the scaler skipped that step (an inf/nan gradient, after which it halves the scale).

    float16 on purpose, on any device: it is the dtype that needs the scaler.
    """
    device = device or devices.of_process()
    torch.manual_seed(seed)
    model = SimpleModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval)
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    scales, skipped, losses = [], [], []
    while len(scales) < steps:
        for idx in torch.randperm(len(y), device=device).split(batch_size):
            before = scaler.get_scale()
            losses.append(train_step(model, optimizer, scaler=scaler, x=x[idx], y=y[idx], dtype=torch.float16))
            scales.append(before)
            skipped.append(scaler.get_scale() < before)  # only an overflow lowers the scale
            if len(scales) == steps:
                break
    return {"scale": scales, "skipped": skipped, "losses": losses, "init_scale": init_scale,
            "growth_interval": growth_interval, "state": scaler.state_dict()}


# --- What autocast casts ------------------------------------------------------------------

OPS = {  # name -> op on (a, b: 8x8 matrices, img: 1x4x8x8, w: 4x4x3x3, t: class labels)
    "linear": lambda a, b, img, w, t: F.linear(a, b),
    "matmul": lambda a, b, img, w, t: a @ b,
    "conv2d": lambda a, b, img, w, t: F.conv2d(img, w),
    "relu": lambda a, b, img, w, t: torch.relu(a),
    "add": lambda a, b, img, w, t: a + b,
    "sum": lambda a, b, img, w, t: a.sum(),
    "exp": lambda a, b, img, w, t: a.exp(),
    "softmax": lambda a, b, img, w, t: torch.softmax(a, dim=1),
    "layer_norm": lambda a, b, img, w, t: F.layer_norm(a, (8,)),
    "cross_entropy": lambda a, b, img, w, t: F.cross_entropy(a, t),
    "mse_loss": lambda a, b, img, w, t: F.mse_loss(a, b),
    "prod": lambda a, b, img, w, t: a.prod(),
}


def autocast_op_table(device: torch.device | None = None, dtype: torch.dtype | None = None) -> dict:
    """Run each op of ``OPS`` under autocast twice: on float32 inputs and on ``dtype`` inputs.

    An op on autocast's lower-precision list turns float32 inputs into ``dtype``
    output; an op on its float32 list turns ``dtype`` inputs into float32 output;
    any other op just follows the dtype of its inputs.
    """
    device = device or devices.of_process()
    dtype = dtype or amp.autocast_dtype(device)
    g = torch.Generator().manual_seed(0)
    fp32 = [torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g),
            torch.randn(1, 4, 8, 8, generator=g), torch.randn(4, 4, 3, 3, generator=g)]
    fp32 = [t.to(device) for t in fp32]
    labels = torch.randint(0, 8, (8,), generator=g).to(device)
    low = [t.to(dtype) for t in fp32]
    table = {}
    with torch.autocast(device.type, dtype=dtype):
        for name, op in OPS.items():
            from_fp32, from_low = op(*fp32, labels).dtype, op(*low, labels).dtype
            kind = (str(dtype).removeprefix("torch.") if from_fp32 == dtype else
                    "float32" if from_low == torch.float32 else "its inputs' dtype")
            table[name] = {"runs in": kind, "from float32": from_fp32, "from low": from_low}
    return table


# --- fp32 against autocast, measured -----------------------------------------------------

def step_times(dtypes: list[torch.dtype | None], steps: int = 10, batch_size: int = 64, seed: int = 0,
               device: torch.device | None = None, threads: int | None = None) -> dict[str, list[float]]:
    """Time ``steps`` training steps of ``SimpleModel`` per dtype (None: fp32), round-robin so that
    every dtype sees the same machine, on ``threads`` CPU threads (None: torch's). float16 gets a
    GradScaler, as it needs one."""
    device = device or devices.of_process()
    torch.manual_seed(seed)
    x, y = torch.randn(batch_size, 1, 28, 28, device=device), torch.randint(0, 10, (batch_size,), device=device)

    def make(dtype):
        model = SimpleModel().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
        return lambda: train_step(model, opt, x, y, scaler, dtype)

    runs = {amp.dtype_name(dtype): make(dtype) for dtype in dtypes}
    times = {k: [] for k in runs}
    with devices.cpu_threads(threads):
        for step in runs.values():  # warm-up: first calls pick and compile kernels
            step()
        for i in range(steps):
            for name in turns(list(runs), i):
                step = runs[name]
                devices.sync(device)
                start = time.perf_counter()
                step()
                devices.sync(device)
                times[name].append(time.perf_counter() - start)
    return times


def _evaluate(model: nn.Module, device: torch.device, dtype: torch.dtype | None) -> float:
    x, y = (t.to(device) for t in data.load(train=False).tensors)
    with torch.no_grad(), amp.autocast_to(device, dtype):
        return (model(x).argmax(1) == y).float().mean().item()


def side_by_side(width: int = 1024, depth: int = 4, epochs: int = 4, batch_size: int = 64,
                 lr: float = 0.02, momentum: float = 0.9, seed: int = 0,
                 device: torch.device | None = None, threads: int | None = None) -> dict:
    """Train two copies of ``WideMLP`` from the same weights on the same batches, one in fp32 and
    one under the book's autocast policy (``helpers.amp``), alternating step by step so that both
    see the same machine, on ``threads`` CPU threads (None: torch's); time every step, then score
    both on the test split.
    """
    device = device or devices.of_process()
    dtype = amp.autocast_dtype(device)
    torch.manual_seed(seed)
    models = {"fp32": WideMLP(width, depth).to(device)}
    models["autocast"] = copy.deepcopy(models["fp32"])
    opts = {k: torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum) for k, m in models.items()}
    scaler = amp.grad_scaler(device)  # active only for float16 (CUDA); bfloat16 needs none
    steps = {"fp32": lambda x, y: train_step(models["fp32"], opts["fp32"], x, y),
             "autocast": lambda x, y: train_step(models["autocast"], opts["autocast"], x, y, scaler, dtype)}
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    g = torch.Generator().manual_seed(seed)
    times = {k: [] for k in models}
    losses = {k: [] for k in models}
    n = 0
    with devices.cpu_threads(threads):
        for _ in range(epochs):
            for idx in torch.randperm(len(y), generator=g).split(batch_size):
                xb, yb = x[idx.to(device)], y[idx.to(device)]
                for name in turns(["fp32", "autocast"], n):  # who goes first alternates
                    devices.sync(device)
                    start = time.perf_counter()
                    losses[name].append(steps[name](xb, yb))
                    devices.sync(device)
                    times[name].append(time.perf_counter() - start)
                n += 1
    result = {"device": str(device), "dtype": str(dtype), "width": width, "depth": depth,
              "batch_size": batch_size, "steps": n, "times": times, "losses": losses,
              "accuracy": {k: _evaluate(m, device, None if k == "fp32" else dtype) for k, m in models.items()},
              "saved_bytes": {k: saved_bytes(m, batch_size, None if k == "fp32" else dtype, device)
                              for k, m in models.items()},
              "widths": widths(models["fp32"])}
    if device.type == "cuda":  # the allocator's own peak, one step each
        result["cuda_peak_bytes"] = {}
        for name in models:
            torch.cuda.reset_peak_memory_stats(device)
            base = torch.cuda.memory_allocated(device)
            steps[name](xb, yb)
            result["cuda_peak_bytes"][name] = torch.cuda.max_memory_allocated(device) - base
    return result
