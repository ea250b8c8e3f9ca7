"""Chapter 4.3's rounds added from the notebook's process: the two held-out jobs it sets side by side,
launched alone, for as many more rounds as its comparison asks (``analysis.margins.until_clear``)."""
from __future__ import annotations

from typing import Callable


def more_lead_rounds(dataset, ends: tuple[tuple[str, int], tuple[str, int]]) -> Callable[[int], list[float]]:
    """``more(k)``: k more rounds of ``ends`` (ahead, behind: (model, G) each), run as the predictor's
    job runs them (2 ranks, one thread each, over gloo, the order of p alternating), and each round's
    lead of the first job's S(2) over the second's (``analysis.lead_ratios``)."""
    import helpers
    from helpers import analysis
    from helpers.recipes import regimes

    def more(k: int) -> list[float]:
        ranks = helpers.launch(regimes.strong_scaling, nprocs=2, threads=1, backend="gloo", dataset=dataset,
                               rounds=k, steps=regimes.STEPS, **regimes.lead_blocks(*ends))
        return analysis.lead_ratios(ranks, *ends)
    return more
