"""The workloads of chapter 5.4: the article's checkpoints, and ones that survive a crash.

    helpers.launch(train, folder, nprocs=2, steps=60, crash_at=37)     # dies at step 37
    helpers.launch(train, folder, nprocs=2, steps=60, resume="exact")  # carries on from step 30
    torchrun --nproc-per-node 2 -m helpers.run checkpointing.train --folder ckpts --resume exact

The article's own functions are kept at the top, as written (its prints in
English), so the chapter can run them beside ``helpers.checkpoint``.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from helpers import amp as mixed
from helpers import checkpoint, data
from helpers.checkpoint import ResumableSampler
from helpers.dist import distributed, report
from helpers.models import SimpleModel


# --- The article's section 5.4, as written ---------------------------------------------------

def article_save_checkpoint(model, optimizer, epoch, path):
    """Save a checkpoint (the article's)."""
    checkpoint = {
        'epoch': epoch,
        'model_state_dict': model.state_dict(),
        'optimizer_state_dict': optimizer.state_dict(),
    }
    torch.save(checkpoint, path)
    print(f"checkpoint saved to {path}")


def article_load_checkpoint(model, optimizer, path):
    """Load a checkpoint (the article's)."""
    checkpoint = torch.load(path)
    model.load_state_dict(checkpoint['model_state_dict'])
    optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
    epoch = checkpoint['epoch']
    print(f"checkpoint loaded from {path}, training continues from epoch {epoch}")
    return epoch


def article_save_checkpoint_ddp(model, optimizer, epoch, path, rank):
    """Save a checkpoint under DDP, on rank 0 only (the article's)."""
    if rank == 0:
        # unwrap DDP before saving
        if isinstance(model, DDP):
            model_state_dict = model.module.state_dict()
        else:
            model_state_dict = model.state_dict()

        checkpoint = {
            'epoch': epoch,
            'model_state_dict': model_state_dict,
            'optimizer_state_dict': optimizer.state_dict(),
        }
        torch.save(checkpoint, path)
        print(f"checkpoint saved to {path}")


def article_load_checkpoint_ddp(model, optimizer, path):
    """Load a checkpoint under DDP (the article's)."""
    checkpoint = torch.load(path)

    # load into the DDP model
    if isinstance(model, DDP):
        model.module.load_state_dict(checkpoint['model_state_dict'])
    else:
        model.load_state_dict(checkpoint['model_state_dict'])

    optimizer.load_state_dict(checkpoint['optimizer_state_dict'])
    epoch = checkpoint['epoch']
    print(f"checkpoint loaded from {path}, training continues from epoch {epoch}")
    return epoch


# --- Training that checkpoints, crashes, and resumes -----------------------------------------

def build_model(dropout: float = 0.1) -> nn.Module:
    """The article's SimpleModel, with dropout after the hidden layer so that the RNG matters."""
    model = SimpleModel()
    if dropout:
        model.fc.insert(2, nn.Dropout(dropout))
    return model


def train(folder: str, steps: int = 60, save_every: int = 10, crash_at: int | None = None,
          resume: str | None = None, article_too: bool = False, batch_size: int = 64,
          lr: float = 0.05, momentum: float = 0.9, dropout: float = 0.1, seed: int = 0,
          amp: bool = False) -> dict:
    """DDP training of the article's model, with a checkpoint in ``folder`` every ``save_every`` steps.

    crash_at:    every rank SIGKILLs itself right after this step, like a power cut:
                 no ``finally`` runs, nothing is flushed.
    resume:      None starts afresh; "exact" loads the newest ``helpers.checkpoint`` file;
                 "article" loads ``article.pt`` the article's way (model, optimizer, epoch)
                 and starts that epoch from its first batch.
    article_too: also write the article's checkpoint (``article.pt``) at every save.
    """
    with distributed(seed) as ctx:
        model = DDP(build_model(dropout).to(ctx.device), device_ids=ctx.device_ids)
        criterion = nn.CrossEntropyLoss()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        scaler = mixed.grad_scaler(ctx.device, enabled=amp)
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

        step, losses, resumed_from = 0, [], None
        if resume == "exact" and checkpoint.latest(folder):
            r = checkpoint.load(checkpoint.latest(folder), model=model, optimizer=optimizer,
                                scaler=scaler, sampler=sampler)
            step, losses, resumed_from = r.step, list(r.extra["losses"]), r.step
        elif resume == "article" and (folder / "article.pt").exists():
            epoch = article_load_checkpoint_ddp(model, optimizer, folder / "article.pt")
            sampler.set_epoch(epoch)
            step = resumed_from = epoch * len(loader)  # the article keeps no step: epoch start
        first_step = step + 1 - len(losses)

        while step < steps:
            done = sampler.start  # samples of this epoch trained on before a resume
            for x, target in loader:
                x, target = x.to(ctx.device), target.to(ctx.device)
                with mixed.autocast(ctx.device, enabled=amp):
                    loss = criterion(model(x), target)
                optimizer.zero_grad()
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                step, done = step + 1, done + len(x)
                losses.append(loss.item())
                report(step, steps, loss=losses[-1])
                if step % save_every == 0:
                    checkpoint.save(folder / f"step_{step:06d}.pt", model=model, optimizer=optimizer,
                                    scaler=scaler, step=step, epoch=sampler.epoch,
                                    sampler_state=sampler.state_dict(done), extra={"losses": losses})
                    if article_too:
                        article_save_checkpoint_ddp(model, optimizer, sampler.epoch,
                                                    folder / "article.pt", ctx.rank)
                if step == crash_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                if step == steps:
                    break
            else:
                sampler.set_epoch(sampler.epoch + 1)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "steps": step,
                "resumed_from": resumed_from, "first_step": first_step, "losses": losses,
                "state": {k: v.detach().cpu().clone() for k, v in model.module.state_dict().items()}}


