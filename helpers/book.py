"""What a notebook needs around the runs: the scale knob, source listings, the machine, exercises."""
from __future__ import annotations

import inspect
import os
import platform
import textwrap
from typing import Any, Callable

import torch


def scale() -> float:
    """``BOOK_SCALE`` (default 1): multiply workloads by it for longer, steadier runs on bigger machines."""
    value = float(os.environ.get("BOOK_SCALE", "1"))
    if value <= 0:
        raise ValueError(f"BOOK_SCALE must be positive, got {value}")
    return value


def scaled(n: int, minimum: int = 1) -> int:
    return max(minimum, round(n * scale()))


def show_source(*objs: Any):
    """Render the source of functions, classes or modules as highlighted code, each under its file."""
    from IPython.display import Markdown
    parts = []
    for o in objs:
        where = "helpers/" + inspect.getsourcefile(o).split("/helpers/")[-1]
        code = textwrap.dedent(inspect.getsource(o)).rstrip()
        parts.append(f"From `{where}`:\n\n```python\n{code}\n```")
    return Markdown("\n\n".join(parts))


def cpu_flags(wanted: tuple[str, ...] = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")) -> dict:
    """The CPU features that decide whether bf16 is fast here (Linux's /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    return {w: w in flags for w in wanted}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")),
                        platform.processor())
    except OSError:
        return platform.processor() or "unknown CPU"


def machine() -> dict:
    """The facts every measurement in the book depends on."""
    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu_model(), "cores": cores, "gpus": gpus, "torch": torch.__version__,
            "python": platform.python_version(),
            "bf16_flags": [k for k, v in cpu_flags().items() if v and ("bf16" in k or "amx" in k)]}


def check(answer: Any, is_right: Callable[[Any], bool], hint: str) -> bool | None:
    """Grade an exercise: None while unanswered, else whether ``is_right(answer)``, with a hint if not."""
    if answer is None:
        print("Not answered yet: set the variable above and run this cell again.")
        return None
    ok = bool(is_right(answer))
    print("Correct." if ok else f"Not quite. Hint: {hint}")
    return ok
