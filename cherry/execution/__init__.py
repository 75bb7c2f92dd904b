"""Execution: gradient-accumulating executor, OOM re-planning, trainer, layer-wise inference."""
from cherry.execution.executor import (ExecutorOptions, MicrobatchExecutor, MicrobatchOutOfMemoryError,
                                       PlannedBatch, StepStats)
from cherry.execution.inference import chunk_size_for, evaluate
from cherry.execution.probe import PHASES, NullProbe
from cherry.execution.trainer import EpochResult, Trainer, TrainConfig

__all__ = [
    "PHASES", "EpochResult", "ExecutorOptions", "MicrobatchExecutor", "MicrobatchOutOfMemoryError",
    "NullProbe", "PlannedBatch", "StepStats", "TrainConfig", "Trainer", "chunk_size_for", "evaluate",
]
