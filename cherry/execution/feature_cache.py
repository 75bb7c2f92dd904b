"""The device-resident feature cache of a run, and the counting of the feature rows it saves moving.

`FeatureCache(features, plan, order, device)` holds the rows a `cherry.planning.residency.ResidencyPlan`
keeps on the device: ``cache`` [C, F] (the ``C`` hottest rows of ``order``), ``slot_of`` [N] (each
row's slot, -1 for a miss) on the device, and the host table the misses are read from. On a GPU the
host table is pinned (`pin_in_place`) and `gather` is one
``cherry::cache_gather`` launch: hits from the cache, misses read through the table's mapped address
(UVA, zero-copy) on the current stream (the executor's prefetch stream). On the CPU the device is
emulated: the cache's storage is counted by the run's `DeviceMemory` (its capacity is shared with the
activations) and `gather` is the same op's CPU kernel. With every row cached ("all") on the CPU the
cache is the feature table itself (counted, not copied).

`FeatureCache.missed(nodes)` counts, on the host copy of ``slot_of``, how many of ``nodes`` are misses:
the rows a gather of ``nodes`` moves host-to-device. It reads host tensors only (no device sync).
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry.ops.feature_cache import _cache_gather
from cherry.planning.residency import ALL, ResidencyPlan, slot_map


def pin_in_place(table: torch.Tensor) -> torch.Tensor:
    """``table`` in page-locked host memory, which the device reads through its mapped address (UVA):
    itself when already pinned, else a pinned copy. (Registering the pages in place with
    ``cudaHostRegister`` would save the copy, but a refused registration leaves a CUDA error that the
    next kernel launch check reports; the copy is the safe way until that is handled.)"""
    return table if table.is_pinned() else table.contiguous().pin_memory()


class FeatureCache:
    """The rows of ``features`` that ``plan`` keeps on ``device`` (see module docstring)."""

    def __init__(self, features: torch.Tensor, plan: ResidencyPlan, order: torch.Tensor,
                 device: torch.device | str, memory=None) -> None:
        if not isinstance(plan, ResidencyPlan):
            raise TypeError(f"plan must be a ResidencyPlan, got {type(plan).__name__}")
        if features.dim() != 2 or features.shape[0] != plan.num_rows:
            raise ValueError(f"features must be 2-D with the plan's {plan.num_rows} rows, got {tuple(features.shape)}")
        if order.shape != (plan.num_rows,):
            raise ValueError(f"order must hold every one of the {plan.num_rows} rows, got {tuple(order.shape)}")
        self.plan = plan
        self.device = torch.device(device)
        self.row_bytes = features.shape[1] * features.element_size()
        on_cpu = self.device.type == "cpu"
        if plan.mode == ALL and on_cpu:  # the table itself is the cache: nothing to copy
            self.slot_of_host = torch.arange(plan.num_rows, dtype=torch.int64)
            cache = features
        else:
            self.slot_of_host = slot_map(order.cpu(), plan.cache_rows)
            cache = features.index_select(0, order[:plan.cache_rows].to(features.device))
        self.cache = cache.to(self.device)
        self.slot_of = self.slot_of_host.to(self.device)
        if on_cpu or features.device.type != "cpu":
            self.host = features
        elif plan.mode == ALL:  # every read is a hit: the cache (N rows) stands in for the host table
            self.host = self.cache
        else:
            self.host = pin_in_place(features)
        register = getattr(memory, "register_external", None)
        if register is not None and on_cpu:  # the emulated device holds the cache and its index
            register([self.cache, self.slot_of])
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # once: the copies are done before any stream reads them

    @property
    def nbytes(self) -> int:
        """Device bytes the cache holds (rows and slot index)."""
        return self.cache.numel() * self.cache.element_size() + self.slot_of.numel() * self.slot_of.element_size()

    def missed(self, nodes: torch.Tensor) -> int:
        """How many of ``nodes`` (host ids) are not in the cache."""
        return int((self.slot_of_host.index_select(0, nodes.cpu()) < 0).sum())

    def gather(self, nodes: torch.Tensor) -> torch.Tensor:
        """``features[nodes]`` on the device (``nodes`` on the device): hits from the cache, misses
        read from the host table (on a GPU through its mapped address, on the current stream)."""
        return _cache_gather(self.slot_of, self.cache, self.host, nodes)


def moved_rows(cache: Optional[FeatureCache], nodes: torch.Tensor, features_on_device: bool) -> int:
    """Rows a gather of ``nodes`` moves host-to-device: none when the features live on the device,
    the misses with a cache, all of them without one."""
    if features_on_device:
        return 0
    if cache is None:
        return int(nodes.numel())
    return cache.missed(nodes)
