"""Execution: gradient-accumulating executor, OOM re-planning, trainer, layer-wise inference."""
from cherry.execution.executor import (ExecutorOptions, MicrobatchExecutor, MicrobatchOutOfMemoryError,
                                       PlannedBatch, StepStats)
from cherry.execution.inference import chunk_size_for, evaluate
from cherry.execution.trainer import EpochResult, Trainer

__all__ = [
    "EpochResult", "ExecutorOptions", "MicrobatchExecutor", "MicrobatchOutOfMemoryError", "PlannedBatch",
    "StepStats", "Trainer", "chunk_size_for", "evaluate",
]
