"""Device-used bytes as NVML (nvidia-smi) sees them, sampled by a background thread.

NVML counts everything on the device: the CUDA context, the caching allocator's reserve, other
processes. It runs GBs above ``max_memory_allocated``, so records keep both, and the idle baseline
(used bytes when sampling started) so the run's own share can be told apart.

Contract: on a machine without NVML (no driver, no GPU, no ``pynvml`` module) nothing raises;
``available`` is False and ``reason`` says why; the readings are None. ``device_index`` is NVML's
index, which equals CUDA's unless ``CUDA_VISIBLE_DEVICES`` reorders devices.
"""
from __future__ import annotations

import threading


class NvmlSampler:
    """Context manager sampling NVML used bytes of one device every ``interval_s`` seconds."""

    def __init__(self, device_index: int = 0, interval_s: float = 0.01):
        if isinstance(device_index, bool) or not isinstance(device_index, int) or device_index < 0:
            raise ValueError(f"device_index {device_index!r} is invalid: expected an int >= 0")
        if isinstance(interval_s, bool) or not isinstance(interval_s, (int, float)) or not interval_s > 0:
            raise ValueError(f"interval_s {interval_s!r} is invalid: expected a number of seconds > 0")
        self.device_index = device_index
        self.interval_s = float(interval_s)
        self.available = False
        self.reason = "not started"
        self.baseline_bytes: int | None = None
        self.peak_bytes: int | None = None
        self.total_bytes: int | None = None
        self.num_samples = 0
        self._pynvml = None
        self._handle = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def peak_above_baseline_bytes(self) -> int | None:
        """Peak minus the idle baseline: what the run added on the device (None when unavailable)."""
        if self.peak_bytes is None or self.baseline_bytes is None:
            return None
        return max(self.peak_bytes - self.baseline_bytes, 0)

    def _used_bytes(self) -> int:
        return int(self._pynvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def _start(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            self.reason = f"pynvml (nvidia-ml-py) not installed: {exc}"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(self.device_index)
            self._pynvml = pynvml
            self.total_bytes = int(pynvml.nvmlDeviceGetMemoryInfo(self._handle).total)
            self.baseline_bytes = self._used_bytes()
        except pynvml.NVMLError as exc:
            pynvml.nvmlShutdown()
            self._pynvml = self._handle = None
            self.reason = f"NVML device {self.device_index} unavailable: {type(exc).__name__}: {exc}"
            return
        self.peak_bytes = self.baseline_bytes
        self.num_samples = 1
        self.available = True
        self.reason = "ok"
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cherry-nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> int | None:
        """Takes one sample now (also called by the thread); returns used bytes or None when unavailable."""
        if self._pynvml is None:
            return None
        try:
            used = self._used_bytes()
        except self._pynvml.NVMLError:  # a transient read error must not kill the measurement
            return None
        with self._lock:
            self.num_samples += 1
            self.peak_bytes = max(self.peak_bytes or 0, used)
        return used

    def reset_peak(self) -> None:
        """Starts a new peak window at the current used bytes (no-op when unavailable)."""
        used = self.sample()
        if used is not None:
            with self._lock:
                self.peak_bytes = used

    def __enter__(self) -> "NvmlSampler":
        if self._thread is not None:
            raise RuntimeError("NvmlSampler is not re-entrant: exit it before entering again")
        self._start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self.sample()  # a final reading so a peak at the very end is not missed
        if self._pynvml is not None:
            try:
                self._pynvml.nvmlShutdown()
            except self._pynvml.NVMLError:
                pass
            self._pynvml = self._handle = None

    def __repr__(self) -> str:
        return (f"NvmlSampler(device_index={self.device_index}, available={self.available}, "
                f"baseline_bytes={self.baseline_bytes}, peak_bytes={self.peak_bytes}, reason={self.reason!r})")
