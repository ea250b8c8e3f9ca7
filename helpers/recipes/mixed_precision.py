"""Mixed precision, run and measured: the workloads of chapters 3.3 and 5.2.

The article's four steps (its section 3.3) are ``amp_step``, beside the plain
``fp32_step``. The other functions ask why each step is there: what float16
does to real gradients (``underflow_probe``), how GradScaler moves its scale
(``scaler_dynamics``), which ops autocast lowers (``autocast_op_table``), what
autocast buys on this machine (``side_by_side``, ``saved_bytes``), and why the
scaler's state goes into the checkpoint (``amp_resume``, a recipe for N ranks)::

    helpers.launch(amp_resume, nprocs=2, path="/tmp/amp.pt")      # in a notebook
    torchrun --nproc-per-node 2 -m helpers.run mixed_precision.amp_resume --path /tmp/amp.pt
"""
from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import amp as mixed
from helpers import checkpoint, data, theory
from helpers.dist import distributed, report
from helpers.models import SimpleModel, WideMLP


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _autocast(device: torch.device, dtype: torch.dtype | None):
    """autocast to ``dtype``, or nothing at all for ``dtype=None`` (plain fp32)."""
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":  # kernels run asynchronously; time them only once they are done
        torch.cuda.synchronize(device)


# --- The article's steps, beside plain fp32 ---------------------------------------------

def fp32_step(model: nn.Module, optimizer, x, y) -> float:
    """One plain training step: the naive version."""
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def amp_step(model: nn.Module, optimizer, scaler: torch.amp.GradScaler, x, y, dtype: torch.dtype) -> float:
    """The article's steps 2-4 (step 1 built ``scaler``). Only the forward and the loss go under
    autocast: backward runs each op in the dtype its forward ran in."""
    with torch.autocast(x.device.type, dtype=dtype):
        loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()  # loss * scale: small gradients move up into float16's range
    scaler.step(optimizer)  # unscale the gradients; skip the step if any is inf or nan
    scaler.update()  # halve the scale after a skip, double it after growth_interval good steps
    return loss.item()


# --- float16's range, on real gradients ---------------------------------------------------

def output_gradient(model: nn.Module, x, y, dtype: torch.dtype | None = None, scale: float = 1.0):
    """dL/d(logits) as the backward pass holds it, divided back by ``scale`` in float32.

    Under autocast the logits leave a Linear in ``dtype``, so their gradient is
    cast to ``dtype`` on its way back: that cast is where float16 flushes small
    values to zero. Returns (gradient as float32, the dtype backward held it in).
    """
    seen = {}
    with _autocast(x.device, dtype):
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
    device = device or default_device()
    torch.manual_seed(seed)
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    model = SimpleModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    xp, yp = x[:probe], y[:probe]
    rows, losses = [], []
    for epoch in range(epochs + 1):
        if epoch:  # epoch 0 probes the untrained model
            order = torch.randperm(len(y), device=device)
            losses += [fp32_step(model, optimizer, x[i], y[i]) for i in order.split(batch_size)]
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
    device = device or default_device()
    torch.manual_seed(seed)
    model = SimpleModel().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device.type, init_scale=init_scale, growth_interval=growth_interval)
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    scales, skipped, losses = [], [], []
    while len(scales) < steps:
        for idx in torch.randperm(len(y), device=device).split(batch_size):
            before = scaler.get_scale()
            losses.append(amp_step(model, optimizer, scaler, x[idx], y[idx], torch.float16))
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
    device = device or default_device()
    dtype = dtype or mixed.autocast_dtype(device)
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

def widths(model: nn.Module) -> list[int]:
    """[in, hidden..., out] of a stack of Linears: what ``theory``'s MLP formulas take."""
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return [m.in_features for m in linears] + [linears[-1].out_features]


def saved_bytes(model: nn.Module, batch: int, dtype: torch.dtype | None,
                device: torch.device | None = None) -> int:
    """Bytes autograd holds for backward after one forward at ``batch`` (``theory.saved_activation_bytes``)."""
    device = device or default_device()
    x = torch.randn(batch, 1, 28, 28, device=device)

    def forward():
        with _autocast(device, dtype):
            model(x)
    return sum(theory.saved_activation_bytes(model, forward).values())


def step_times(dtypes: list[torch.dtype | None], steps: int = 10, batch_size: int = 64, seed: int = 0,
               device: torch.device | None = None) -> dict[str, list[float]]:
    """Time ``steps`` training steps of ``SimpleModel`` per dtype (None: fp32), round-robin so that
    every dtype sees the same machine. float16 gets a GradScaler, as it needs one."""
    device = device or default_device()
    torch.manual_seed(seed)
    x, y = torch.randn(batch_size, 1, 28, 28, device=device), torch.randint(0, 10, (batch_size,), device=device)

    def make(dtype):
        model = SimpleModel().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        if dtype is None:
            return lambda: fp32_step(model, opt, x, y)
        scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        return lambda: amp_step(model, opt, scaler, x, y, dtype)

    runs = {str(dtype or torch.float32).removeprefix("torch."): make(dtype) for dtype in dtypes}
    for step in runs.values():  # warm-up: first calls pick and compile kernels
        step()
    times = {k: [] for k in runs}
    for _ in range(steps):
        for name, step in runs.items():
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return times