# --- A save killed mid-write -------------------------------------------------------------------

def save_versions(path: str, megabytes: int = 32, first: int = 1, atomic: bool = True) -> None:
    """Save versions first, first+1, ... of a checkpoint to ``path`` until killed.

    Version v holds ``weights`` filled with v, so a reader can tell a whole file
    from a mix. ``atomic=False`` is the article's plain ``torch.save(ckpt, path)``.
    """
    weights = torch.empty(megabytes * 2**20 // 4)
    for version in itertools.count(first):
        weights.fill_(float(version))
        sealed = checkpoint.seal({"version": version, "weights": weights})
        if atomic:
            checkpoint.atomic_save(sealed, path)
        else:
            torch.save(sealed, path)


def read_version(path: str | os.PathLike) -> int:
    """The version a ``save_versions`` file holds, after checking it is whole and unmixed."""
    ckpt = checkpoint.read(path)
    version = ckpt["version"]
    if not bool((ckpt["weights"] == version).all()):
        raise checkpoint.CorruptCheckpoint(f"{path} mixes versions")
    return version


def start_saver(path: str | os.PathLike, megabytes: int = 32, first: int = 1,
                atomic: bool = True) -> multiprocessing.Process:
    """Run ``save_versions`` in a child process (forked from the torch-preloaded forkserver)."""
    from helpers.launch import PRELOAD
    multiprocessing.set_forkserver_preload(PRELOAD)  # as launch() does: no-op once it runs
    proc = multiprocessing.get_context("forkserver").Process(
        target=save_versions, args=(str(path), megabytes, first, atomic), daemon=True)
    proc.start()
    return proc


def _writing(path: Path, atomic: bool, largest: int) -> bool:
    """Is a save of a version after the first in progress right now?"""
    if atomic:  # a whole file under the name, and the next one growing beside it
        return path.exists() and any(p.stat().st_size > 0 for p in checkpoint.stray_temp_files(path.parent))
    return 0 < path.stat().st_size < largest if path.exists() else False


def kill_mid_write(path: str | os.PathLike, atomic: bool = True, megabytes: int = 32,
                   tries: int = 5, timeout: float = 30.0) -> dict:
    """SIGKILL a process while it is writing a checkpoint; return what it left on disk.

    Waits until a save after the first is under way, then kills the saver. If the
    write finished in the instant between looking and killing, it tries again.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(1, tries + 1):
        for p in [path, *checkpoint.stray_temp_files(path.parent)]:
            p.unlink(missing_ok=True)
        proc, largest = start_saver(path, megabytes, atomic=atomic), 0
        deadline = time.monotonic() + timeout
        try:
            while not _writing(path, atomic, largest):
                if not proc.is_alive():
                    raise RuntimeError(f"the saver died on its own (exit code {proc.exitcode})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the saver did not start a second save in {timeout:g} s")
                if path.exists():
                    largest = max(largest, path.stat().st_size)
                time.sleep(0.0005)
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            proc.join()
        temps = checkpoint.stray_temp_files(path.parent)
        mid_write = bool(temps) if atomic else path.stat().st_size < largest
        if mid_write:
            return {"attempts": attempt, "exitcode": proc.exitcode, "file_bytes": path.stat().st_size,
                    "whole_bytes": largest or path.stat().st_size,
                    "temp_files": {p.name: p.stat().st_size for p in temps}}
    raise RuntimeError(f"no kill landed mid-write in {tries} tries")


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
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        fully_shard(model, mesh=init_device_mesh(ctx.device.type, (ctx.world_size,)))
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


# --- Bad input -----------------------------------------------------------------------------

class RunsCode:
    """An object whose unpickling runs ``code``: what a hostile checkpoint carries."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code, {})  # pickle stores "call exec with this string"


def write_code_carrying_checkpoint(path: str | os.PathLike, marker: str | os.PathLike) -> Path:
    """A checkpoint that looks like any other, plus a payload that writes ``marker`` when unpickled."""
    code = f"open({str(marker)!r}, 'w').write('written while a checkpoint was unpickled')"
    torch.save({"epoch": 3, "model_state_dict": SimpleModel().state_dict(),
                "note": RunsCode(code)}, path)
    return Path(path)


def write_code_carrying_metadata(folder: str | os.PathLike, marker: str | os.PathLike) -> Path:
    """Replace a sharded checkpoint's ``.metadata`` with a pickle that writes ``marker``."""
    import pickle
    code = f"open({str(marker)!r}, 'w').write('written while DCP metadata was unpickled')"
    meta = Path(folder) / ".metadata"
    meta.write_bytes(pickle.dumps(RunsCode(code)))
    return meta
