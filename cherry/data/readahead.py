"""Read-ahead of feature rows from a memory-mapped cache file, for data beyond the page cache.

A prepared dataset's features larger than `cherry.data.cache.MMAP_THRESHOLD_BYTES` are memory-mapped
from ``features.npy``; when the page cache cannot hold them (a host, or a cgroup, with less memory
than the data), every gather faults its rows in from disk one page at a time. `RowReadahead` asks
the kernel to start reading the pages of the rows a coming batch will gather
(``posix_fadvise(WILLNEED)``: asynchronous, no copy), so that the loader thread, which knows batch
``i + 1``'s input nodes while batch ``i`` computes, can hide that I/O behind the step. Rows are taken in
ascending order and adjacent pages merged into one request.

Advisory only: it changes no data and no result, only when pages arrive; a failed hint is ignored.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import numpy as np
import torch

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class RowReadahead:
    """Read-ahead hints for rows of the ``.npy`` matrix at ``path`` (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                    else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read(f)
            self.offset_bytes = f.tell()
        if len(shape) != 2 or fortran:
            raise ValueError(f"{self.path}: expected a C-ordered 2-D matrix, got shape {shape}")
        self.num_rows = int(shape[0])
        self.row_bytes = int(shape[1]) * np.dtype(dtype).itemsize
        self._fd = os.open(self.path, os.O_RDONLY)

    @classmethod
    def for_dataset(cls, dataset) -> Optional["RowReadahead"]:
        """A read-ahead for ``dataset``'s features if they are memory-mapped from its cache (a prepared
        dataset whose ``features.npy`` is at least the mapping threshold), else None."""
        from cherry.data.cache import MMAP_THRESHOLD_BYTES

        cache_dir = getattr(dataset, "metadata", {}).get("cache_dir")
        if not hasattr(os, "posix_fadvise") or cache_dir is None:
            return None
        path = Path(cache_dir) / "features.npy"
        if not path.is_file() or path.stat().st_size < MMAP_THRESHOLD_BYTES:
            return None
        ahead = cls(path)
        return ahead if ahead.num_rows == dataset.features.shape[0] else None

    def page_ranges(self, nodes: torch.Tensor) -> np.ndarray:
        """``[k, 2]`` (first byte, byte length) of the page runs holding ``nodes``' rows, ascending."""
        rows = np.unique(nodes.detach().cpu().numpy())
        rows = rows[(rows >= 0) & (rows < self.num_rows)]
        first = (self.offset_bytes + rows * self.row_bytes) // _PAGE_BYTES
        last = (self.offset_bytes + (rows + 1) * self.row_bytes - 1) // _PAGE_BYTES
        if rows.size == 0:
            return np.empty((0, 2), dtype=np.int64)
        starts = np.concatenate([[True], first[1:] > last[:-1] + 1])  # a gap: a new run begins
        run_first = first[starts]
        run_last = np.maximum.reduceat(last, np.flatnonzero(starts))
        return np.stack([run_first * _PAGE_BYTES, (run_last - run_first + 1) * _PAGE_BYTES], axis=1)

    def __call__(self, nodes: torch.Tensor) -> int:
        """Hint the kernel to read ``nodes``' rows; returns the number of requests made."""
        ranges = self.page_ranges(nodes)
        for offset, length in ranges.tolist():
            try:
                os.posix_fadvise(self._fd, offset, length, os.POSIX_FADV_WILLNEED)
            except OSError:
                return 0
        return len(ranges)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
