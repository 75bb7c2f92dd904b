"""Read the arrays of an ``.npz`` archive in blocks of rows, never whole (OGB's binary layout).

``np.load(..., mmap_mode=...)`` does not map the members of an npz (they are zip entries, possibly
deflated), so each member is opened as a zip stream, its ``.npy`` header parsed, and its rows read
`ROWS` at a time. An edge list ``[2, E]`` in C order holds all sources, then all destinations: it is
read through two streams of the same member, the second started ``E`` entries in. A 2-D member
stored in Fortran order (columns first) is the exception: it is loaded whole (`row_blocks`).
"""
from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np

ROWS = 1 << 14  # rows per block (128 float32 features: 8 MiB)


def _open(archive: zipfile.ZipFile, key: str):
    """The member ``key`` as a stream positioned after its header; and its shape, order and dtype."""
    try:
        stream = archive.open(f"{key}.npy")
    except KeyError:  # a member missing: named with the archive, not zipfile's bare KeyError
        members = ", ".join(n.removesuffix(".npy") for n in archive.namelist()) or "none"
        raise ValueError(f"{archive.filename} has no member {key!r} (it holds: {members}); expected OGB's binary "
                         "layout (edge_index, node_feat, num_nodes_list)") from None
    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(stream)
    if dtype.hasobject:
        raise ValueError(f"{archive.filename}: npz member {key} holds Python objects; expected a numeric array")
    return stream, tuple(shape), bool(fortran), dtype


def header(path: Path, key: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the member ``key`` of the archive ``path`` (nothing else is read)."""
    with zipfile.ZipFile(path) as archive:
        stream, shape, _, dtype = _open(archive, key)
        stream.close()
    return shape, dtype


def _read(stream, count: int, dtype: np.dtype, key: str) -> np.ndarray:
    data = stream.read(count * dtype.itemsize)
    if len(data) != count * dtype.itemsize:
        raise ValueError(f"npz member {key} ends early (truncated archive?)")
    return np.frombuffer(data, dtype=dtype)


def row_blocks(path: Path, key: str, rows: int | None = None) -> Iterator[np.ndarray]:
    """The rows of the 2-D member ``key``, ``rows`` (default `ROWS`) at a time. A member stored in
    Fortran order (column after column) cannot be read by rows from one stream: it is loaded whole
    (not bounded), then sliced."""
    rows = rows or ROWS
    with zipfile.ZipFile(path) as archive:
        stream, shape, fortran, dtype = _open(archive, key)
        with stream:
            if len(shape) != 2:
                raise ValueError(f"npz member {key} of {path} has shape {shape}; expected a 2-D array")
            if fortran and shape[1] > 1:
                stream.close()
                with np.load(path) as npz:
                    whole = npz[key]
                for start in range(0, shape[0], rows):
                    yield whole[start:start + rows]
                return
            for start in range(0, shape[0], rows):
                count = min(rows, shape[0] - start)
                yield _read(stream, count * shape[1], dtype, key).reshape(count, shape[1])


def pair_blocks(path: Path, key: str, rows: int | None = None) -> Iterator[np.ndarray]:
    """The columns of the ``[2, E]`` member ``key`` as ``[k, 2]`` blocks of ``(src, dst)`` rows."""
    rows = rows or ROWS
    with zipfile.ZipFile(path) as archive:
        first, shape, fortran, dtype = _open(archive, key)
        if len(shape) != 2 or shape[0] != 2:
            first.close()
            raise ValueError(f"edges ({path}) must be pairs 'src,dst' ([2, E]), got shape {shape}")
        edges = shape[1]
        if fortran:  # stored as (src, dst) pairs already
            with first:
                for start in range(0, edges, rows):
                    count = min(rows, edges - start)
                    yield _read(first, 2 * count, dtype, key).reshape(count, 2)
            return
        second, _, _, _ = _open(archive, key)
        with first, second:
            for start in range(0, edges, rows):  # move the second stream to the destinations
                _read(second, min(rows, edges - start), dtype, key)
            for start in range(0, edges, rows):
                count = min(rows, edges - start)
                yield np.stack([_read(first, count, dtype, key), _read(second, count, dtype, key)], axis=1)


class VectorStream:
    """The 1-D member ``key`` of an open archive, read front to back ``take(count)`` entries at a time
    (the values of a CSR matrix, read row block after row block). ``shape`` and ``dtype`` are the
    member's own, known before any value is read."""

    def __init__(self, archive: zipfile.ZipFile, key: str) -> None:
        self._stream, self.shape, _, self.dtype = _open(archive, key)
        self.key = key
        if len(self.shape) != 1:
            self._stream.close()
            raise ValueError(f"npz member {key} has shape {self.shape}; expected a 1-D array")

    def take(self, count: int) -> np.ndarray:
        return _read(self._stream, int(count), self.dtype, self.key)

    def close(self) -> None:
        self._stream.close()
