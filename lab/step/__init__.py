"""The step wing: the GPT-2 decode step and every way of running it (eager, captured, compiled, hand-fused)."""
