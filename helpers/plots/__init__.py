"""Figures for the chapters, one module per topic. Each returns a matplotlib Figure and never calls
``plt.show``; colours come from ``style.COLORS``, one per kind of thing."""
from .training import loss_curves, same_curves, digits_grid, step_time_distribution, resume_curves  # noqa: F401
from .memory import memory_bars, saved_bytes_vs_batch  # noqa: F401
from .parallel import dp_timeline, bucket_sweep, pipeline_timeline, bubble_vs_micro_batches  # noqa: F401
from .pipelining import schedule_gantt, idle_vs_micro_batches, in_flight_bars  # noqa: F401
from .precision import gradient_magnitudes, underflow_over_training, scale_traces  # noqa: F401
from .scaling import (allreduce_fit, amdahl_curves, phase_bars, step_prediction,  # noqa: F401
                      strong_scaling, weak_scaling)
from .prediction import speedup_predictions, step_parts  # noqa: F401
from .sharding import traffic_bars, step_time_curves  # noqa: F401
from .style import COLORS, finish  # noqa: F401
