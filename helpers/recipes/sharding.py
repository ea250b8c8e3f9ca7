"""Chapter 6.2's two jobs with the by-hand ZeRO: training every variant side by side, and the collectives alone.

``compare`` trains DDP, ``zero.Zero1``/``Zero2``/``Zero3`` and FSDP2 from the same weights on the
same batches, and returns per rank the final weights, the bytes held after the last backward
(parameters, gradients, optimizer states) and the last step's collectives. ``collectives``
times all_reduce, all_gather and reduce_scatter alone over a few sizes, and reads the bytes
each rank really sent (``Traffic``), always over gloo, so that its sockets carry them. Every time
is read on a ``Timeline``, which waits for a GPU's kernels first::

    helpers.launch(compare, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run sharding.compare
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers import compat, data, devices, models
from helpers.dist import distributed, report
from helpers.measure import held_state_bytes
from helpers.recipes import zero
from helpers.recipes.fsdp import apply_fsdp
from helpers.recipes.traffic import Traffic
from helpers.training import Timeline, flat_params, median

VARIANTS = ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3", "FSDP2")


def _build(variant: str, net, ctx, lr: float, mesh):
    """(module to call, optimizer with step/zero_grad, every tensor that is a parameter, final weights)."""
    if variant == "DDP":
        ddp = DDP(net, device_ids=ctx.device_ids, gradient_as_bucket_view=True)
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)  # DDP's own, in Python: Traffic sees it
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        return ddp, opt, lambda: list(net.parameters()), lambda: flat_params(net)
    if variant == "FSDP2":
        apply_fsdp(net, mesh)
        opt = torch.optim.Adam(net.parameters(), lr=lr)
        return net, opt, lambda: list(net.parameters()), lambda: torch.cat(
            [p.detach().full_tensor().reshape(-1) for p in net.parameters()]).cpu()
    opt = zero.OPTIMIZERS[variant](net, lr=lr)
    final = opt.full_parameters if variant == "ZeRO-3" else (lambda: flat_params(net))
    return net, opt, lambda: list(net.parameters()) + opt.shards, final


def compare(steps: int = 4, batch_size: int = 32, model: str = "wide-512x4", lr: float = 1e-3,
            variants: tuple = VARIANTS, seed: int = 0) -> dict:
    """Every variant trained ``steps`` Adam steps from the same weights on the same batches."""
    with distributed(seed) as ctx:
        x_all, y_all = data.load(train=True).tensors
        plan = data.batch_plan(len(y_all), ctx.world_size, batch_size, steps, seed)
        batches = [(x_all[idx[ctx.rank]].to(ctx.device), y_all[idx[ctx.rank]].to(ctx.device)) for idx in plan]
        torch.manual_seed(seed)
        out = {"rank": ctx.rank, "p": ctx.world_size, "backend": ctx.backend, "runs": {},
               "initial": flat_params(models.build(model))}
        mesh, clock = devices.mesh(ctx.device, (ctx.world_size,)), Timeline(ctx.device)
        for i, variant in enumerate(variants):
            torch.manual_seed(seed)  # the same initial weights for every variant
            net = models.build(model).to(ctx.device)
            n, n_tensors = models.n_params(net), len(list(net.parameters()))
            module, opt, params, final = _build(variant, net, ctx, lr, mesh)
            times = []
            for step, (x, y) in enumerate(batches):
                with Traffic() as traffic:
                    start = clock.now()
                    F.cross_entropy(module(x), y).backward()
                    held = held_state_bytes(params(), getattr(opt, "optimizer", opt))
                    opt.step()
                    opt.zero_grad()
                    times.append(clock.now() - start)
                report(i * steps + step + 1, len(variants) * steps, variant=i)
            out["runs"][variant] = {
                "params": final(), "held": held, "calls": traffic.calls, "wire_bytes": traffic.wire_bytes,
                "step_s": median(times[1:] or times),
                "peak_gathered": getattr(opt, "peak_bytes", None)}
        out.update(n_params=n, n_tensors=n_tensors, param_bytes=4 * n,
                   largest_layer_bytes=max(4 * models.n_params(m) for m in net.modules()
                                           if isinstance(m, torch.nn.Linear)))
        return out


def collectives(sizes: tuple = (2**16, 2**18, 2**20, 2**22, 2**24), repeats: int = 4, seed: int = 0) -> dict:
    """all_reduce, all_gather and reduce_scatter of float32 messages of ``sizes`` bytes, over gloo:
    median seconds and the bytes each rank wrote to its sockets (``Traffic``)."""
    with distributed(seed) as ctx:
        # On GPUs the default group is NCCL; this probe is about gloo's algorithms, and its bytes
        # must cross the sockets to be counted, so it makes a gloo group, whose tensors are on the CPU.
        group = None if ctx.backend == "gloo" else dist.new_group(backend="gloo")
        device = devices.of_group(group)
        p, rows, clock = ctx.world_size, [], Timeline(device)
        for m in sizes:
            n = m // 4
            full, part = torch.ones(n, device=device), torch.ones(n // p, device=device)
            calls = {"all_reduce": lambda: dist.all_reduce(full, group=group),
                     "all_gather": lambda: compat.all_gather_single(full, part, group),
                     "reduce_scatter": lambda: compat.reduce_scatter_single(part, full, group)}
            for op, call in calls.items():
                seconds = []
                for _ in range(repeats + 1):
                    dist.barrier(group=group)
                    with Traffic() as traffic:
                        start = clock.now()
                        call()
                        seconds.append(clock.now() - start)
                rows.append({"op": op, "bytes": n * 4, "seconds": median(seconds[1:]),
                             "wire_bytes": traffic.wire_bytes})
        return {"rank": ctx.rank, "p": p, "backend": str(dist.get_backend(group)), "rows": rows}
