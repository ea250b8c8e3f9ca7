"""4.2's top-up: one more all_reduce sweep on 2 ranks, for ``analysis.fit_until_clear``."""
from __future__ import annotations

from typing import Callable


def more_allreduce_sweeps(sizes: list[int], budget_bytes: int, backend: str | None = None) -> Callable[[], dict]:
    """``more()``: rank 0's result of one more ``collectives.allreduce_sweep`` of ``sizes`` on 2 ranks,
    one thread each, as the chapter's first sweep ran."""
    import helpers
    from helpers.recipes import collectives

    def more() -> dict:
        return helpers.launch(collectives.allreduce_sweep, nprocs=2, threads=1, timeout=300, backend=backend,
                              sizes=sizes, budget_bytes=budget_bytes)[0]
    return more
