"""What each chapter says about the machine it ran on, built from the machine's facts, never typed.

A chapter's prose glues these in: ``book.glue(**sentences.for_chapter("05_4_checkpointing", here))``.
Each function reads only a ``Machine`` and the plan ``launch`` follows on it (``plans.job``), so
a unit test can read every chapter's sentences on every profile in ``plans.PROFILES``: the names
are the same on each machine, only the text changes.
"""
from __future__ import annotations

from collections.abc import Callable

from .. import plans
from ..machine import Machine
from .article import (  # noqa: F401
    amp_training, background, checkpointing, cuda_peak, data_parallel, ddp_training, mixed_precision,
    model_parallel, model_parallel_training,
)
from .beyond_the_article import (  # noqa: F401
    cluster, elastic, hangs, pipeline_schedules, sharding, sharding_probe, tensor_parallel,
)
from .common import load_said, margin_said  # noqa: F401
from .scaling import communication, fit_bounds, prediction, speedup, sweeps_pooled  # noqa: F401
from .transformers import attention_kernel, peak_said, transformer_bill  # noqa: F401
from .transformers import sequence_context  # noqa: F401
from .transformers import experts  # noqa: F401
from .transformers_at_scale import four_d, four_d_cp, four_d_wire, plan  # noqa: F401

# The chapters whose prose speaks of the machine, by notebook.
CHAPTERS: dict[str, Callable[[Machine], dict[str, str]]] = {
    "01_background": background,
    "03_1_data_parallel": data_parallel,
    "03_2_model_parallel": model_parallel,
    "03_3_mixed_precision": mixed_precision,
    "04_1_speedup": speedup,
    "04_2_communication": communication,
    "04_3_prediction": prediction,
    "05_1_ddp_training": ddp_training,
    "05_2_amp_training": amp_training,
    "05_3_model_parallel_training": model_parallel_training,
    "05_4_checkpointing": checkpointing,
    "06_1_pipeline_schedules": pipeline_schedules,
    "06_2_sharding": sharding,
    "06_3_tensor_parallel": tensor_parallel,
    "07_1_elastic": elastic,
    "07_2_hangs": hangs,
    "08_1_transformer_bill": transformer_bill,
    "08_2_sequence_context": sequence_context,
    "08_3_experts": experts,
    "08_4_four_d": four_d,
    "08_5_plan": plan,
}


def for_chapter(chapter: str, m: Machine) -> dict[str, str]:
    return CHAPTERS[chapter](m)


def landing(m: Machine) -> dict[str, str]:
    """The landing page: the machine that built the site, and each chapter's launches on it (Markdown)."""
    runs = {chapter: "; ".join(plans.chapter_job(m, chapter, n).describe() for n in ns)
            for chapter, ns in plans.CHAPTER_JOBS.items()}
    rows = [f"| {{doc}}`/notebooks/{chapter}` | {where} |" for chapter, where in runs.items()]
    table = "\n".join(["| chapter | its fixed launches, as they ran here |", "|---|---|", *rows])
    return {"built_on": m.describe(), "launches_table": table}
