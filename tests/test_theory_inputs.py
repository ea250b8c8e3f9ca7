"""Theory's formulas refuse impossible inputs with a ValueError that says why (helpers/theory/checks.py).

Before, each of these was priced (a number came back: a stage past p held a negative count of
micro-batches, p = -1 had a bubble of 2/3) or raised a bare KeyError where a sibling raised a
ValueError for the same mistake.
"""
import math

import numpy as np
import pytest

from helpers import theory

NAN = float("nan")

REFUSED = [
    # pipelines
    ("peak_in_flight: a stage past p", lambda: theory.peak_in_flight("1F1B", 4, 8, 5), "stage must be in 0..3"),
    ("peak_in_flight: a negative stage", lambda: theory.peak_in_flight("1F1B", 4, 8, -1), "stage must be a whole"),
    ("bubble_fraction: negative p", lambda: theory.bubble_fraction(-1, 4), "p must be a whole number >= 1"),
    ("bubble_fraction: NaN p", lambda: theory.bubble_fraction(NAN, 4), "p must be finite"),
    ("bubble_fraction: zero micro-batches", lambda: theory.bubble_fraction(4, 0), "m must be a whole number >= 1"),
    ("bubble_fraction: one bad m in an array", lambda: theory.bubble_fraction(2, np.array([1, 2, 0])), "m must be"),
    ("pipeline_speedup: half a stage", lambda: theory.pipeline_speedup(2.5, 4), "p must be a whole number"),
    ("interleaved: zero chunks", lambda: theory.interleaved_bubble_fraction(4, 8, 0), "v must be a whole number"),
    ("micro_batches_for_bubble: p = 0", lambda: theory.micro_batches_for_bubble(0, 0.1), "p must be a whole"),
    ("naive_mp_utilization: negative work", lambda: theory.naive_mp_utilization([1, -1, 2]), "stage_work must be >= 0"),
    ("naive_mp_utilization: no work", lambda: theory.naive_mp_utilization([0, 0]), "some of it above 0"),
    ("replay_idle: a stage with no chunk", lambda: theory.replay_idle([[("F", (1, 0))]], [1]), "stage must be in 0..0"),
    ("replay_idle: an unknown action", lambda: theory.replay_idle([[("X", (0, 0))]], [1]), "kind must be one of"),
    # sharding
    ("step_traffic: an unknown stage (was KeyError)", lambda: theory.step_traffic(1e6, 4, "ZeRO-4"),
     "stage must be one of"),
    ("sharded_step_time: an unknown stage (was KeyError)",
     lambda: theory.sharded_step_time(0.1, 1e6, 4, "zero3", 1e-5, 1e-9), "stage must be one of"),
    ("bytes_sent: an unknown collective (was KeyError)", lambda: theory.bytes_sent("allreduce", 1e6, 4),
     "op must be one of"),
    ("bytes_sent: negative bytes", lambda: theory.bytes_sent("all_gather", -1.0, 4), "message_bytes must be >= 0"),
    ("bytes_sent: an unknown backend", lambda: theory.bytes_sent("all_gather", 1e6, 4, "mpi"),
     "backend must be one of"),
    ("sharded_state_bytes: p = 0", lambda: theory.sharded_state_bytes(1000, 0, "ZeRO-3"),
     "p must be a whole number >= 1"),
    ("sharded_state_bytes: NaN p", lambda: theory.sharded_state_bytes(1000, NAN, "ZeRO-1"), "p must be finite"),
    ("collective_time: zero messages", lambda: theory.collective_time("all_gather", 1e6, 4, 1e-5, 1e-9, messages=0),
     "messages must be a whole number >= 1"),
    ("collective_time: negative latency", lambda: theory.collective_time("all_gather", 1e6, 4, -1e-5, 1e-9),
     "step_latency must be >= 0"),
    ("segment_bounds: zero blocks", lambda: theory.segment_bounds(0, 1), "n_blocks must be a whole number >= 1"),
    ("segment_bounds: half a segment", lambda: theory.segment_bounds(4, 1.5), "segments must be a whole number"),
    ("checkpointed_mlp_bytes: no hidden layer", lambda: theory.checkpointed_mlp_bytes(8, [4, 2], 1),
     "widths must list at least 3"),
    ("checkpointed_mlp_bytes: a zero width", lambda: theory.checkpointed_mlp_bytes(8, [4, 0, 2], 1), "each of widths"),
    ("checkpoint_step_time: recompute past the forward", lambda: theory.checkpoint_step_time(1.0, 2.0, 1.5),
     "recomputed must be in"),
    # tensor parallelism
    ("local_params: an unknown strategy (was KeyError)", lambda: theory.local_params("ZeRO", 10, 1, 2, 2),
     "strategy must be one of"),
    ("step_collectives: an unknown strategy (was KeyError)",
     lambda: theory.step_collectives("tp", 10, 1, 1, 2, 2, 8, 16, 32), "strategy must be one of"),
    ("state_bytes: tp = 0", lambda: theory.state_bytes("TP", 10, 1, 1, 0), "tp must be a whole number >= 1"),
    ("local_params: negative parameters", lambda: theory.local_params("TP", -10, 1, 1, 2), "n_split must be >= 0"),
    ("megatron_allreduces: zero blocks", lambda: theory.megatron_allreduces(0), "blocks must be a whole number >= 1"),
    ("tp_message_bytes: a negative batch", lambda: theory.tp_message_bytes(-2, 16, 32), "batch must be a whole"),
    ("step_collectives: fewer samples than replicas",
     lambda: theory.step_collectives("FSDP x TP", 10, 1, 4, 2, 2, 2, 16, 32), "at least one sample a replica"),
    ("sent_bytes: an unknown collective (was KeyError)",
     lambda: theory.sent_bytes({("allreduce", "forward"): (1, 8.0)}, "TP", 1, 2), "kind must be one of"),
    ("tp_ddp_break_even_tokens: zero layers", lambda: theory.tp_ddp_break_even_tokens(1e6, 0, 64, 4), "layers must be"),
    # memory, speedup, communication
    ("model_state_bytes: negative parameters", lambda: theory.model_state_bytes(-5), "n_params must be >= 0"),
    ("model_state_bytes: an unknown optimizer", lambda: theory.model_state_bytes(5, "lamb"),
     "optimizer must be one of"),
    ("mlp_activation_bytes: an unknown precision (was KeyError)",
     lambda: theory.mlp_activation_bytes(8, [4, 8, 2], "bf16"), "precision must be one of"),
    ("mlp_activation_bytes: one width", lambda: theory.mlp_activation_bytes(8, [4]), "widths must list at least 2"),
    ("transformer_activation_bytes: zero heads", lambda: theory.transformer_activation_bytes(1, 16, 64, 2, 0),
     "heads must be a whole number >= 1"),
    ("transformer_activation_bytes: an unknown precision (was KeyError)",
     lambda: theory.transformer_activation_bytes(1, 16, 64, 2, 4, "fp8"), "precision must be one of"),
    ("transformer_params: negative layers", lambda: theory.transformer_params(-2, 64), "layers must be"),
    ("strategy_memory: zero stages", lambda: theory.strategy_memory({"parameters": 4.0}, 8.0, 4, pp=0),
     "pp must be a whole number >= 1"),
    ("advise: no devices", lambda: theory.advise(1000, 8.0, 4, 1e9, 0), "devices must be a whole number >= 1"),
    ("amdahl: p below one", lambda: theory.amdahl(0.5, 0.1), "p must be >= 1"),
    ("gustafson: NaN p", lambda: theory.gustafson(NAN, 0.1), "p must be finite"),
    ("busbw: an unknown collective (was KeyError)", lambda: theory.busbw(1e6, 1e-3, 4, "all-reduce"),
     "op must be one of"),
    ("ring_allreduce_time: p = 0", lambda: theory.ring_allreduce_time(1e6, 0, 1e-5, 1e-9), "p must be a whole"),
    # prediction, precision
    ("predict_step: NaN p (passed `p < 1`)",
     lambda: theory.predict_step({"backward": 1.0}, (4,), NAN, theory.Link(1e-5, 1e-9)), "p must be finite"),
    ("predict_step: negative bucket", lambda: theory.predict_step({}, (-4,), 2, theory.Link(1e-5, 1e-9)),
     "each of buckets must be >= 0"),
    ("article_step: p = 0 (was a ZeroDivisionError)", lambda: theory.article_step(1.0, 1e6, 0, 1e-5, 1e9),
     "p must be a whole number >= 1"),
    ("ddp_buckets: cap = 0 (never returned)", lambda: theory.ddp_buckets(2**22, cap=0), "cap must be a whole"),
    ("autocast_weight_copy_bytes: a negative width", lambda: theory.autocast_weight_copy_bytes([4, -8, 2]),
     "each of widths"),
    ("grad_scale_trace: growth_interval = 0", lambda: theory.grad_scale_trace(2.0**16, [False], 0),
     "growth_interval must be a whole number >= 1"),
    ("a string for a number", lambda: theory.bubble_fraction("4", 8), "p must be a number"),
    ("a bool for a count", lambda: theory.bubble_fraction(True, 8), "p must be a number"),
]


@pytest.mark.parametrize("what, call, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_an_impossible_input_is_refused_with_its_reason(what, call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_possible_inputs_still_price_as_before():
    """The checks take what the chapters pass: numpy integers, arrays, floats that are whole."""
    assert theory.bubble_fraction(np.int64(4), np.arange(1, 4)).tolist() == pytest.approx([3 / 4, 3 / 5, 3 / 6])
    assert theory.peak_in_flight("1F1B", 4, 8, 3) == 1 and theory.peak_in_flight("GPipe", 4, 8, 0) == 8
    assert theory.amdahl(np.linspace(1, 8, 5), 0.0).tolist() == pytest.approx(np.linspace(1, 8, 5).tolist())
    assert theory.sharded_state_bytes(7e9, 8, "ZeRO-3")["parameters"] == pytest.approx(4 * 7e9 / 8)
    assert theory.segment_bounds(5, 2) == [(0, 3), (3, 5)]
    assert theory.tp_ddp_break_even_tokens(1e6, 2, 64, 1) == math.inf
    assert theory.step_collectives("DDP", 10, 0, 4, 1, 2, 1, 1, 64)[("all_reduce", "backward")] == (1, 40)
