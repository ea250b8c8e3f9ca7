"""Part 8, transformers at scale: what its chapters say about the machine they ran on."""
from __future__ import annotations

from .. import plans
from ..theory import utilization
from ..machine import BF16_FLAGS, Machine
from .common import _plural_gpus, _runs, _untimed


def _bf16(m: Machine) -> str:
    """Where 8.1's matmul peak is measured in bfloat16 as well as float32 (``probes.transformer.peak_dtypes``),
    on the device the 2-rank training ran on: one GPU cannot hold two NCCL ranks, so there it is the CPU."""
    if plans.job(m, 2).backend == "nccl":
        return (f"The peak is measured on one of the GPUs the ranks ran on, a {m.gpus[0]}, in float32 and in "
                "bfloat16, which its tensor cores run natively")
    if m.native_bf16:
        have = " and ".join(f for f in BF16_FLAGS if f in m.cpu_flags)
        return (f"This CPU reports {have}, instructions that multiply bfloat16 natively, so the peak is "
                "measured in bfloat16 as well as float32")
    return (f"This CPU reports neither {' nor '.join(BF16_FLAGS)}: torch would widen bfloat16 to float32 "
            "around each multiply, so the peak is measured in float32 only")


def _profiled(m: Machine) -> str:
    """What the profiler sees of a 2-rank step here: CPU ops only, or CUDA kernels too."""
    if plans.job(m, 2).backend == "nccl":
        return ("Here the ranks ran on GPUs over NCCL: the traces hold each GPU's kernels beside the CPU's "
                "ops, and the all-reduce runs on NCCL's stream, not on gloo's threads")
    return ("Here the ranks ran on the CPU over gloo: the traces hold CPU ops only, and each all-reduce "
            "runs on one of gloo's own threads, beside the rank's main thread")


def peak_said(m: Machine, measured: float, threads: int, device: str, model_flops_per_s: float) -> str:
    """8.1: the measured float32 peak beside the data sheet's kind of peak, cores x clock x FLOPs a
    cycle (``Machine.fp32_flops_per_cycle``), and the MFU against each; papers use the data sheet's."""
    if device != "cpu":
        return ("On a GPU the data sheet's peak is the one the papers divide by; set the measured one "
                "beside it, from the GPU's own data sheet")
    per_cycle = m.fp32_flops_per_cycle
    if not (per_cycle and m.clock_ghz):
        return ("This system reports no vector flags or no clock, so there is no data-sheet peak to "
                "set beside the measured one here")
    sheet = utilization.peak_flops(threads, m.clock_ghz * 1e9, per_cycle)
    clock = (f"{m.clock_ghz:.2f} GHz, its maximum clock" if m.clock_is_max else
             f"{m.clock_ghz:.2f} GHz, the clock the system reports (it exposes no maximum, as VMs often do not)")
    said = (f"The data-sheet kind of peak, which the papers use, is {threads} core{'s' if threads != 1 else ''} x {clock} x {per_cycle} "
            f"float32 FLOPs a cycle = {sheet / 1e9:.1f} GFLOP/s, and the MFU against it "
            f"{100 * utilization.mfu(model_flops_per_s, sheet):.0f}%")
    if measured <= sheet:
        return f"{said}: the measured matmul reached {100 * measured / sheet:.0f}% of it, so MFU against it reads lower"
    return (f"{said}: the measured matmul beat it, so the cores ran faster than that clock, at about "
            f"{measured / (threads * per_cycle) / 1e9:.2f} GHz (a boost clock the system does not report)")


def transformer_bill(m: Machine) -> dict[str, str]:
    """8.1: the GPT trained and profiled on 2 ranks; the matmul peak in the notebook's process."""
    return {"tb_bf16": _bf16(m), "tb_profiled": _profiled(m), **_runs(m, "08_1_transformer_bill")}


def attention_kernel(op: str, device: str = "cpu") -> str:
    """8.1: which kernel ``F.scaled_dot_product_attention`` ran (an autograd node's name, measured)."""
    if "Math" in op or op == "none found":
        return (f"Here attention ran as {op} on the {device}: it materializes the s × s scores, so the "
                "formula is configured with them")
    return (f"Here `F.scaled_dot_product_attention` ran as `{op}` on the {device}: a fused kernel that keeps "
            "no s × s scores, only its output and each row's softmax statistics (the logsumexp)")


def sequence_context(m: Machine) -> dict[str, str]:
    """8.2: SP on 2 ranks, rings on 2 and 4 (which may share the cores); torch's own CP only where
    each of 2 ranks has a GPU."""
    four_note = _untimed(m, 4, "chapter", "counts score elements and bytes and checks results", "rings")
    if plans.torch_cp_runs(m):
        torch_cp = (f"This machine has {_plural_gpus(m)}, so 2 ranks each had one, and torch's "
                    "context_parallel ran below on them, checked like the ring by hand.")
    else:
        have = _plural_gpus(m) if m.n_gpus else "no GPU"
        torch_cp = (f"This machine has {have}, so 2 ranks cannot each have one: torch's context_parallel "
                    "was not run here, and the check below reads its source instead.")
    return {"sc_four_ranks": four_note, "sc_torch_cp": torch_cp, **_runs(m, "08_2_sequence_context")}


def experts(m: Machine) -> dict[str, str]:
    """8.3: all_to_all timed on 2 ranks; EP x DP on 4, which may share the cores."""
    two = plans.job(m, 2)
    mesh = _untimed(m, 4, "section", "checks losses and weights against one process")
    if two.backend == "nccl":
        links = f"Here the 2 ranks ran as {two.describe()}: the links timed are the GPUs' own."
    else:
        links = (f"Here the 2 ranks ran as {two.describe()}: the \"links\" are gloo's loopback TCP "
                 "sockets and the cores that copy through them, so the bandwidth is this machine's memory "
                 "and kernel, not a network's.")
    return {"ep_four_ranks": mesh, "ep_links": links, **_runs(m, "08_3_experts")}
