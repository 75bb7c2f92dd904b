"""Hooks through which the engine is measured, without measuring anything itself.

The engine stays pure (no clocks, no printing): it calls ``probe.phase(name)`` around each phase
and `DeviceMemoryLike` methods around each micro-batch. `cherry.bench` supplies real
implementations; the defaults do nothing.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Optional, Protocol

import torch

PHASES = ("sample", "plan", "gather", "forward_backward", "optimizer")


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
