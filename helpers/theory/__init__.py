"""Closed-form models of distributed training, and their fits to measurements: numpy only, no torch.

One module per topic; every formula is defined once and shown in the chapter that teaches it.
"""
from .memory import (  # noqa: F401
    OPTIMIZER_STATES, PRECISIONS, ACTIVATION_BYTES, model_state_bytes, mlp_activation_bytes,
    transformer_params, transformer_activation_bytes, strategy_memory, FitAdvice, advise,
)
from .speedup import (  # noqa: F401
    amdahl, gustafson, gustafson_alpha, alpha_from_speedup, AmdahlFit, fit_amdahl, StepModel,
    fit_step_model,
)
from .communication import (  # noqa: F401
    comm_time, r_squared, AlphaBetaFit, fit_alpha_beta, BUS_FACTOR, algbw, busbw,
    ring_allreduce_time, ring_from_fit, ddp_step_time, Diagnosis, diagnose,
)
from .pipeline import (  # noqa: F401
    naive_mp_utilization, bubble_fraction, pipeline_utilization, pipeline_speedup,
    micro_batches_for_bubble, interleaved_bubble_fraction, peak_in_flight, replay_idle,
)
from .precision import (  # noqa: F401
    autocast_weight_copy_bytes, autocast_saved_bytes, autocast_break_even_batch,
    grad_scale_trace,
)
from .prediction import (  # noqa: F401
    PHASES, Line, fit_line, Workload, ComputeModel, fit_compute, Link, bucket_exposed,
    StepPrediction, predict_step, predict, predicted_speedup, article_step, crossover, ddp_buckets,
)
from .context_parallel import (  # noqa: F401
    LAYOUTS, n_chunks, chunks, chunk_len, positions, causal_work, imbalance, ring_bytes, ring_layer_cost,
    what_each_divides,
)
from .tensor_parallel import (  # noqa: F401
    STRATEGIES, megatron_allreduces, tp_message_bytes, local_params, state_bytes, step_collectives,
    sent_bytes, tp_ddp_break_even_tokens, sp_collectives, sp_replicated_params, sp_plan_collectives,
    sp_activation_bytes,
)
from .sharding import (  # noqa: F401
    STAGES, SHARDED, COLLECTIVES, GLOO_RUNS, sharded_state_bytes, bytes_sent, step_traffic,
    collective_time, sharded_step_time, zero3_hidden_from, segment_bounds, checkpointed_mlp_bytes,
    checkpoint_step_time,
)
from . import transformer  # noqa: F401  (part 8: theory.transformer.Shape, .parameters, .flops_per_step, ...)
from .experts import (  # noqa: F401
    expert_capacity, dropped_tokens, expert_imbalance, load_balancing_loss, routing_aux_loss, binomial_overflow,
    expected_dropped_fraction, ep_message_bytes, alltoall_sent_fraction, alltoall_time, moe_alltoalls,
    moe_params,
)
from . import four_d  # noqa: F401  (8.4: theory.four_d.step_messages, .activation_bytes, ...)
