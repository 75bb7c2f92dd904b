"""Pure-PyTorch reference of `node_dropout`, exact dropout whose mask is never stored.

``node_dropout(x, states, threshold, scale)`` returns ``out[r, j] = (x[r, j] * keep) * scale`` with
``keep = 1`` iff ``mix32(states[r] ^ j) >= threshold`` (`cherry.ops.reference_sampling.mix32`;
``states`` are 32-bit words in int64, one per row). The native kernels (csrc/cpu, csrc/cuda) give
bit-identical outputs; this is their fallback and the op tests' oracle.

Memory: the hash words are int64, so a whole [R, F] mask would take several int64 [R, F] buffers.
Rows are hashed in chunks of at most `CHUNK_ELEMENTS` elements (one row when a row is wider), so
beyond the output the transient memory is a few int64 buffers of one chunk, whatever ``R``.
"""
from __future__ import annotations

import torch

from cherry.ops.reference_sampling import mix32

CHUNK_ELEMENTS = 1 << 16  # elements hashed at once: a few 512 KiB int64 temporaries, not [R, F] ones


def transient_bytes(width: int) -> int:
    """An upper bound of `node_dropout`'s bytes beyond its output for rows of ``width``: per element of
    a chunk, at most four int64 words alive at once (mix32's steps), the bool mask, its float copy and
    their product (float64 at most)."""
    return max(CHUNK_ELEMENTS, int(width)) * (4 * 8 + 1 + 2 * 8)


def keep_mask(states: torch.Tensor, width: int, threshold: int) -> torch.Tensor:
    """``[len(states), width]`` bool: which elements of rows with hash ``states`` are kept (unchunked:
    its int64 temporaries are ``[len(states), width]``; callers chunk)."""
    columns = torch.arange(width, dtype=torch.int64, device=states.device)
    return mix32(states.unsqueeze(1) ^ columns) >= threshold


def node_dropout(x: torch.Tensor, states: torch.Tensor, threshold: int, scale: float) -> torch.Tensor:
    """``(x * keep) * scale`` for 2-D ``x``, hashing at most `CHUNK_ELEMENTS` elements at a time."""
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    rows, width = x.shape
    step = max(1, CHUNK_ELEMENTS // max(width, 1))
    for start in range(0, rows, step):
        stop = min(rows, start + step)
        keep = keep_mask(states[start:stop], width, threshold)
        torch.mul(x[start:stop] * keep.to(x.dtype), scale, out=out[start:stop])
    return out
