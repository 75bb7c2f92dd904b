"""Host-to-device transfer of a step's micro-batches: one pinned copy of every index buffer, and
feature rows gathered straight into reused pinned buffers.

`blocks_to_device(parts, device)`: every index tensor of every micro-batch is concatenated into one
pinned host buffer and copied with one non-blocking transfer on the current stream. That is the
sources, CSC, input positions and the degree layouts the blocks carry (only models that read them
get them, see `cherry.sampling.sampler`). The returned blocks are views of that one device buffer
(trusted: they are copies of valid blocks). The layouts' ``batch_sizes`` stay on the host.

`PinnedRows.gather(features, nodes, device)`: ``features[nodes]`` written into a pinned buffer kept
between calls (grown when too small, never shrunk) and copied non-blocking on the current stream. It
keeps ``slots`` buffers in rotation; before overwriting one it waits for the event of the copy that
last read it (a host wait on that copy only, issued ``slots - 1`` gathers earlier), which is what keeps
the reuse safe. This replaces a fresh ``pin_memory()`` per micro-batch (a second host copy).
On the CPU, both are plain host operations (no pinned memory, no streams). Rows of a large host table
memory-mapped from a dataset cache are gathered in ascending order (`gather_rows`).
"""
from __future__ import annotations

import functools
from typing import Optional, Sequence

import torch

from cherry.sampling import Block, Blocks, DegreeLayout


def _block_tensors(blk: Block) -> list[torch.Tensor]:
    out = [blk.src_nodes, blk.indptr, blk.indices]
    if blk.layout is not None:
        out += [blk.layout.order, blk.layout.step_sizes, blk.layout.step_offsets]
    return out


def index_tensors(parts: Sequence[Blocks]) -> list[torch.Tensor]:
    """Every index tensor of every micro-batch of ``parts`` (per layer sources, CSC and the layouts they
    carry; the input positions), in the order `blocks_to_device` packs them: what a step keeps on the
    device for all its micro-batches (`cherry.planning.plan.resident_index_bytes` prices all but the
    layouts: an LSTM's few per-destination entries, which calibration's floor absorbs)."""
    tensors: list[torch.Tensor] = []
    for p in parts:
        for blk in p.layers:
            tensors += _block_tensors(blk)
        if p.input_positions is not None:
            tensors.append(p.input_positions)
    return tensors


def blocks_to_device(parts: Sequence[Blocks], device: torch.device | str) -> list[Blocks]:
    """``[p.to(device) for p in parts]`` in one pinned host-to-device copy (see module docstring)."""
    if not isinstance(parts, (list, tuple)) or not all(isinstance(p, Blocks) for p in parts):
        raise TypeError(f"parts must be a list of cherry.sampling.Blocks, got {type(parts).__name__}")
    device = torch.device(device)
    if device.type == "cpu" or not parts:
        return [p.to(device) for p in parts]
    tensors = index_tensors(parts)
    if any(t.device.type != "cpu" for t in tensors):  # already on a device: nothing to pack
        return [p.to(device, non_blocking=True) for p in parts]
    sizes = [t.numel() for t in tensors]
    host = torch.empty(sum(sizes), dtype=torch.int64, pin_memory=True)
    torch.cat(tensors, out=host)
    return _rebuilt(parts, host.to(device, non_blocking=True).split(sizes))


def copied_blocks(parts: Sequence[Blocks]) -> list[Blocks]:
    """``parts`` with every index tensor copied on the host, one storage each: what an emulated device
    counts as a GPU's copy of them, which lives while the step holds it (not while the host blocks,
    kept by a planned batch, do) and frees with each micro-batch dropped (a recovery's re-plan)."""
    return _rebuilt(parts, [t.clone() for t in index_tensors(parts)])


