"""Device-memory accounting shared by the engine (budgets, emulated out-of-memory) and the benchmark.

- `parse_size`, `format_size`: "1GiB" <-> bytes.
- `TensorMemoryTracker`: live/peak bytes of tensor storages via a dispatch mode; optional emulated
  capacity that raises torch.OutOfMemoryError; `SingleSeedOutOfMemoryError`, the one that no K avoids.
- `DeviceMemory`: the same readings on a CPU (tracker) and on CUDA (allocator statistics and cap).
- `NvmlSampler`: NVML device-used bytes sampled by a thread (unavailable, not failing, without a GPU).
- `process_peak_rss_bytes`: the process's peak RSS.
"""
from cherry.memory.device import DeviceMemory, process_peak_rss_bytes
from cherry.memory.nvml import NvmlSampler
from cherry.memory.sizes import format_size, parse_size
from cherry.memory.tracker import SingleSeedOutOfMemoryError, TensorMemoryTracker

__all__ = [
    "DeviceMemory",
    "NvmlSampler",
    "SingleSeedOutOfMemoryError",
    "TensorMemoryTracker",
    "format_size",
    "parse_size",
    "process_peak_rss_bytes",
]
