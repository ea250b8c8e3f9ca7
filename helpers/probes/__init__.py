"""What a chapter runs in the notebook's own process: single-process baselines, probes and faults."""
