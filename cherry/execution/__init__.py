"""Execution: gradient-accumulating executor, OOM re-planning, trainer, layer-wise inference."""
from cherry.execution.executor import (ExecutorOptions, MicrobatchExecutor, MicrobatchOutOfMemoryError,
                                       PlannedBatch, StepStats)
from cherry.execution.partition_check import PartitionCheck
from cherry.execution.inference import chunk_size_for, evaluate
from cherry.execution.trainer import EpochResult, Trainer
from cherry.execution.verify import ExactnessReport, ParameterDifference, check_exact, compare_gradients
from cherry.execution.exactness import ExactnessError, guard_model

__all__ = [
    "EpochResult", "ExecutorOptions", "MicrobatchExecutor", "MicrobatchOutOfMemoryError", "PlannedBatch",
    "StepStats", "Trainer", "chunk_size_for", "evaluate", "ExactnessReport", "ParameterDifference",
    "check_exact", "compare_gradients", "ExactnessError", "guard_model", "PartitionCheck",
]
