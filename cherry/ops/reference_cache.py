"""Pure-PyTorch reference of ``cherry::cache_gather``: the fallback without the extension and the
oracle of its tests.

``cache_gather(slot_of, cache, host, nodes)``: ``out[i] = cache[slot_of[nodes[i]]]`` where that slot
is >= 0 (a hit), else ``host[nodes[i]]`` (a miss). ``slot_of`` [N] int64 maps every host row to its
cache slot or -1; ``cache`` [C, F] and ``host`` [N, F] share dtype and width; ``out`` [M, F] is on
``cache``'s device. Hits and misses are copied, never computed, so the result equals
``host[nodes]`` exactly whenever ``cache[s] == host[r]`` for every ``slot_of[r] == s``.
"""
from __future__ import annotations

import torch


def cache_gather(slot_of: torch.Tensor, cache: torch.Tensor, host: torch.Tensor, nodes: torch.Tensor) -> torch.Tensor:
    """See the module docstring (clarity over speed: the misses' ids visit the host)."""
    device = cache.device
    slots = slot_of.index_select(0, nodes.to(slot_of.device)).to(device)
    nodes = nodes.to(device)
    out = torch.empty((nodes.numel(), host.shape[1]), dtype=host.dtype, device=device)
    hit = slots >= 0
    out[hit] = cache.index_select(0, slots[hit])
    missed = nodes[~hit].to(host.device)
    out[~hit] = host.index_select(0, missed).to(device)
    return out
