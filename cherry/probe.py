"""Hooks through which every system is measured, without measuring anything itself, and the one
list of phase names.

The engine and the baselines stay pure (no clocks, no printing): they call ``probe.phase(name)``
around each phase (a name of `PHASES`) and `DeviceMemoryLike` methods around each micro-batch.
`cherry.bench.measure` supplies the real implementations; the defaults here do nothing. This module
imports no stage, so every stage and every baseline may import it.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Optional, Protocol

import torch

# sample: sampling (or waiting for the loader's sampling ahead); plan: ordering lookup, split, K;
# slice: building micro-batch blocks (when apart from planning); gather: feature rows to the device;
# forward_backward; optimizer. Records add "other" (step time outside every phase).
PHASES = ("sample", "plan", "slice", "gather", "forward_backward", "optimizer")
OTHER = "other"
TIMED_PHASES = PHASES + (OTHER,)


class Probe(Protocol):
    def phase(self, name: str): ...


class NullProbe:
    """A probe that measures nothing."""

    def phase(self, name: str):
        return nullcontext()


class DeviceMemoryLike(Protocol):
    """What the executor needs of `cherry.memory.DeviceMemory` (peak tracking and capacity)."""

    capacity_bytes: Optional[int]

    def reset_peak(self) -> None: ...

    def peak_bytes(self) -> int: ...


def is_oom(exc: BaseException) -> bool:
    """True for a real or emulated device out-of-memory."""
    return isinstance(exc, torch.OutOfMemoryError)
