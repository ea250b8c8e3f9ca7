"""What several chapters' sentences share: where a launch ran, in words."""
from __future__ import annotations

from .. import plans
from ..machine import Load, Machine


def _runs(m: Machine, chapter: str) -> dict[str, str]:
    return {"runs_where": plans.chapter_jobs(m, chapter)}


def _untimed(m: Machine, nprocs: int, scope: str, checks: str, runs: str = "run") -> str:
    """A job whose claims no timing can change: where its ranks take turns on the cores, that they do
    and why it does not matter; else that they did not (``runs``: what the job is, "run" or "rings")."""
    job = plans.job(m, nprocs)
    if job.shared:
        return f"{job.warning()} This {scope} takes no timings: it {checks}, which the turns do not change."
    whose = "their" if runs.endswith("s") else "its"
    return f"The {nprocs}-rank {runs} ran as {job.describe()}: {whose} ranks did not take turns."


def _ran_on_gpus(m: Machine, nprocs: int) -> bool:
    return plans.job(m, nprocs).backend == "nccl"


def _split_why(m: Machine) -> str:
    """Why the article's two-device model ran where ``plans.split_devices`` put it."""
    if plans.split_devices(m)[1] != "cpu":
        return "as the article intends"
    return f"because this machine has {m.describe()}: the two-GPU path did not run here"


def _p_list(ps: list[int]) -> str:
    return " and ".join(f"p = {p}" for p in ps)


def _plural_gpus(m: Machine) -> str:
    return f"{m.n_gpus} GPU{'s' if m.n_gpus != 1 else ''}"


def _where(backend: str) -> str:
    return "on GPUs, one each, over NCCL" if backend == "nccl" else "on the CPU over gloo"


def _loopback_nodes(m: Machine, nodes: str) -> str:
    """Where torchrun agents that share this host run (``cluster.shared_host_env``): gloo on the CPU."""
    if m.n_gpus:
        return (f"This machine has {m.n_gpus} GPU{'s' if m.n_gpus > 1 else ''}, but {nodes} share "
                f"{'them' if m.n_gpus > 1 else 'it'}, so they run gloo on the CPU: each agent numbers its "
                "ranks from LOCAL_RANK 0, so both would take cuda:0, and NCCL refuses two ranks on one GPU")
    return f"{nodes[0].upper()}{nodes[1:]} run gloo on the CPU, as every job on this machine does"


QUIET = 0.1  # below this share of the cores, other processes' use is background noise


def load_said(load: Load, paired: bool = True) -> str:
    """What a timing chapter says about how busy the machine was while it measured (``machine.LoadWatch``).
    ``paired``: the page's comparisons are made round by round (``analysis.margins``), so it says so;
    a page that only reports its timings says what the load did to them."""
    cores = f"{load.cores} core{'s' if load.cores != 1 else ''}"
    head = f"While these timings were measured, other processes used {load.others:.1f} of this machine's {cores}"
    if load.share < QUIET:
        return head + (": a quiet machine, so the scatter beside each comparison is the machine's own." if paired
                       else ": a quiet machine, so their scatter is the machine's own.")
    head += ": a busy machine, so its timings are slower and more scattered than it would give alone."
    if not paired:
        return head
    return head + (" Each comparison on this page is made round by round, its two sides seconds apart, so that "
                   "the load falls on both.")


def margin_said(c, claim: str) -> str:
    """A timing claim (``analysis.margins.Comparison``) in a sentence or two: shown, or left open where
    the rounds ran out (``margins.until_clear``'s cap) before its margin reached the book's bar."""
    from ..analysis import margins
    if c.clear():
        return f"{claim[0].upper()}{claim[1:]}: {c.said()}."
    return (f"This run could not show that {claim}: {c.said()}, short of the {margins.TARGET:.0f} standard "
            f"errors the book asks for after {c.n} rounds, its cap. The machine's noise was as large as the effect.")