def _evaluate(model: nn.Module, device: torch.device, dtype: torch.dtype | None) -> float:
    x, y = (t.to(device) for t in data.load(train=False).tensors)
    with torch.no_grad(), _autocast(device, dtype):
        return (model(x).argmax(1) == y).float().mean().item()


def side_by_side(width: int = 1024, depth: int = 4, epochs: int = 4, batch_size: int = 64,
                 lr: float = 0.02, momentum: float = 0.9, seed: int = 0,
                 device: torch.device | None = None) -> dict:
    """Train two copies of ``WideMLP`` from the same weights on the same batches, one in fp32 and
    one under the book's autocast policy (``helpers.amp``), alternating step by step so that both
    see the same machine; time every step, then score both on the test split.
    """
    device = device or default_device()
    dtype = mixed.autocast_dtype(device)
    torch.manual_seed(seed)
    models = {"fp32": WideMLP(width, depth).to(device)}
    models["autocast"] = copy.deepcopy(models["fp32"])
    opts = {k: torch.optim.SGD(m.parameters(), lr=lr, momentum=momentum) for k, m in models.items()}
    scaler = mixed.grad_scaler(device)  # active only for float16 (CUDA); bfloat16 needs none
    steps = {"fp32": lambda x, y: fp32_step(models["fp32"], opts["fp32"], x, y),
             "autocast": lambda x, y: amp_step(models["autocast"], opts["autocast"], scaler, x, y, dtype)}
    x, y = (t.to(device) for t in data.load(train=True).tensors)
    g = torch.Generator().manual_seed(seed)
    times = {k: [] for k in models}
    losses = {k: [] for k in models}
    n = 0
    for _ in range(epochs):
        for idx in torch.randperm(len(y), generator=g).split(batch_size):
            xb, yb = x[idx.to(device)], y[idx.to(device)]
            for name in (("fp32", "autocast") if n % 2 == 0 else ("autocast", "fp32")):  # who goes first alternates
                _sync(device)
                start = time.perf_counter()
                losses[name].append(steps[name](xb, yb))
                _sync(device)
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


# --- The scaler's state belongs in the checkpoint (chapter 5.2) --------------------------

def amp_resume(epochs: int = 4, stop_at: int = 2, path: str | None = None, batch_size: int = 64,
               lr: float = 0.05, momentum: float = 0.9, init_scale: float = 2.0**16,
               growth_interval: int = 5, seed: int = 0) -> dict:
    """The article's AMP loop (float16 + GradScaler) in DDP, checkpointed after ``stop_at`` epochs
    with ``helpers.checkpoint`` (chapter 5.4), then finished three ways: straight on; resumed with
    the scaler's state; resumed with a fresh scaler, all that the article's checkpoint allows
    (it holds model and optimizer only).

    ``growth_interval`` is short (the default is 2000) so that the scale moves within a few epochs.
    """
    path = path or os.path.join(tempfile.gettempdir(), "amp_resume.pt")
    with distributed(seed) as ctx:
        dataset = data.load(train=True)
        sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
        total, done = (epochs + 2 * (epochs - stop_at)) * len(loader), [0]

        def build():
            torch.manual_seed(seed)
            model = DDP(SimpleModel().to(ctx.device), device_ids=ctx.device_ids)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            scaler = torch.amp.GradScaler(ctx.device.type, init_scale=init_scale,
                                          growth_interval=growth_interval)
            return model, optimizer, scaler

        def run(model, optimizer, scaler, first: int, last: int) -> dict:
            trace = {"scale": [], "skipped": [], "loss": []}
            for epoch in range(first, last):
                sampler.set_epoch(epoch)
                for x, y in loader:
                    before = scaler.get_scale()
                    loss = amp_step(model, optimizer, scaler, x.to(ctx.device), y.to(ctx.device), torch.float16)
                    trace["scale"].append(before)
                    trace["skipped"].append(scaler.get_scale() < before)
                    trace["loss"].append(loss)
                    done[0] += 1
                    report(done[0], total, loss=loss, scale=before)
            return trace

        def weights(model):
            return {k: v.detach().cpu().clone() for k, v in model.module.state_dict().items()}

        model, optimizer, scaler = build()
        head = run(model, optimizer, scaler, 0, stop_at)
        checkpoint.save(path, model=model, optimizer=optimizer, scaler=scaler, epoch=stop_at)
        saved_scaler = scaler.state_dict()
        runs = {"straight": run(model, optimizer, scaler, stop_at, epochs)}
        final = {"straight": weights(model)}
        for name, with_scaler in (("resumed", True), ("fresh scaler", False)):
            model, optimizer, scaler = build()
            resume = checkpoint.load(path, model=model, optimizer=optimizer,
                                     scaler=scaler if with_scaler else None)
            if with_scaler:
                loaded_scaler = scaler.state_dict()
            runs[name] = run(model, optimizer, scaler, resume.epoch, epochs)
            final[name] = weights(model)
        on_disk = checkpoint.read(path)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "head": head, "runs": runs,
                "final": final, "saved_scaler": saved_scaler, "scaler_on_disk": on_disk["scaler"],
                "loaded_scaler": loaded_scaler, "checkpoint_keys": sorted(on_disk), "stop_at": stop_at,
                "policy_scaler_state": mixed.grad_scaler(ctx.device).state_dict()}
