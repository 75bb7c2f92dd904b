"""The interface every benchmarked system implements (cherry and each baseline), so one runner and one
measurement code serve them all.

A system is built once per run from the run's `cherry.spec.RunSpec` — with ``budget_bytes`` already
resolved by `cherry.spec.resolve_budget_bytes`, so every system sees the same budget — inside the
run's device memory (so its parameters and state count). The runner then iterates the run's batches
with a `cherry.sampling.BatchLoader` and asks for one optimizer step per `LoadedBatch`. A system that
samples (and plans) ahead sets ``prepares_ahead`` and implements `System.prepare`, which the loader
runs for batch ``i + 1`` on its background thread while batch ``i`` steps; the others sample inside
their step from ``batch.generator``. Inside a step a system reports its phases through
``probe.phase(name)`` with names from `cherry.probe.PHASES`; it measures nothing itself.

Contract of `System.step`: exactly one optimizer step covering all of ``batch.seeds`` (every system
trains the same logical mini-batch); an out-of-memory propagates as ``torch.OutOfMemoryError``.

A system that cannot run here (a missing package or backend, an unsupported configuration) raises
`SystemUnavailable` from its constructor: the run is then recorded as ``skipped`` with that reason.
``spec.num_microbatches`` is None ("auto") only for systems with ``accepts_auto_microbatches``; the
runner records the others as skipped for such a spec without building them.
"""
from __future__ import annotations

import abc
import importlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional

import torch

from cherry.data import Dataset
from cherry.sampling import LoadedBatch
from cherry.systems.table import system_entry

if TYPE_CHECKING:  # the spec reads the systems table; at run time the contract must not import it back
    from cherry.spec import RunSpec

# A missing module under these roots is a bug in the repository, not a missing optional dependency.
_OWN_PACKAGES = ("cherry", "baselines")


class SystemUnavailable(RuntimeError):
    """This system cannot run in this environment or configuration; the message says why (one line)."""


@dataclass(frozen=True)
class StepOutcome:
    loss: float
    num_microbatches: int
    redundancy: Optional[tuple[float, ...]] = None  # per layer, input layer first
    estimated_peak_bytes: Optional[int] = None  # the plan's largest micro-batch estimate
    measured_peak_bytes: Optional[int] = None  # the step's largest measured micro-batch peak
    recompute: Optional[bool] = None  # ran with per-layer activation recomputation (a system that can)
    streamed: Optional[bool] = None  # streamed its input layer's rows in chunks (a system that can)
    oom_recoveries: Optional[int] = None  # out-of-memory re-plans inside the step (a system that re-plans)
    # input-feature traffic (a system that counts it): rows its gathers read, of them rows moved
    # host-to-device, and those rows' bytes
    feature_rows_read: Optional[int] = None
    feature_rows_missed: Optional[int] = None
    feature_bytes_moved: Optional[int] = None


class System(abc.ABC):
    """One benchmarked training system (see module docstring)."""

    name: ClassVar[str]
    accepts_auto_microbatches: ClassVar[bool] = False  # True: accepts num_microbatches=None (K from the budget)
    prepares_ahead: ClassVar[bool] = False  # True: the loader runs `prepare` ahead of each step

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        if not isinstance(dataset, Dataset):
            raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
        # a RunSpec exists only once cherry.spec is imported, so the class is looked up, not imported
        run_spec = getattr(sys.modules.get("cherry.spec"), "RunSpec", None)
        if run_spec is None or not isinstance(spec, run_spec):
            raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
        self.dataset = dataset
        self.spec = spec
        self.device = device
        self.memory = memory
        self.probe = probe

    @classmethod
    def preprocess(cls, dataset: Dataset, spec: RunSpec) -> None:
        """Once-per-dataset host-side work (e.g. a cached seed ordering), run before the run enters the
        device memory and timed apart from the steps (``preprocess_s``). Default: nothing."""

    def prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> Any:
        """Work for one batch done ahead of its step on the loader's thread (``prepares_ahead``)."""
        raise NotImplementedError(f"{type(self).__name__} does not prepare batches ahead")

    @abc.abstractmethod
    def step(self, batch: LoadedBatch) -> StepOutcome:
        """One optimizer step on the logical mini-batch ``batch.seeds``."""

    @abc.abstractmethod
    def evaluate(self) -> dict[str, float]:
        """Train/valid/test accuracy by layer-wise full-neighbour inference (shared evaluator)."""

    def estimator_errors(self) -> list[float]:
        """Relative errors of the system's memory estimator, if it has one."""
        return []

    def close(self) -> None:
        """Release threads and other resources."""


def get_system(name: str):
    """The `System` class registered as ``name``.

    Raises ValueError for an unknown name, `cherry.systems.contract.SystemUnavailable` when a
    third-party package the system needs is missing, and ImportError for a broken module of this
    repository.
    """
    entry = system_entry(name)
    try:
        module = importlib.import_module(entry.module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing.split(".")[0] in _OWN_PACKAGES and not entry.module.startswith(missing):
            raise ImportError(f"system {name!r}: module {missing!r} is missing from this repository") from exc
        if missing.split(".")[0] in _OWN_PACKAGES:
            raise ImportError(f"system {name!r}: module {entry.module!r} does not exist") from exc
        raise SystemUnavailable(f"system {name!r} needs the package {missing!r}, which is not installed") from exc
    cls = getattr(module, "SYSTEM", None)
    if not (isinstance(cls, type) and issubclass(cls, System)):
        raise ImportError(f"{entry.module}.SYSTEM must be a subclass of cherry.systems.contract.System, got {cls!r}")
    return cls
