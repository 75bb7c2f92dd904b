"""The interface every benchmarked system implements (cherry and each baseline), so one runner and one
measurement code serve them all.

A system is built once per run (inside the run's device memory, so its parameters and state count)
and then asked for optimizer steps on logical mini-batches given as seed ids. Inside a step it reports
its phases through ``probe.phase(name)`` with names from `PHASES`; the runner times them. The system
samples (from the generator it is handed) and measures nothing; the runner only hands seeds, times
the phases and reads `StepOutcome`s.

Contract of `System.step`: exactly one optimizer step covering all ``seeds`` (every system trains the
same logical mini-batch); an out-of-memory propagates as ``torch.OutOfMemoryError``.

A system that cannot run here (a missing package or backend, an unsupported configuration) raises
`SystemUnavailable` from its constructor: the run is then recorded as ``skipped`` with that reason.
Only systems with ``accepts_auto_microbatches = True`` accept ``num_microbatches=None`` ("auto": K from
the budget, or, for a system that never splits, K = 1); the runner records the others as skipped for
such a spec without building them.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Optional

import torch

from cherry.data import Dataset


class SystemUnavailable(RuntimeError):
    """This system cannot run in this environment or configuration; the message says why (one line)."""


PHASES = ("sample", "plan", "slice", "gather", "forward_backward", "optimizer")


@dataclass(frozen=True)
class SystemConfig:
    """What every system is told: the model and the training setup, identical across systems."""

    model: str
    aggr: Optional[str]
    num_layers: int
    hidden: int
    heads: int
    dropout: float
    fanouts: tuple[int, ...]
    batch_size: int
    lr: float
    num_microbatches: Optional[int]  # None = the system chooses (only cherry can)
    budget_bytes: Optional[int]
    seed: int
    options: dict  # system-specific switches (e.g. cherry's ablations), validated by the system


@dataclass(frozen=True)
class StepOutcome:
    loss: float
    num_microbatches: int
    redundancy: Optional[tuple[float, ...]] = None  # per layer, input layer first
    estimated_peak_bytes: Optional[int] = None


class System(abc.ABC):
    """One benchmarked training system (see module docstring)."""

    name: ClassVar[str]
    accepts_auto_microbatches: ClassVar[bool] = False  # True: accepts num_microbatches=None (K from the budget)

    def __init__(self, dataset: Dataset, config: SystemConfig, device: torch.device, memory, probe) -> None:
        self.dataset = dataset
        self.config = config
        self.device = device
        self.memory = memory
        self.probe = probe

    @classmethod
    def preprocess(cls, dataset: Dataset, config: SystemConfig) -> None:
        """Once-per-dataset host-side work (e.g. a cached seed ordering), run before the run enters the
        device memory and timed apart from the steps (``preprocess_s``). Default: nothing."""

    @abc.abstractmethod
    def step(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        """One optimizer step on the logical mini-batch ``seeds``; sampling draws from ``generator``."""

    @abc.abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Train/valid/test accuracy by layer-wise full-neighbour inference (shared evaluator)."""

    def estimator_errors(self) -> list[float]:
        """Relative errors of the system's memory estimator, if it has one."""
        return []

    def close(self) -> None:
        """Release threads and other resources."""
