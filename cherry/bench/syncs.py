"""`SyncCounter`: counts the operations that force a host-device synchronisation, on any device.

A `TorchDispatchMode` sees every ATen call made inside it (forward and autograd backward). These
force the host to wait for the device on a GPU, so counting them on the CPU predicts the syncs of a
GPU run without one:
- reading a value: ``aten._local_scalar_dense`` / ``aten.item`` (``int(t)``, ``float(t)``, ``bool(t)``,
  ``t.item()``), ``aten.is_nonzero``, ``aten.equal``;
- ops whose output size depends on the data: ``nonzero``, ``unique*``, ``masked_select``,
  ``repeat_interleave`` with a tensor of repeats and no ``output_size``;
- copies from a device to the host (``_to_copy``/``copy_`` with a CUDA source and a CPU result).
``Tensor.tolist()`` and ``Tensor.numpy()`` do not dispatch; they are counted by wrapping them.

``host_tensors``: tensors that live on the host on every device (a `DegreeLayout`'s
``batch_sizes``, which `PackedSequence` requires on the CPU); reading them is not a sync and is not
counted. ``counts`` maps each counted op to its number of calls.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_READS = {"_local_scalar_dense", "item", "is_nonzero", "equal"}
_DATA_DEPENDENT = {"nonzero", "unique", "_unique", "_unique2", "unique_dim", "unique_consecutive",
                   "masked_select", "nonzero_static"}


def _storage_ptr(t: torch.Tensor) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class SyncCounter(TorchDispatchMode):
    """Context manager counting sync-forcing ops (see module docstring); ``total`` is their sum."""

    def __init__(self, host_tensors: Iterable[torch.Tensor] = ()) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self._host = {_storage_ptr(t) for t in host_tensors}
        self._saved: dict = {}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def _is_host(self, t: object) -> bool:
        return isinstance(t, torch.Tensor) and _storage_ptr(t) in self._host

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        first = args[0] if args else None
        if name in _READS and not self._is_host(first):
            self.counts[name] += 1
        elif name in _DATA_DEPENDENT:
            self.counts[name] += 1
        elif name == "repeat_interleave" and func._overloadname in ("Tensor", "self_Tensor") \
                and kwargs.get("output_size") is None:
            self.counts["repeat_interleave(no output_size)"] += 1
        out = func(*args, **kwargs)
        if name in ("_to_copy", "copy_") and isinstance(first, torch.Tensor):
            src = args[1] if name == "copy_" else first
            dst = out if name == "_to_copy" else first
            if isinstance(src, torch.Tensor) and src.device.type != "cpu" and dst.device.type == "cpu":
                self.counts["device_to_host_copy"] += 1
        return out

    def __enter__(self):
        counter = self
        for method in ("tolist", "numpy"):
            original = getattr(torch.Tensor, method)
            self._saved[method] = original

            def wrapped(t, *a, _original=original, _method=method, **k):
                if not counter._is_host(t):
                    counter.counts[_method] += 1
                return _original(t, *a, **k)

            setattr(torch.Tensor, method, wrapped)
        return super().__enter__()

    def __exit__(self, *exc):
        for method, original in self._saved.items():
            setattr(torch.Tensor, method, original)
        self._saved.clear()
        return super().__exit__(*exc)
