"""The article's own code, kept as written so that the chapters can run it and the errata can point at it.

Comments and prints are translated; nothing else is changed. Each piece is run by
the chapter that corrects it: ``article_setup`` in 5.1, ``ModelParallelModel`` in
3.2 and 5.3 (its two devices made arguments, the one change, so that it runs at
all without two GPUs), the checkpoint functions in 5.4.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


# --- Section 5.1: the setup ------------------------------------------------------------------

def article_setup() -> tuple[int, int]:
    """The article's ``setup()``, verbatim: NCCL unconditionally."""
    rank = int(os.environ['RANK'])
    world_size = int(os.environ['WORLD_SIZE'])
    dist.init_process_group("nccl")
    return rank, world_size


# --- Sections 3.2 and 5.3: the model split over two GPUs --------------------------------

class ModelParallelModel(nn.Module):
    """The article's class (its section 5.3), with its two devices passed in.

    The article hard-codes ``'cuda:0'`` and ``'cuda:1'``. As arguments, several
    processes can each own a different pair of GPUs, and the class also runs with
    both devices ``'cpu'``: the same arithmetic, with nothing moved.
    """

    def __init__(self, dev0: str = "cuda:0", dev1: str = "cuda:1"):
        super().__init__()
        self.dev0, self.dev1 = torch.device(dev0), torch.device(dev1)
        self.layer1 = nn.Linear(784, 256).to(self.dev0)  # first layer on device 0
        self.layer2 = nn.Linear(256, 128).to(self.dev1)  # second and third on device 1
        self.layer3 = nn.Linear(128, 10).to(self.dev1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.layer1(x.flatten(1).to(self.dev0)))
        x = x.to(self.dev1)  # the device boundary; in backward, autograd copies the gradient back
        x = torch.relu(self.layer2(x))
        return self.layer3(x)  # on dev1: the target must be there too


# --- Section 5.4: checkpoints ----------------------------------------------------------------

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
