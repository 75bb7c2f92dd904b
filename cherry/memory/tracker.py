"""Live and peak bytes of tensor storages, measured from inside the dispatcher (the CPU's "allocator").

`TensorMemoryTracker` is a `TorchDispatchMode`: every aten op run on the entering thread while it is
active passes through it, so it sees each output tensor. It counts the output's untyped storage once
(keyed by data pointer; views and in-place results alias an existing storage and add nothing) and
uncounts it when the storage is freed (``weakref.finalize``; torch keeps one Python object per storage,
so the finalizer fires when the C++ storage dies). Autograd's saved tensors are forward outputs, so they
are counted; backward ops run through the same mode on the CPU, so gradients are counted too.

Invariants: ``live_bytes`` = sum of nbytes of storages created inside (or registered) and not yet freed;
``peak_bytes`` >= ``live_bytes`` and is the maximum of ``live_bytes`` since the last `reset_peak`.
With a capacity, an op whose new storages would push ``live_bytes`` above it raises
``torch.OutOfMemoryError`` (the type a GPU raises) and its outputs are dropped uncounted.

Limits (documented, tested where possible):
- Dispatch modes are thread-local: tensors created on other threads (a prefetch thread, DataLoader
  workers) are invisible; count them with `register_external` once they reach the training thread.
- Storages created before entering are invisible unless registered; outputs that alias an input's
  storage (views, in-place, ``out=``) are never counted as new, even if the input was untracked (ops
  whose schema says every output aliases an input are not scanned at all: the per-op cost that
  dominates a small micro-batch's step on the CPU).
- An in-place storage resize (``resize_``, ``out=`` growing a tensor) is not re-measured.
- The check happens after the op allocated: the process briefly holds the refused tensor.
"""
from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cherry.memory.sizes import format_size, parse_size


def _storages_of(tensor: torch.Tensor) -> list[torch.UntypedStorage]:
    """The storages that hold ``tensor``'s data (several for sparse layouts); [] when it has none."""
    layout = tensor.layout
    if layout is torch.strided and not tensor.is_meta and type(tensor) is torch.Tensor:
        return [tensor.untyped_storage()]  # the fast path: plain dense tensors
    if tensor.is_meta:
        return []
    if layout == torch.sparse_coo:
        return _storages_of(tensor._indices()) + _storages_of(tensor._values())
    if layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (tensor.crow_indices(), tensor.col_indices(), tensor.values())
        return [s for p in parts for s in _storages_of(p)]
    if layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = (tensor.ccol_indices(), tensor.row_indices(), tensor.values())
        return [s for p in parts for s in _storages_of(p)]
    try:
        return [tensor.untyped_storage()]
    except (RuntimeError, NotImplementedError, TypeError):  # wrapper subclasses without data
        return []


