"""Part 8, transformers at scale: what its chapters say about the machine they ran on."""
from __future__ import annotations

from .. import plans
from ..machine import Machine
from .common import _runs


def experts(m: Machine) -> dict[str, str]:
    """8.3: all_to_all timed on 2 ranks; EP x DP on 4, which may share the cores."""
    two, four = plans.job(m, 2), plans.job(m, 4)
    if four.shared:
        mesh = (f"{four.warning()} This section takes no timings: it checks losses and weights against "
                "one process, which the turns do not change.")
    else:
        mesh = f"The 4-rank run ran as {four.describe()}: its ranks did not take turns."
    if two.backend == "nccl":
        links = f"Here the 2 ranks ran as {two.describe()}: the links timed are the GPUs' own."
    else:
        links = (f"Here the 2 ranks ran as {two.describe()}: the \"links\" are gloo's loopback TCP "
                 "sockets and the cores that copy through them, so the bandwidth is this machine's memory "
                 "and kernel, not a network's.")
    return {"ep_four_ranks": mesh, "ep_links": links, **_runs(m, "08_3_experts")}