def _rebuilt(parts: Sequence[Blocks], tensors) -> list[Blocks]:
    """``parts`` rebuilt from ``tensors``, their index tensors in `index_tensors`' order."""
    views = iter(tensors)
    moved = []
    for p in parts:
        layers = []
        for blk in p.layers:
            src, indptr, indices = next(views), next(views), next(views)
            layout = None
            if blk.layout is not None:
                order, step_sizes, step_offsets = next(views), next(views), next(views)
                layout = DegreeLayout(order, blk.layout.batch_sizes, step_sizes, step_offsets, blk.layout.num_edges)
            layers.append(Block(src, blk.num_dst, indptr, indices, layout=layout, trusted=True))
        positions = next(views) if p.input_positions is not None else None
        moved.append(Blocks(tuple(layers), positions))
    return moved


SORTED_GATHER_MIN_BYTES = 256 << 20  # the tables `cherry.data.cache` memory-maps


@functools.lru_cache(maxsize=16)
def is_file_backed(data_ptr: int) -> bool:
    """Whether the address ``data_ptr`` lies in a memory-mapped file (Linux ``/proc/self/maps``: a
    mapping with an inode), i.e. reading it may fault pages in from disk. False where unknown."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                start, end = (int(v, 16) for v in fields[0].split("-"))
                if start <= data_ptr < end:
                    return len(fields) > 4 and fields[4] != "0"
    except (OSError, ValueError, IndexError):
        pass
    return False


def gather_rows(features: torch.Tensor, nodes: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``features.index_select(0, nodes)`` (into ``out`` if given). A host table of at least
    `SORTED_GATHER_MIN_BYTES` that is memory-mapped from a file (a dataset cache) is read in ascending
    row order and the rows put back in ``nodes``' order: page faults then run forward through the file,
    which the kernel's read-around serves, instead of jumping back and forth (beyond the page cache,
    each jump can be a disk read). A table in memory is gathered as given (sorting costs more there)."""
    if (features.device.type != "cpu" or features.numel() * features.element_size() < SORTED_GATHER_MIN_BYTES
            or not is_file_backed(features.data_ptr())):
        return torch.index_select(features, 0, nodes, out=out) if out is not None else features.index_select(0, nodes)
    order = torch.argsort(nodes)
    rows = features.index_select(0, nodes.index_select(0, order))
    if out is None:
        out = torch.empty_like(rows)
    out.index_copy_(0, order, rows)
    return out


class PinnedRows:
    """Reused pinned buffers for gathering feature rows on the host (see module docstring)."""

    def __init__(self, slots: int = 2) -> None:
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise ValueError(f"slots must be an int >= 1, got {slots!r}")
        self._buffers: list[Optional[torch.Tensor]] = [None] * slots
        self._events: list[Optional[torch.cuda.Event]] = [None] * slots
        self._next = 0

    def gather(self, features: torch.Tensor, nodes: torch.Tensor, device: torch.device | str) -> torch.Tensor:
        """``features.index_select(0, nodes)`` on ``device`` (on a GPU: copied on the current stream)."""
        device = torch.device(device)
        if features.dim() != 2 or nodes.dim() != 1:
            raise ValueError(f"features must be 2-D and nodes 1-D, got {tuple(features.shape)} and {tuple(nodes.shape)}")
        if device.type == "cpu" or features.device.type != "cpu":
            return gather_rows(features, nodes.to(features.device)).to(device)
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        if self._events[slot] is not None:
            self._events[slot].synchronize()  # the copy that last read this buffer has finished
        need = nodes.numel() * features.shape[1]
        buf = self._buffers[slot]
        if buf is None or buf.numel() < need or buf.dtype != features.dtype:
            buf = self._buffers[slot] = torch.empty(max(need, 1), dtype=features.dtype, pin_memory=True)
        rows = buf[:need].view(nodes.numel(), features.shape[1])
        gather_rows(features, nodes, out=rows)
        out = rows.to(device, non_blocking=True)
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(device))
        self._events[slot] = event
        return out
