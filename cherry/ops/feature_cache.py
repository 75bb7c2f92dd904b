"""Public op `cache_gather`: rows of a feature table read through a device-resident cache.

``cache_gather(slot_of, cache, host, nodes)`` returns ``out[i] = cache[slot_of[nodes[i]]]`` for a hit
(slot >= 0) and ``host[nodes[i]]`` for a miss (slot -1), on ``cache``'s device. On CUDA ``host`` may
be pinned host memory: the native kernel reads the misses through its mapped address (UVA,
zero-copy) on the current stream. It validates its inputs here, then runs ``torch.ops.cherry``'s
kernel when the extension is in use and the reference (`cherry.ops.reference_cache`) otherwise; the
two give identical rows (both copy). `_cache_gather` skips the checks (they read the indices on the
host) for the executor, which builds ``slot_of`` and takes ``nodes`` from blocks valid by
construction.
"""
from __future__ import annotations

import torch

from cherry.ops import reference_cache as ref
from cherry.ops.extension import extension_available
from cherry.ops.sampling import check_index_vector


def cache_gather(slot_of: torch.Tensor, cache: torch.Tensor, host: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """Rows ``nodes`` of ``host``, hits read from ``cache`` (see module docstring)."""
    check_index_vector("slot_of", slot_of, cache.device if isinstance(cache, torch.Tensor) else None)
    check_index_vector("nodes", nodes, cache.device if isinstance(cache, torch.Tensor) else None)
    for name, t in (("cache", cache), ("host", host)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a 2-D tensor [rows, features], got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
    if cache.shape[1] != host.shape[1] or cache.dtype != host.dtype:
        raise ValueError(f"cache {tuple(cache.shape)} {cache.dtype} and host {tuple(host.shape)} {host.dtype} "
                         "must have the same width and dtype")
    if slot_of.numel() != host.shape[0]:
        raise ValueError(f"slot_of must have one entry per host row ({host.shape[0]}), got {slot_of.numel()}")
    if cache.device.type == "cuda" and host.device.type == "cpu" and not host.is_pinned():
        raise ValueError("host must be pinned (or on the device) for a CUDA cache: its misses are read in place")
    if nodes.numel():
        lo, hi = int(nodes.min()), int(nodes.max())
        if lo < 0 or hi >= host.shape[0]:
            raise ValueError(f"nodes must lie in [0, {host.shape[0]}), found values in [{lo}, {hi}]")
    if slot_of.numel() and (int(slot_of.min()) < -1 or int(slot_of.max()) >= cache.shape[0]):
        raise ValueError(f"slot_of must lie in [-1, {cache.shape[0]}) (-1: not cached)")
    return _cache_gather(slot_of, cache, host, nodes)


def _has_native_op() -> bool:
    """The extension is in use and has this op (a build older than these sources has not)."""
    return extension_available() and hasattr(torch.ops.cherry, "cache_gather")


def _cache_gather(slot_of: torch.Tensor, cache: torch.Tensor, host: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    if cache.device.type in ("cpu", "cuda") and host.is_contiguous() and _has_native_op():
        return torch.ops.cherry.cache_gather(slot_of, cache, host, nodes)
    return ref.cache_gather(slot_of, cache, host, nodes)
