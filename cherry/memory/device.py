"""One memory interface for a CPU (emulated device) and a CUDA device, plus the process's peak RSS.

`DeviceMemory(device, capacity_bytes)` is a context manager with the same readings on both:
- CPU: a `TensorMemoryTracker`; the capacity is emulated (the tracker raises torch.OutOfMemoryError).
  Tensors created before entering must be counted with `register_external`.
- CUDA: the caching allocator's statistics (``memory_allocated``, ``max_memory_allocated``,
  ``max_memory_reserved`` after ``reset_peak_memory_stats``); the capacity caps the allocator with
  ``set_per_process_memory_fraction(capacity / total)``, which limits *reserved* memory, so the
  allocator raises torch.OutOfMemoryError itself.
  The allocator's statistics are kept on the host at allocation time, so no reading synchronises
  the device (which would stall an overlapped pipeline). The allocator sees every tensor, so
  `register_external` only validates its argument. On exit the fraction is set back to 1.0.

So callers handle a real and an emulated out-of-memory with one ``except torch.OutOfMemoryError``.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable

import torch

from cherry.memory.tracker import TensorMemoryTracker, _validate_capacity


def _validate_device(device) -> torch.device:
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device {device!r} has type {type(device).__name__}: expected a str or torch.device")
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise ValueError(f"device {device!r} is not a device name: expected 'cpu', 'cuda' or 'cuda:N'") from exc
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r} has type {dev.type!r}: expected 'cpu' or 'cuda'")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asked for, but CUDA is not available on this machine")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if not 0 <= index < torch.cuda.device_count():
            raise ValueError(f"device {device!r} out of range: {torch.cuda.device_count()} CUDA devices")
        dev = torch.device("cuda", index)
    return dev


class DeviceMemory:
    """Peak/live bytes and an optional capacity on ``device`` ('cpu', 'cuda', 'cuda:N')."""

    def __init__(self, device: str | torch.device, capacity_bytes: int | str | None = None):
        self.device = _validate_device(device)
        self.capacity_bytes = _validate_capacity(capacity_bytes)
        self._tracker: TensorMemoryTracker | None = None
        if self.device.type == "cpu":
            self._tracker = TensorMemoryTracker(self.capacity_bytes)
        elif self.capacity_bytes is not None:
            total = self.total_bytes()
            if self.capacity_bytes > total:
                raise ValueError(
                    f"capacity_bytes {self.capacity_bytes} exceeds the {total} bytes of {self.device}: "
                    "expected at most the device's memory"
                )
        self._entered = False

    @property
    def is_emulated(self) -> bool:
        """True when the capacity is enforced by the tensor tracker rather than a real allocator."""
        return self._tracker is not None

    def total_bytes(self) -> int | None:
        """The device's physical memory (CUDA), or None on the CPU."""
        if self.device.type == "cuda":
            return int(torch.cuda.get_device_properties(self.device).total_memory)
        return None

    def __enter__(self) -> "DeviceMemory":
        if self._entered:
            raise RuntimeError("DeviceMemory is not re-entrant: exit it before entering again")
        self._entered = True
        if self._tracker is not None:
            self._tracker.__enter__()
        else:
            if self.capacity_bytes is not None:
                torch.cuda.set_per_process_memory_fraction(self.capacity_bytes / self.total_bytes(), self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._entered = False
        if self._tracker is not None:
            self._tracker.__exit__(exc_type, exc, tb)
        else:
            if self.capacity_bytes is not None:
                torch.cuda.set_per_process_memory_fraction(1.0, self.device)

    def register_external(self, tensors: torch.Tensor | Iterable[torch.Tensor]) -> int:
        """Counts tensors created outside (CPU); a no-op on CUDA, whose allocator sees them. Returns bytes counted."""
        if self._tracker is not None:
            return self._tracker.register_external(tensors)
        items = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        for index, tensor in enumerate(items):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"tensors[{index}] has type {type(tensor).__name__}: expected a torch.Tensor")
        return 0

    def live_bytes(self) -> int:
        """Bytes of tensors alive now (allocator's ``memory_allocated`` on CUDA)."""
        if self._tracker is not None:
            return self._tracker.live_bytes
        return int(torch.cuda.memory_allocated(self.device))

    def peak_bytes(self) -> int:
        """Peak bytes of live tensors since entering or the last `reset_peak`."""
        if self._tracker is not None:
            return self._tracker.peak_bytes
        return int(torch.cuda.max_memory_allocated(self.device))

    def peak_reserved_bytes(self) -> int | None:
        """Peak bytes the CUDA caching allocator reserved; None on the CPU (there is no cache)."""
        if self._tracker is not None:
            return None
        return int(torch.cuda.max_memory_reserved(self.device))

    def reset_peak(self) -> None:
        """Starts a new peak window at the current live bytes."""
        if self._tracker is not None:
            self._tracker.reset_peak()
        else:
            torch.cuda.reset_peak_memory_stats(self.device)

    def __repr__(self) -> str:
        return f"DeviceMemory(device={str(self.device)!r}, capacity_bytes={self.capacity_bytes}, emulated={self.is_emulated})"


def process_peak_rss_bytes() -> int:
    """Peak resident set size of this process so far, in bytes (never decreases)."""
    try:
        import resource
    except ImportError:  # Windows: no getrusage; psutil reports the peak working set there
        import psutil

        info = psutil.Process().memory_info()
        return int(getattr(info, "peak_wset", info.rss))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024
