"""`DegreeLayout`: a block's destinations ordered for one packed-sequence LSTM call.

For the CSC ``indptr`` of ``D`` destinations with in-degrees ``deg``:
- ``order`` (int64, the block's device): the destinations with ``deg > 0`` by descending degree,
  ties in destination order (a stable sort), so sequence ``i`` of the pack is destination ``order[i]``;
- ``batch_sizes`` (int64, always on the CPU, as `torch.nn.utils.rnn.PackedSequence` requires):
  ``batch_sizes[t]`` = number of destinations with ``deg > t``, for ``t < max degree``;
- ``step_sizes``/``step_offsets`` (the block's device): ``batch_sizes`` and its exclusive prefix sum,
  so the packed gather index is built on the device without reading anything back.
Invariants: ``batch_sizes`` is non-increasing, ``batch_sizes[0] == len(order)``, and
``batch_sizes.sum() == num_edges`` (every edge is one packed element).

Computed on the host (`DegreeLayout.of` on a CPU ``indptr``: a few small ops) when a block is made
or moved, so that the LSTM aggregator forces no host sync; on a GPU ``indptr`` it reads back one
histogram of degrees.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class DegreeLayout:
    """Descending-degree order and packed batch sizes of one block (see module docstring)."""

    order: torch.Tensor
    batch_sizes: torch.Tensor
    step_sizes: torch.Tensor
    step_offsets: torch.Tensor
    num_edges: int

    @property
    def max_degree(self) -> int:
        return int(self.batch_sizes.numel())

    @property
    def num_sequences(self) -> int:
        return int(self.order.numel())

    @staticmethod
    def of(indptr: torch.Tensor) -> "DegreeLayout":
        """The layout of a CSC ``indptr`` (1-D int64, non-decreasing, at least one entry)."""
        if not isinstance(indptr, torch.Tensor) or indptr.dtype != torch.int64 or indptr.dim() != 1 \
                or indptr.numel() < 1:
            raise TypeError(f"indptr must be a non-empty 1-D int64 tensor, got {indptr!r:.80}")
        deg = indptr[1:] - indptr[:-1]
        if deg.numel() == 0:
            empty = torch.zeros(0, dtype=torch.int64)
            return DegreeLayout(empty.to(indptr.device), empty, empty.to(indptr.device),
                                empty.to(indptr.device), 0)
        counts = torch.bincount(deg).cpu()  # counts[d]: destinations of degree d (the one read-back)
        # at_least[d] = destinations with degree >= d; batch_sizes[t] = at_least[t + 1]
        at_least = counts.flip(0).cumsum(0).flip(0)
        batch_sizes = at_least[1:].contiguous()
        num_sequences = int(at_least[1]) if at_least.numel() > 1 else 0
        order = _descending_order(deg, counts.numel() - 1)[:num_sequences]
        offsets = batch_sizes.cumsum(0) - batch_sizes
        num_edges = int(batch_sizes.sum())
        return DegreeLayout(order, batch_sizes, batch_sizes.to(indptr.device), offsets.to(indptr.device), num_edges)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "DegreeLayout":
        return DegreeLayout(self.order.to(device, non_blocking=non_blocking), self.batch_sizes,
                            self.step_sizes.to(device, non_blocking=non_blocking),
                            self.step_offsets.to(device, non_blocking=non_blocking), self.num_edges)

    def packed_edge_positions(self, indptr: torch.Tensor) -> torch.Tensor:
        """Edge positions in packed (time-major) order: element ``(t, i)`` of the pack is edge
        ``indptr[order[i]] + t``. Device ops only, sizes known on the host: no sync."""
        device = indptr.device
        steps = torch.arange(self.max_degree, device=device)
        t = torch.repeat_interleave(steps, self.step_sizes, output_size=self.num_edges)
        i = torch.arange(self.num_edges, device=device) - self.step_offsets.index_select(0, t)
        return indptr.index_select(0, self.order.index_select(0, i)) + t


def _descending_order(deg: torch.Tensor, max_degree: int) -> torch.Tensor:
    """Stable argsort of ``deg``, largest first. On the host, numpy sorts 16-bit keys by radix sort,
    about 7x faster than torch's comparison sort (measured: 0.15 vs 1.05 ms for 25,000 degrees); the
    sampler and slicer pay this for every block they make."""
    if deg.device.type == "cpu" and max_degree < 2**15:
        keys = (max_degree - deg).to(torch.int16).numpy()
        return torch.from_numpy(np.argsort(keys, kind="stable"))
    return torch.argsort(deg, descending=True, stable=True)
