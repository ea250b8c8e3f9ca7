"""Part 8, transformers at scale: what each chapter says about the machine it ran on."""
from __future__ import annotations

from .. import plans
from ..machine import Machine
from .common import _plural_gpus, _runs


def sequence_context(m: Machine) -> dict[str, str]:
    """8.2: SP on 2 ranks, rings on 2 and 4 (which may share the cores); torch's own CP only where
    each of 2 ranks has a GPU."""
    four = plans.job(m, 4)
    if four.shared:
        four_note = (f"{four.warning()} This chapter takes no timings: it counts score elements and bytes "
                     "and checks results, which the turns do not change.")
    else:
        four_note = f"The 4-rank rings ran as {four.describe()}: their ranks did not take turns."
    if plans.torch_cp_runs(m):
        torch_cp = (f"This machine has {_plural_gpus(m)}, so 2 ranks each had one, and torch's "
                    "context_parallel ran below on them, checked like the ring by hand.")
    else:
        have = _plural_gpus(m) if m.n_gpus else "no GPU"
        torch_cp = (f"This machine has {have}, so 2 ranks cannot each have one: torch's context_parallel "
                    "was not run here, and the check below reads its source instead.")
    return {"sc_four_ranks": four_note, "sc_torch_cp": torch_cp, **_runs(m, "08_2_sequence_context")}