def _tensors_in(obj) -> list[torch.Tensor]:
    """Tensors inside an op's arguments or result (nested tuples, lists, dicts); cheaper than pytree."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _tensors_in(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _tensors_in(item)]
    return []


_ALIASES_ONLY: dict = {}


def _aliases_only(func) -> bool:
    """True when every output of ``func`` aliases an input by its schema (views such as ``t``/``slice``,
    in-place ops, ``out=`` variants, ops returning nothing): such an op never creates a storage, so
    the tracker need not look at its outputs. Cached per op: most calls of a training step are these."""
    known = _ALIASES_ONLY.get(func)
    if known is None:
        try:
            known = all(r.alias_info is not None for r in func._schema.returns)
        except AttributeError:  # not an OpOverload with a schema: scan its outputs as usual
            known = False
        _ALIASES_ONLY[func] = known
    return known


def _validate_capacity(capacity_bytes) -> int | None:
    if capacity_bytes is None:
        return None
    capacity = parse_size(capacity_bytes)
    if capacity <= 0:
        raise ValueError(f"capacity_bytes {capacity_bytes!r} is not positive: expected bytes > 0 or None")
    return capacity


class SingleSeedOutOfMemoryError(torch.OutOfMemoryError):
    """An out-of-memory of a micro-batch of one seed: no K fits this logical batch (K alone stops
    here; only recomputation, or a larger device, goes further). Raised by whoever ran the micro-batch
    (cherry's executor, the baselines' K search); the benchmark records it as ``oom_single_seed``."""


class TensorMemoryTracker(TorchDispatchMode):
    """Context manager counting live and peak bytes of tensor storages; optionally an emulated capacity.

    ``capacity_bytes``: None (no limit), a positive int, or a size string such as ``"1GiB"``.
    """

    def __init__(self, capacity_bytes: int | str | None = None):
        super().__init__()
        self.capacity_bytes = _validate_capacity(capacity_bytes)
        # RLock: a finalizer can fire (garbage collection) while this thread holds the lock.
        self._lock = threading.RLock()
        self._entries: dict[int, tuple] = {}  # data_ptr -> (token, nbytes, external, weak reference)
        self._next_token = 0
        self._live_bytes = 0
        self._external_bytes = 0
        self._peak_bytes = 0
        self.num_refused = 0

    # ---------------------------------------------------------------- readings
    @property
    def live_bytes(self) -> int:
        """Bytes of counted storages alive now (tracked and registered)."""
        return self._live_bytes

    @property
    def peak_bytes(self) -> int:
        """Maximum of `live_bytes` since creation or the last `reset_peak`."""
        return self._peak_bytes

    @property
    def external_bytes(self) -> int:
        """The part of `live_bytes` that came from `register_external`."""
        return self._external_bytes

    def reset_peak(self) -> None:
        """Starts a new peak window at the current live bytes."""
        with self._lock:
            self._peak_bytes = self._live_bytes

    # ---------------------------------------------------------------- counting
    def register_external(self, tensors: torch.Tensor | Iterable[torch.Tensor]) -> int:
        """Counts tensors allocated outside the mode (parameters, optimizer state, staged features).

        Storages already counted are skipped, so calling it again is harmless. Returns the bytes newly
        counted. Raises TypeError for a non-tensor item and torch.OutOfMemoryError when the capacity
        would be exceeded (nothing is counted then).
        """
        items = [tensors] if isinstance(tensors, torch.Tensor) else tensors
        if not isinstance(items, Iterable):
            raise TypeError(f"tensors has type {type(tensors).__name__}: expected a tensor or an iterable of tensors")
        storages = []
        for index, tensor in enumerate(items):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"tensors[{index}] has type {type(tensor).__name__}: expected a torch.Tensor")
            storages.extend(_storages_of(tensor))
        added_bytes, message = self._admit(storages, inputs=(), external=True, what="register_external")
        if message is not None:
            raise torch.OutOfMemoryError(message)
        return added_bytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _aliases_only(func):  # views, in-place and out= ops: nothing new to count, skip the scan
            return out
        if type(out) is torch.Tensor and out.layout is torch.strided:
            ptr = out.untyped_storage().data_ptr()
            if ptr == 0 or ptr in self._entries:  # empty, or a storage already counted
                return out
        outputs = [out] if type(out) is torch.Tensor else _tensors_in(out)
        storages = [s for t in outputs for s in _storages_of(t)]
        _, message = self._admit(storages, inputs=(args, kwargs), external=False, what=func)
        if message is not None:
            del out, outputs, storages  # drop the refused tensors before the exception can pin them
            raise torch.OutOfMemoryError(message)
        return out

    def _admit(self, storages, inputs, external: bool, what) -> tuple[int, str | None]:
        """Counts the new storages: (bytes added, None), or (0, out-of-memory message) counting nothing."""
        with self._lock:
            new: dict[int, torch.UntypedStorage] = {}
            for storage in storages:
                ptr = storage.data_ptr()
                if ptr != 0 and ptr not in self._entries and storage.nbytes() > 0:
                    new[ptr] = storage
            if not new:  # the common case for views and in-place ops on tracked tensors
                return 0, None
            # Outputs sharing an input's storage (views, in-place, out=) allocate nothing new, even
            # when that input was never tracked. Scanned only when an untracked output exists.
            for tensor in _tensors_in(inputs):
                for storage in _storages_of(tensor):
                    new.pop(storage.data_ptr(), None)
            added_bytes = sum(s.nbytes() for s in new.values())
            if self.capacity_bytes is not None and self._live_bytes + added_bytes > self.capacity_bytes:
                self.num_refused += 1
                free_bytes = max(self.capacity_bytes - self._live_bytes, 0)
                return 0, (
                    f"Emulated device out of memory. Tried to allocate {format_size(added_bytes)} "
                    f"(in {what}); emulated device capacity {format_size(self.capacity_bytes)} of which "
                    f"{format_size(self._live_bytes)} is allocated by tensors and {format_size(free_bytes)} is free."
                )
            for ptr, storage in new.items():
                token = self._next_token
                self._next_token += 1
                nbytes = storage.nbytes()
                # a weak reference with a callback: fires when the storage dies, like
                # weakref.finalize, at a fraction of its cost per tensor (kept alive by the entry)
                ref = weakref.ref(storage, functools.partial(self._released, ptr, token))
                self._entries[ptr] = (token, nbytes, external, ref)
                self._live_bytes += nbytes
                if external:
                    self._external_bytes += nbytes
            self._peak_bytes = max(self._peak_bytes, self._live_bytes)
            return added_bytes, None

    def _released(self, ptr: int, token: int, _ref) -> None:
        self._release(ptr, token)

    def _release(self, ptr: int, token: int) -> None:
        with self._lock:
            entry = self._entries.get(ptr)
            if entry is None or entry[0] != token:  # the pointer was reused by a newer storage
                return
            del self._entries[ptr]
            self._live_bytes -= entry[1]
            if entry[2]:
                self._external_bytes -= entry[1]

    def __repr__(self) -> str:
        cap = "none" if self.capacity_bytes is None else format_size(self.capacity_bytes)
        return f"TensorMemoryTracker(live={format_size(self._live_bytes)}, peak={format_size(self._peak_bytes)}, capacity={cap})"
