"""From the ranks' results to the numbers a chapter states: one home, shared by notebooks and bench/.

Recipes return raw measurements (spans, per-step times, per-rank states); the
functions here reduce them. None of them runs a job.

One module per kind of result; the names are re-exported here, so a chapter calls
``analysis.fit_allreduce`` and shows its source wherever it lives.
"""
from .timelines import (  # noqa: F401
    hidden_fraction, summarize_timeline, step_ratios, window, utilization, overlap_seconds, summarize_schedules,
)
from .scaling import (  # noqa: F401
    ScalingRuns, ratio_spread, paired_ratios, contention_slowdown,
)
from .communication import (  # noqa: F401
    allreduce_table, AllreduceFit, fit_allreduce, pooled, fit_until_clear, ddp_step_predictions, split_calls,
)
from .runs import (  # noqa: F401
    assemble, replica_mean_losses, max_abs_diff, ddp_throughput, slowest_rank_seconds, same_state, ran_on,
    second_rank_verdict, printed_result, peak_memory_mib, peak_memory_kind,
)
from .prediction import (  # noqa: F401
    Calibration, call_costs, calibrate, held_out, lead_ratios, speedup_lead, errors, regime, crossovers, remember, recall,
)
from .tensor_parallel import (  # noqa: F401
    collective_summary, max_gap, global_losses, weight_gap, weight_movement, strategy_rows, table_cells,
)
from .sequence_context import (  # noqa: F401
    sp_gaps, predicted_collectives, sent, sp_collective_rows, sp_table_cells, layer_formula, activation_rows,
    cp_rows, balance, GPT_ACTIVATIONS,
)
from .pipelining import (  # noqa: F401
    step_idle, step_seconds, slot_idle, timed_replay, summarize_pipelines, schedule_grad_diffs, spans_of,
)
from .sharding import (  # noqa: F401
    STAGE_OF, STATE_KINDS, memory_table, worst_relative_error, memory_layouts, traffic, traffic_table, collective_factors,
    ring_fit, weight_differences, reshard_rows, predicted_comm_seconds, time_rows,
)
from .hangs import said, names_cause  # noqa: F401
from .experts import expert_balance, uniform_dropped, ep_gaps, ep_padding, dispatch_bytes, AlltoallFit, fit_alltoall  # noqa: F401
from .planner import narayanan_table, markdown as planner_markdown, machine_cluster  # noqa: F401
from . import margins  # noqa: F401  (analysis.margins.compare: a timing claim over paired rounds)
