"""Every layout of a model on a cluster, priced and ranked: the planner's search.

A layout is ranked by its mesh (dp, tp, pp, cp, ep), each mesh at its fastest settings (ZeRO
stage, recomputation, micro-batch size, interleaving) among those that fit. Recomputation is
tried from none to full and stops at the first that fits: at one ZeRO stage, recomputing more
only adds time. Tensor parallelism stays inside a node unless ``tp_across_nodes``: its
collectives run in every layer, and the planner prices them as blocking it (``Layout``: no
tp-comm-overlap, no async TP), so a slow link under them costs every layer.
"""
from __future__ import annotations

from ..checks import whole
from .cluster import Cluster
from .model import RECOMPUTE, Layout, Model
from .price import Priced, batch_refused, check, price


def divisors(n: int) -> list[int]:
    whole("n", n)
    return [d for d in range(1, n + 1) if n % d == 0]


def plan(model: Model, cluster: Cluster, global_batch_tokens: int, *, top: int | None = None,
         zero=(0, 1, 2, 3), recompute=RECOMPUTE, micro_batches=(1, 2, 4, 8), virtual=(1, 2, 3, 4, 6, 8),
         cp=(1, 2, 4, 8), sp: bool = True, flash: bool = True, overlap: bool = True,
         tp_across_nodes: bool = False, end_chunks=(False,), cp_ring: bool = True) -> list[Priced]:
    """The meshes that fit, each priced at its fastest settings, fastest first (``top`` of them;
    on equal time the simpler, then the one needing less memory, first); an empty list when none fits.

    The keyword arguments bound the search to what a software stack offers: ``zero`` the stages,
    ``recompute`` the kinds (in order of cost), ``micro_batches`` the micro-batch sizes
    (sequences), ``virtual`` the model chunks per pipeline GPU, ``cp`` the context-parallel
    degrees; ``sp``, ``flash``, ``overlap`` and ``cp_ring`` as in ``Layout``; ``end_chunks`` the
    values of ``Layout.end_chunks`` to try (True only where pp > 1).
    """
    whole("global_batch_tokens", global_batch_tokens)
    if why := batch_refused(model, global_batch_tokens):  # else: an empty list, read as "nothing fits"
        raise ValueError(f"no layout can take this batch: {why}")
    order = [r for r in RECOMPUTE if r in recompute]
    if not order or not zero:
        raise ValueError("plan needs at least one recompute kind and one ZeRO stage to try")
    for name, values in (("micro_batches", micro_batches), ("virtual", virtual), ("cp", cp)):
        for value in values:
            whole(f"each of plan's {name}", value)
    for z in zero:
        Layout(1, zero=z)  # refuses what is not a stage, True included
    n, best = cluster.gpus, {}
    for tp in divisors(n):
        if tp > cluster.gpus_per_node and not tp_across_nodes:
            continue
        for c in (c for c in cp if (n // tp) % c == 0 and n % tp == 0):
            for pp in (p for p in divisors(n // (tp * c)) if p <= model.layers):
                dp = n // (tp * c * pp)
                eps = [e for e in divisors(model.experts) if (dp * c) % e == 0] if model.experts > 1 else [1]
                for ep in eps:
                    found = _best(model, cluster, global_batch_tokens, (dp, tp, pp, c, ep), zero, order,
                                  micro_batches, virtual, sp and tp > 1, flash, overlap, end_chunks, cp_ring)
                    if found is not None:
                        best[found.layout.mesh()] = found
    ranked = sorted(best.values(), key=_order)
    return ranked if top is None else ranked[:top]


def _order(p: Priced) -> tuple:
    """Fastest first; on a tie (to 9 digits), the fewer GPUs splitting one replica, then the roomier:
    of two meshes that price the same, the simpler one is the one to run."""
    ly = p.layout
    return (float(f"{p.step_s:.9g}"), ly.tp * ly.pp * ly.cp * ly.ep, p.memory_bytes)


def _best(model, cluster, tokens, mesh, zero, order, micro_batches, virtual, sp, flash, overlap, end_chunks, ring):
    dp, tp, pp, c, ep = mesh
    best = None
    ends = [e for e in end_chunks if not e or pp > 1]
    for b, e in ((b, e) for b in micro_batches for e in ends):
        for v in (v for v in virtual if v == 1 or pp > 1):
            for z in zero:
                for r in order:
                    ly = Layout(dp, tp, pp, c, ep, z, r, b, v, sp, flash, overlap, False, e, ring)
                    if check(model, cluster, ly, tokens):
                        break
                    priced = price(model, cluster, ly, tokens)
                    if priced.fits:
                        if best is None or (priced.step_s, priced.memory_bytes) < (best.step_s, best.memory_bytes):
                            best = priced
                        break
    return best


def fastest(model: Model, cluster: Cluster, layouts, global_batch_tokens: int) -> Priced | None:
    """Of ``layouts``, the fastest that fits, or the fastest if none fits (the first on a tie);
    those that do not divide are skipped. How a published layout is priced when its paper leaves
    out a setting (the micro-batch, the chunk count): at the best of the values it allows."""
    best = None
    for ly in layouts:
        if check(model, cluster, ly, global_batch_tokens):
            continue
        priced = price(model, cluster, ly, global_batch_tokens)
        if best is None or (priced.fits, -priced.step_s) > (best.fits, -best.step_s):
            best = priced
    return best


def rank_of(ranked: list[Priced], mesh: tuple) -> int | None:
    """1-based place of ``mesh`` (dp, tp, pp, cp, ep) in a ranking, or None if it is not there."""
    for i, p in enumerate(ranked, 1):
        if p.layout.mesh() == tuple(mesh):
            return i
    return None
