"""The workloads of chapter 5.4: the article's checkpoints, and ones that survive a crash.

    helpers.launch(train, folder, nprocs=2, steps=60, crash_at=37)     # dies at step 37
    helpers.launch(train, folder, nprocs=2, steps=60, resume="exact")  # carries on from step 30
    torchrun --nproc-per-node 2 -m helpers.run checkpointing.train --folder ckpts --resume exact

The article's own functions are ``helpers.article``; the faults caused from the
notebook's own process (a save killed mid-write, files that carry code) are
``helpers.probes.faults``.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import psutil
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from helpers import amp, checkpoint, data, devices
from helpers.article import article_load_checkpoint_ddp, article_save_checkpoint_ddp
from helpers.checkpoint import ResumableSampler
from helpers.dist import distributed, report
from helpers.models import SimpleModel, simple_with_dropout
from helpers.probes.faults import read_version
from helpers.training import snapshot, train_step


# --- Training that checkpoints, crashes, and resumes -----------------------------------------

CRASHES = ("sigkill", "exception", "node")


def crash(how: str, message: str) -> None:
    """End this rank: "sigkill" like a power cut (no ``finally`` runs, nothing is flushed),
    "exception" by raising, like a bug, or "node": the whole node goes, the torchrun agent
    that started this rank and every rank under it, so no agent is left to restart them."""
    if how == "exception":
        raise RuntimeError(message)
    if how == "node":
        agent = psutil.Process().parent()
        if not any(w in " ".join(agent.cmdline()) for w in ("torchrun", "torch.distributed.run")):
            raise RuntimeError("crash_with='node' kills this rank's torchrun agent, and this rank was "
                               f"not started by one (its parent is {agent.name()!r})")
        for p in [agent, *agent.children(recursive=True)]:
            if p.pid != os.getpid():
                p.kill()
    os.kill(os.getpid(), signal.SIGKILL)


def train(folder: str, steps: int = 60, save_every: int = 10, crash_at: int | None = None,
          crash_rank: int | None = None, crash_with: str = "sigkill",
          resume: str | None = None, article_too: bool = False, batch_size: int = 64,
          lr: float = 0.05, momentum: float = 0.9, dropout: float = 0.1, seed: int = 0,
          use_amp: bool = False) -> dict:
    """DDP training of the article's model, with a checkpoint in ``folder`` every ``save_every`` steps.

    crash_at:    every rank (or only ``crash_rank``) fails right after this step (``crash``).
    resume:      None starts afresh; "exact" loads the newest ``helpers.checkpoint`` file;
                 "elastic" does the same when the world size is the checkpoint's, and at
                 another world size loads the model and optimizer and starts the saved
                 epoch over on the new split of the data (no other order exists at that size);
                 "article" loads ``article.pt`` the article's way (model, optimizer, epoch)
                 and starts that epoch from its first batch.
    article_too: also write the article's checkpoint (``article.pt``) at every save.
    """
    with distributed(seed) as ctx:
        model = DDP(simple_with_dropout(dropout).to(ctx.device), device_ids=ctx.device_ids)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        dtype = amp.autocast_dtype(ctx.device) if use_amp else None
        scaler = amp.grad_scaler(ctx.device, enabled=use_amp)
        dataset = data.load(train=True)
        sampler = ResumableSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
        # The loader gets its own generator: iter(loader) would otherwise draw from the global
        # RNG that dropout uses, and a resumed run calls iter() at a different moment.
        loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler,
                            generator=torch.Generator().manual_seed(seed))
        folder = Path(folder)
        if ctx.is_main:
            folder.mkdir(parents=True, exist_ok=True)
            checkpoint.remove_stray_temp_files(folder)  # left by a save that was killed

        if crash_with not in CRASHES:
            raise ValueError(f"crash_with is one of {', '.join(map(repr, CRASHES))}, got {crash_with!r}")
        step, losses, resumed_from = 0, [], None
        if resume in ("exact", "elastic") and checkpoint.latest(folder):
            path = checkpoint.latest(folder)
            same = resume == "exact" or checkpoint.read(path, "cpu")["world_size"] == ctx.world_size
            r = checkpoint.load(path, model=model, optimizer=optimizer, scaler=scaler,
                                sampler=sampler if same else None)
            if not same:
                sampler.set_epoch(r.epoch)
            # Each rank's own losses; at another world size no rank had this one's past.
            step, losses, resumed_from = r.step, list(r.extra["losses"][ctx.rank]) if same else [], r.step
        elif resume == "article" and (folder / "article.pt").exists():
            epoch = article_load_checkpoint_ddp(model, optimizer, folder / "article.pt")
            sampler.set_epoch(epoch)
            step = resumed_from = epoch * len(loader)  # the article keeps no step: epoch start
        first_step = step + 1 - len(losses)

        while step < steps:
            done = sampler.start  # samples of this epoch trained on before a resume
            for x, target in loader:
                losses.append(train_step(model, optimizer, x.to(ctx.device), target.to(ctx.device),
                                         scaler, dtype))
                step, done = step + 1, done + len(x)
                report(step, steps, loss=losses[-1])
                if step % save_every == 0:
                    histories = [None] * ctx.world_size  # every rank's own losses, not rank 0's alone
                    dist.all_gather_object(histories, losses)
                    checkpoint.save(folder / f"step_{step:06d}.pt", model=model, optimizer=optimizer,
                                    scaler=scaler, step=step, epoch=sampler.epoch,
                                    sampler_state=sampler.state_dict(done), extra={"losses": histories})
                    if article_too:
                        article_save_checkpoint_ddp(model, optimizer, sampler.epoch,
                                                    folder / "article.pt", ctx.rank)
                if step == crash_at and crash_rank in (None, ctx.rank):
                    crash(crash_with, f"rank {ctx.rank} failed on purpose after step {step}")
                if step == steps:
                    break
            else:
                sampler.set_epoch(sampler.epoch + 1)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "steps": step,
                "resumed_from": resumed_from, "first_step": first_step, "losses": losses,
                "state": snapshot(model)}


# --- Loading without a barrier ---------------------------------------------------------------

def load_race(folder: str, barrier: bool, rounds: int = 3, megabytes: int = 16) -> dict:
    """Rank 0 saves versions 1..rounds; after each save, every rank loads the file at once.

    ``barrier=False`` is the article's order: nothing makes the other ranks wait for
    rank 0's write, so they read whatever is on disk at that instant.
    """
    with distributed() as ctx:
        path = Path(folder) / "ckpt.pt"
        weights = torch.empty(megabytes * 2**20 // 4)
        seen = []
        for version in range(1, rounds + 1):
            if ctx.is_main:
                weights.fill_(float(version))
                checkpoint.atomic_save(checkpoint.seal({"version": version, "weights": weights}), path)
            if barrier:
                dist.barrier()
            seen.append(read_version(path) if path.exists() else None)
            dist.barrier()  # start the next round together
        return {"rank": ctx.rank, "seen": seen}


# --- Sharded checkpoints: save at p ranks, load at any other p --------------------------------

def _sharded_model(ctx) -> nn.Module:
    """SimpleModel with every parameter split in row blocks across the ranks (FSDP2)."""
    model = SimpleModel().to(ctx.device)
    if ctx.world_size > 1:
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=devices.mesh(ctx.device, (ctx.world_size,)))
    return model


def _full_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The whole model and optimizer state, gathered on rank 0 (collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict
    msd, osd = get_state_dict(model, optimizer,
                              options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"model": msd, "optimizer": osd.get("state", {})}


def _local_rows(model: nn.Module) -> dict:
    """How many rows of each parameter this rank holds."""
    return {k: (v.to_local() if hasattr(v, "to_local") else v).shape[0]
            for k, v in model.state_dict().items()}


def sharded_save(folder: str, steps: int = 3, batch_size: int = 64, lr: float = 1e-3,
                 seed: int = 0) -> dict:
    """Train a few AdamW steps sharded over the ranks, then save with torch.distributed.checkpoint."""
    with distributed(seed) as ctx:
        model = _sharded_model(ctx)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        x, y = data.load(train=True).tensors
        for s in range(steps):  # each rank its own slice of the global batch
            i = (s * ctx.world_size + ctx.rank) * batch_size
            loss = nn.functional.cross_entropy(model(x[i:i + batch_size].to(ctx.device)),
                                               y[i:i + batch_size].to(ctx.device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        checkpoint.save_sharded(folder, model, optimizer)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "rows": _local_rows(model),
                "files": sorted(p.name for p in Path(folder).iterdir()),
                **_full_state(model, optimizer)}


def sharded_load(folder: str, lr: float = 1e-3, seed: int = 1) -> dict:
    """Load a sharded checkpoint into this job's layout: plain at 1 rank, sharded at more."""
    with distributed(seed) as ctx:  # another seed: the loaded weights must come from the file
        model = _sharded_model(ctx)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        checkpoint.load_sharded(folder, model, optimizer)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "rows": _local_rows(model),
                **_full_state(model, optimizer)}
