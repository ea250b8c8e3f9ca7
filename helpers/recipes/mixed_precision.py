"""Mixed precision in N ranks (chapter 5.2): the article's AMP loop under DDP, and why the
GradScaler's state belongs in the checkpoint::

    helpers.launch(amp_resume, nprocs=2, path="/tmp/amp.pt")      # in a notebook
    torchrun --nproc-per-node 2 -m helpers.run mixed_precision.amp_resume --path /tmp/amp.pt

The probes that run in one process (underflow, the scaler's dynamics, autocast's op
lists, fp32 against autocast) are ``helpers.probes.precision``.
"""
from __future__ import annotations

import os
import tempfile

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from helpers import amp, checkpoint, data
from helpers.dist import distributed, report
from helpers.models import SimpleModel
from helpers.training import snapshot, train_step


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
                    loss = train_step(model, optimizer, x.to(ctx.device), y.to(ctx.device), scaler, torch.float16)
                    trace["scale"].append(before)
                    trace["skipped"].append(scaler.get_scale() < before)
                    trace["loss"].append(loss)
                    done[0] += 1
                    report(done[0], total, loss=loss, scale=before)
            return trace

        model, optimizer, scaler = build()
        head = run(model, optimizer, scaler, 0, stop_at)
        checkpoint.save(path, model=model, optimizer=optimizer, scaler=scaler, epoch=stop_at)
        saved_scaler = scaler.state_dict()
        runs = {"straight": run(model, optimizer, scaler, stop_at, epochs)}
        final = {"straight": snapshot(model)}
        for name, with_scaler in (("resumed", True), ("fresh scaler", False)):
            model, optimizer, scaler = build()
            resume = checkpoint.load(path, model=model, optimizer=optimizer,
                                     scaler=scaler if with_scaler else None)
            if with_scaler:
                loaded_scaler = scaler.state_dict()
            runs[name] = run(model, optimizer, scaler, resume.epoch, epochs)
            final[name] = snapshot(model)
        on_disk = checkpoint.read(path)
        return {"rank": ctx.rank, "world_size": ctx.world_size, "head": head, "runs": runs,
                "final": final, "saved_scaler": saved_scaler, "scaler_on_disk": on_disk["scaler"],
                "loaded_scaler": loaded_scaler, "checkpoint_keys": sorted(on_disk), "stop_at": stop_at,
                "policy_scaler_state": amp.grad_scaler(ctx.device).state_dict()}
