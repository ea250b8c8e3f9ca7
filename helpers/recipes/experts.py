"""Mixture of experts and expert parallelism (chapter 8.3): the GPT with ``helpers.moe`` in its MLP slot.

* ``train``: one process trains the MoE GPT, with and without the load-balancing loss, and keeps
  every step's tokens per expert.
* ``ep_equality``: the experts split over the ranks; each rank routes its own tokens and an
  ``all_to_all_single`` with per-rank split sizes sends each token to the rank of its expert and
  brings the output back. Checked against one process running the whole batch.
* ``ep_dp_train``: EP x DP on a 2 x 2 mesh, trained, against one process.
* ``alltoall_sweep``: chapter 4.2's timing of collectives, for all_to_all beside all_reduce.

Launch from a cell, or under the torchrun CLI::

    helpers.launch(ep_equality, nprocs=2)
    torchrun --standalone --nproc-per-node 2 -m helpers.run experts.ep_equality
"""
from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist
import torch.nn as nn

from helpers import devices, gpt, moe, text
from helpers.dist import distributed, report
from helpers.recipes import collectives

KB = 1024
SIZES = [4 * KB * 4 ** i for i in range(6)]  # 4 KB ... 4 MB: both ends of T = L + M/B on gloo


# --- The exchange: all_to_all with split sizes, and its backward -------------------------------

