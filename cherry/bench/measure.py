"""Measurement shared by every system: per-step phase times and run-level memory peaks.

`TimingProbe` implements the engine's ``probe.phase(name)``. Time is *exclusive*: when a phase opens
inside another, the outer one stops accumulating until the inner one closes, so the phases of a step
never add up to more than its total; the remainder is reported as ``other``. On the CPU a phase edge
reads ``time.perf_counter``. On CUDA it records a timing event on the calling thread's current stream
(no host wait). The step's edges are resolved into seconds once, at `TimingProbe.end_step`, after
one wait for the step's last event. A phase is charged with the stream time between its edges (the
kernels it launched, and any idle gap while the host worked). So the side-stream preparation keeps
overlapping compute, and there is one synchronisation per step instead of one per phase edge.

`RunPeakMemory` wraps a `cherry.memory.DeviceMemory` for the systems: engines reset the peak around
each micro-batch, which would lose the run's peak; the wrapper folds each window's peak into a
run-level maximum before resetting.

`summarize` computes median, p10, p90 and mean of raw per-step values after dropping the warm-up.
"""
from __future__ import annotations

import math
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import torch

from cherry.probe import OTHER, PHASES



@dataclass(frozen=True)
class StepTiming:
    """One step: wall seconds and exclusive seconds per phase (every name of `PHASES` present)."""

    total_s: float
    phases_s: dict[str, float] = field(default_factory=dict)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(values: Sequence[float], warmup: int = 0) -> dict[str, Optional[float]]:
    """``{"median", "p10", "p90", "mean"}`` of ``values[warmup:]``; all None when nothing is left."""
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup {warmup!r} is invalid: expected an int >= 0")
    kept = sorted(float(v) for v in list(values)[warmup:])
    if not kept:
        return {"median": None, "p10": None, "p90": None, "mean": None}
    return {"median": statistics.median(kept), "p10": _percentile(kept, 0.10),
            "p90": _percentile(kept, 0.90), "mean": statistics.fmean(kept)}


class _HostClock:
    """Phase edges as ``time.perf_counter`` readings."""

    def mark(self) -> float:
        return time.perf_counter()

    def wait(self, last, marks) -> None:
        pass

    def seconds(self, begin, end) -> float:
        return end - begin


class _EventClock:
    """Phase edges as CUDA timing events on the current stream, resolved after one wait per step.

    ``event_factory`` makes an event (``torch.cuda.Event(enable_timing=True)`` by default; tests pass
    a fake with ``record()``, ``synchronize()``, ``query()`` and ``elapsed_time(other)`` in ms)."""

    def __init__(self, event_factory=None) -> None:
        self._factory = event_factory or (lambda: torch.cuda.Event(enable_timing=True))

    def mark(self):
        event = self._factory()
        event.record()  # on the calling thread's current stream: no host wait
        return event

    def wait(self, last, marks) -> None:
        last.synchronize()  # the step's one host wait
        for event in marks:  # an edge recorded on another stream (a side-stream phase) may be later
            if not event.query():
                event.synchronize()

    def seconds(self, begin, end) -> float:
        return begin.elapsed_time(end) / 1000.0


class TimingProbe:
    """Times steps and their phases (see module docstring).

    Use: ``start_step()``, the system's step (calling ``phase(name)``), ``end_step()``. A phase
    outside a step is not timed (construction, evaluation). Phase names must be in `PHASES`.
    ``event_factory`` (CUDA only) replaces ``torch.cuda.Event`` (for tests without a GPU).
    """

    def __init__(self, device: torch.device | str = "cpu", event_factory=None) -> None:
        self.device = torch.device(device)
        self._clock = _EventClock(event_factory) if self.device.type == "cuda" else _HostClock()
        self.steps: list[StepTiming] = []
        self._lock = threading.Lock()
        self._local = threading.local()
        self._step_start = None
        self._segments: Optional[list] = None  # (phase, begin edge, end edge) of the open step

    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def start_step(self) -> None:
        if self._step_start is not None:
            raise RuntimeError("start_step() called twice without end_step()")
        self._segments = []
        self._step_start = self._clock.mark()

    def end_step(self) -> StepTiming:
        """Close the step; returns (and keeps) its timing."""
        if self._step_start is None:
            raise RuntimeError("end_step() called without start_step()")
        end = self._clock.mark()
        with self._lock:
            segments, self._segments = self._segments, None
        self._clock.wait(end, [m for seg in segments for m in seg[1:]])
        total = self._clock.seconds(self._step_start, end)
        phases = {name: 0.0 for name in PHASES}
        for name, begin, stop in segments:
            phases[name] += self._clock.seconds(begin, stop)
        phases[OTHER] = max(total - sum(phases.values()), 0.0)
        timing = StepTiming(total_s=total, phases_s=phases)
        self.steps.append(timing)
        self._step_start = None
        return timing

    def abort_step(self) -> None:
        """Drop an unfinished step (it ended in an out-of-memory or a timeout)."""
        with self._lock:
            self._segments = None
        self._step_start = None
        self._local.stack = []

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"phase {name!r} is unknown: expected one of {PHASES}")
        if self._step_start is None:
            yield
            return
        stack = self._stack()
        now = self._clock.mark()
        if stack:  # pause the enclosing phase: time is exclusive
            outer, since = stack[-1]
            self._charge(outer, since, now)
        stack.append([name, now])
        try:
            yield
        finally:
            end = self._clock.mark()
            inner, since = stack.pop()
            self._charge(inner, since, end)
            if stack:
                stack[-1][1] = end

    def _charge(self, name: str, begin, end) -> None:
        with self._lock:
            if self._segments is not None:
                self._segments.append((name, begin, end))

    def step_times_s(self) -> list[float]:
        return [s.total_s for s in self.steps]

    def phase_times_s(self, name: str) -> list[float]:
        return [s.phases_s[name] for s in self.steps]


class RunPeakMemory:
    """A `DeviceMemory` whose ``reset_peak`` keeps the run's peak (see module docstring).

    Every other attribute is the wrapped object's, so systems use it as the real thing.
    """

    def __init__(self, memory) -> None:
        self._memory = memory
        self._run_peak_bytes = 0
        self._run_peak_reserved_bytes: Optional[int] = None

    def __getattr__(self, name: str):
        return getattr(self._memory, name)

    def _fold(self) -> None:
        self._run_peak_bytes = max(self._run_peak_bytes, int(self._memory.peak_bytes()))
        reserved = self._memory.peak_reserved_bytes()
        if reserved is not None:
            self._run_peak_reserved_bytes = max(self._run_peak_reserved_bytes or 0, int(reserved))

    def reset_peak(self) -> None:
        self._fold()
        self._memory.reset_peak()

    def run_peak_bytes(self) -> int:
        """Peak live tensor bytes since the run entered the device memory."""
        self._fold()
        return self._run_peak_bytes

    def run_peak_reserved_bytes(self) -> Optional[int]:
        """Peak bytes reserved by the CUDA caching allocator (None on the CPU)."""
        self._fold()
        return self._run_peak_reserved_bytes
