"""The one place that knows how torch releases differ, so the rest of helpers/ reads as one version.

The book is pinned to torch 2.14.1 (requirements.txt) and tested there. Older
releases down to ``OLDEST`` pass helpers' unit tests; bench/RESULTS.md records
what was run on which release, and what the older ones lack.
"""
from __future__ import annotations

import dataclasses
import re

import torch
import torch.distributed as dist
from torch.distributed.launcher.api import LaunchConfig
from torch.nn.parallel import distributed as _ddp

OLDEST = (2, 7)  # 2.6 lacks FSDP2 on the CPU and dcp.save(no_dist=True), which 5.4 uses

# DDP's default bucket cap (3.1). Newer releases name it; 2.7 wrote the 25 inline in DDP.__init__.
DDP_BUCKET_CAP_MB = getattr(_ddp, "_DEFAULT_BUCKET_CAP_MB", 25)


def version(text: str = torch.__version__) -> tuple[int, int]:
    """(major, minor) of a torch version string such as '2.14.1+cu130'."""
    found = re.match(r"(\d+)\.(\d+)", text)
    if not found:
        raise ValueError(f"not a torch version: {text!r}")
    return int(found[1]), int(found[2])


def check(text: str = torch.__version__) -> None:
    """Fail with one clear line on a torch the book does not run on."""
    if version(text) < OLDEST:
        raise RuntimeError(f"the book needs torch {OLDEST[0]}.{OLDEST[1]} or newer; this is torch {text}. "
                           f"`pip install -r requirements.txt` installs the tested one")


def launch_config(**settings) -> LaunchConfig:
    """A LaunchConfig, leaving out settings this torch's agent does not have yet.

    ``shutdown_timeout`` (how long the agent waits after SIGTERM before SIGKILL)
    arrived after 2.7; there, the agent's fixed 30 s wait applies instead.
    """
    known = {f.name for f in dataclasses.fields(LaunchConfig)}
    return LaunchConfig(**{k: v for k, v in settings.items() if k in known})


# The collectives of one tensor each: torch 2.14 names them ``*_single`` and keeps the older names
# as deprecated wrappers (they warn); 2.7 has only the older ones. Each name a release may have ->
# (the collective it performs, the parameter holding its whole message: the tensor all-reduced,
# the output all-gathered into, the input reduce-scattered). ``recipes.traffic`` wraps each.
COLLECTIVES = {"all_reduce": ("all_reduce", "tensor"),
               "all_gather_single": ("all_gather", "output_tensor"),
               "all_gather_into_tensor": ("all_gather", "output_tensor"),
               "_all_gather_base": ("all_gather", "output_tensor"),
               "reduce_scatter_single": ("reduce_scatter", "input"),
               "reduce_scatter_tensor": ("reduce_scatter", "input"),
               "_reduce_scatter_base": ("reduce_scatter", "input")}


def _newest(*names: str):
    # Looked up on ``torch.distributed`` at each call, not once at import: a wrapper put on the
    # module (``recipes.traffic.Traffic``) must see the call.
    return next(getattr(dist, n) for n in names if hasattr(dist, n))


def all_gather_single(out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
    """Every rank's ``inp``, concatenated into ``out``, under this torch's name for it."""
    _newest("all_gather_single", "all_gather_into_tensor")(out, inp, group=group)


def reduce_scatter_single(out: torch.Tensor, inp: torch.Tensor, group=None) -> None:
    """``inp`` summed over the ranks, this rank's 1/p chunk of it into ``out``, under this torch's name."""
    _newest("reduce_scatter_single", "reduce_scatter_tensor")(out, inp, group=group)