class _AllToAll(torch.autograd.Function):
    """Rows out to every rank, ``send[j]`` of them to rank j; ``recv[j]`` back from rank j. The
    gradient goes home the same way reversed: an all_to_all with the two lists swapped."""

    @staticmethod
    def forward(ctx, x, recv: list[int], send: list[int], group):
        ctx.recv, ctx.send, ctx.group = recv, send, group
        out = x.new_empty((sum(recv), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), recv, send, group=group)
        LOG.append(("forward", send, x.shape[1:].numel() * x.element_size()))
        return out

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_empty((sum(ctx.send), *grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.send, ctx.recv, group=ctx.group)
        LOG.append(("backward", ctx.recv, grad.shape[1:].numel() * grad.element_size()))
        return out, None, None, None


LOG: list[tuple[str, list[int], int]] = []  # (phase, rows sent to each rank, bytes per row), this process


def ep_exchange(layer: moe.MoE, rows: torch.Tensor, counts: torch.Tensor, group) -> torch.Tensor:
    """Expert parallelism's dispatch and combine for one group of tokens.

    ``rows`` are sorted by expert and rank r holds experts r*E/n ... (r+1)*E/n - 1, so the rows for
    each rank are contiguous: the counts per expert, summed per rank, are the split sizes. The
    counts go first (an all_to_all of E integers), so each rank knows how many rows it will get.
    """
    n, local = dist.get_world_size(group), len(layer.experts)
    mine = torch.empty_like(counts)
    dist.all_to_all_single(mine, counts, group=group)  # (n * local,): source-major, my experts' counts
    mine = mine.view(n, local)
    send, recv = counts.view(n, local).sum(1).tolist(), mine.sum(1).tolist()
    got = _AllToAll.apply(rows, recv, send, group)  # from rank 0, then rank 1, ...: each by expert
    # Regroup by local expert across the sources, run the experts, and undo the regrouping.
    expert_of_row = torch.arange(local, device=rows.device).repeat(n).repeat_interleave(mine.flatten())
    order = torch.argsort(expert_of_row, stable=True)
    y = torch.empty_like(got).index_copy(0, order, moe.run_experts(layer.experts, got[order],
                                                                   mine.sum(0).tolist()))
    return _AllToAll.apply(y, send, recv, group)


def apply_ep(model: nn.Module, group=None) -> nn.Module:
    """Keep this rank's E/n experts in every MoE layer and route through ``ep_exchange`` (torchtitan's
    ``apply_*`` shape: the model, its mesh dimension's group, nothing else)."""
    n, r = dist.get_world_size(group), dist.get_rank(group)
    for layer in moe.moe_layers(model):
        if layer.n_experts % n:
            raise ValueError(f"{layer.n_experts} experts do not split over {n} ranks evenly")
        local = layer.n_experts // n
        layer.first = r * local
        layer.experts = nn.ModuleList(list(layer.experts)[r * local:(r + 1) * local])
        layer.exchange = partial(ep_exchange, group=group)
    return model


def global_names(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters under the unsplit model's names: a local expert i is expert ``first + i``."""
    out = {}
    for name, p in model.named_parameters():
        parts = name.split(".")
        if "experts" in parts:
            at = parts.index("experts") + 1
            layer = model.get_submodule(".".join(parts[:at - 1]))
            parts[at] = str(int(parts[at]) + getattr(layer, "first", 0))
        out[".".join(parts)] = p
    return out


def moe_gpt(model: str, experts: int, k: int, capacity_factor: float | None, groups: int, seed: int,
            device: torch.device) -> gpt.GPT:
    torch.manual_seed(seed)
    return moe.to_moe(gpt.build(model), experts, k, capacity_factor, groups).to(device)


def _step(model, x, y, alpha: float, scale: float = 1.0):
    """Forward and backward of (cross-entropy + alpha * aux) * scale; (loss, aux) unscaled."""
    logits, loss = model(x, y)
    aux = moe.aux_loss(model)
    ((loss + alpha * aux) * scale).backward()
    return logits.detach(), loss.detach(), aux.detach()


# --- Single process: train, with and without the auxiliary loss ------------------------------

def train(alphas: tuple[float, ...] = (0.0, 0.01), steps: int = 80, experts: int = 4, k: int = 2,
          capacity_factor: float = 1.25, batch: int = 8, lr: float = 1e-3, model: str = "gpt-tiny",
          seed: int = 0) -> dict:
    """The MoE GPT trained from one seed on the same batches once per ``alpha``: each run's losses,
    aux losses, and every step's tokens per expert per layer before ('loads') and after ('counts')
    the capacity cut."""
    with distributed(seed) as ctx:
        ids, _ = text.split()
        seq = gpt.CONFIGS[model].seq
        data = [(x.to(ctx.device), y.to(ctx.device)) for x, y in text.batches(ids, batch, seq, steps, seed)]
        runs = {}
        for i, alpha in enumerate(alphas):
            net = moe_gpt(model, experts, k, capacity_factor, 1, seed, ctx.device)
            opt = torch.optim.AdamW(net.parameters(), lr=lr)
            losses, auxes, loads, counts = [], [], [], []
            for step, (x, y) in enumerate(data):
                _, loss, aux = _step(net, x, y, alpha)
                opt.step()
                opt.zero_grad(set_to_none=True)
                per = moe.loads(net)
                losses.append(loss.item()), auxes.append(aux.item())
                loads.append(per["loads"].tolist()), counts.append(per["counts"].tolist())
                report(i * steps + step + 1, len(alphas) * steps, loss=loss.item())
            runs[alpha] = {"losses": losses, "aux": auxes, "loads": loads, "counts": counts}
        return {"runs": runs, "tokens": batch * seq, "experts": experts, "k": k,
                "capacity_factor": capacity_factor, "layers": gpt.CONFIGS[model].layers}


# --- Expert parallel against one process --------------------------------------------------------

def _grads(named: dict[str, nn.Parameter]) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().cpu() for n, p in named.items() if p.grad is not None}


def ep_equality(experts: int = 4, k: int = 2, capacity_factor: float | None = 1.25, batch: int = 4,
                model: str = "gpt-tiny", alpha: float = 0.01, seed: int = 0) -> dict:
    """One forward and backward of the MoE GPT with its experts split over the n ranks, each rank
    with its own ``batch`` sequences, beside one process running all n*batch in n groups. The
    non-expert gradients are summed over the ranks (as DDP would); an expert's are whole on its rank."""
    with distributed(seed) as ctx:
        n, rank = ctx.world_size, ctx.rank
        ids, _ = text.split()
        seq = gpt.CONFIGS[model].seq
        x, y = (t.to(ctx.device) for t in text.batch(ids, n * batch, seq, torch.Generator().manual_seed(seed)))
        ref = moe_gpt(model, experts, k, capacity_factor, n, seed, ctx.device)
        ref_logits, ref_loss, ref_aux = _step(ref, x, y, alpha)
        ref_loads = moe.loads(ref)
        ep = apply_ep(moe_gpt(model, experts, k, capacity_factor, 1, seed, ctx.device))
        LOG.clear()
        mine = slice(rank * batch, (rank + 1) * batch)
        # Each rank's share of the global mean: the summed gradients are the whole batch's.
        logits, loss, aux = _step(ep, x[mine], y[mine], alpha, scale=1.0 / n)
        named = global_names(ep)
        for name, p in named.items():
            if ".experts." not in name:
                dist.all_reduce(p.grad if p.grad is not None else torch.zeros_like(p))
        losses = torch.stack([loss, aux])
        dist.all_reduce(losses)
        grads, ref_grads = _grads(named), _grads(dict(ref.named_parameters()))
        gaps = {"logits": float((logits - ref_logits[mine]).abs().max()),
                "loss": abs(losses[0].item() / n - ref_loss.item()), "aux": abs(losses[1].item() / n - ref_aux.item()),
                "grads": max(float((g - ref_grads[name]).abs().max()) for name, g in grads.items())}
        return {"rank": rank, "n": n, "hidden": ep.cfg.hidden, "tokens": batch * seq, "gaps": gaps,
                "experts": experts, "k": k, "capacity_factor": capacity_factor,
                "max_gap": max(gaps.values()),
                "held": sorted(grads), "ref_params": sorted(ref_grads), "loss": ref_loss.item(),
                "log": list(LOG), "counts": moe.loads(ep)["counts"].tolist(),
                "ref_counts": ref_loads["counts"].tolist(), "ref_loads": ref_loads["loads"].tolist()}


# --- EP x DP on a 2 x 2 mesh ------------------------------------------------------------------

def ep_dp_train(steps: int = 3, experts: int = 4, k: int = 2, capacity_factor: float | None = 1.25,
                batch: int = 2, lr: float = 1e-3, alpha: float = 0.01, model: str = "gpt-tiny",
                dp: int = 2, seed: int = 0) -> dict:
    """``dp`` replicas of an expert-parallel group of world/dp ranks: experts split over ``ep``
    (a row of the mesh), copied over ``dp`` (a column). Each rank trains on its own ``batch``
    sequences; shared weights' gradients are summed over every rank, an expert's over its column."""
    with distributed(seed) as ctx:
        world, rank = ctx.world_size, ctx.rank
        if world % dp:
            raise ValueError(f"dp = {dp} does not divide the {world} ranks")
        mesh = devices.mesh(ctx.device, (dp, world // dp), ("dp", "ep"))
        ids, _ = text.split()
        seq = gpt.CONFIGS[model].seq
        data = [(x.to(ctx.device), y.to(ctx.device)) for x, y in text.batches(ids, world * batch, seq, steps, seed)]
        ref = moe_gpt(model, experts, k, capacity_factor, world, seed, ctx.device)
        net = apply_ep(moe_gpt(model, experts, k, capacity_factor, 1, seed, ctx.device), mesh["ep"].get_group())
        named = global_names(net)
        opts = [torch.optim.AdamW(m.parameters(), lr=lr) for m in (ref, net)]
        mine = slice(rank * batch, (rank + 1) * batch)
        ref_losses, losses = [], []
        for step, (x, y) in enumerate(data):
            ref_losses.append(_step(ref, x, y, alpha)[1].item())
            loss = _step(net, x[mine], y[mine], alpha, scale=1.0 / world)[1]
            for name, p in named.items():
                if p.grad is None:  # every rank must join every all_reduce, used or not
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad, group=mesh["dp"].get_group() if ".experts." in name else None)
            dist.all_reduce(loss)
            losses.append(loss.item() / world)
            for opt in opts:
                opt.step()
                opt.zero_grad(set_to_none=True)
            report(step + 1, steps, loss=losses[-1])
        ref_w = dict(ref.named_parameters())
        return {"rank": rank, "dp_rank": mesh["dp"].get_local_rank(), "ep_rank": mesh["ep"].get_local_rank(),
                "mesh": {d: dist.get_process_group_ranks(mesh[d].get_group()) for d in ("dp", "ep")},
                "losses": losses, "ref_losses": ref_losses, "experts_held": sorted(
                    {int(n.split(".")[4]) for n in named if ".experts." in n}),
                "weight_gap": max(float((p - ref_w[n]).detach().abs().max()) for n, p in named.items()),
                "moved": max(float((p - q).detach().abs().max()) for p, q in zip(
                    ref.parameters(), moe_gpt(model, experts, k, capacity_factor, world, seed, ctx.device).parameters()))}


# --- all_to_all's cost, timed as chapter 4.2 times all_reduce ---------------------------------

def alltoall_sweep(sizes: list[int] = SIZES, budget_bytes: int = 64 * 2**20, min_repeats: int = 5,
                   max_repeats: int = 30, warmup: int = 2) -> dict:
    """``collectives.sweeps`` of all_to_all and all_reduce of the same message sizes (M bytes of float32
    per rank), each size's two calls timed one after the other, so both are priced on the same links
    at the same moments."""
    with distributed() as ctx:
        return collectives.sweeps(ctx, ("all_to_all", "all_reduce"), sizes, budget_bytes, min_repeats, max_repeats,
                                  warmup, copy_bytes=4 * 2**20)
