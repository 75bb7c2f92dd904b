"""Execution: gradient-accumulating executor, OOM re-planning, trainer, layer-wise inference."""
