"""Fast, deterministic writer of OGB's gzip-CSV files (no header, one row per line).

Formatting is vectorised in numpy (each value becomes a fixed-width run of ASCII digits, padding bytes
are dropped), because per-value Python or ``np.savetxt`` formatting would take minutes for tens of
millions of values. Rows are written in fixed chunks, each compressed as its own gzip member with
``mtime=0`` and no file name, so the same array always gives the same bytes; a concatenation of gzip
members is a valid gzip file for every reader (Python's gzip, pandas, zcat). Chunks compress on a
small thread pool (zlib releases the GIL).
"""
from __future__ import annotations

import gzip
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

CHUNK_VALUES = 1 << 21  # values formatted per chunk: bounds memory to a few tens of MB
_ZERO, _COMMA, _NEWLINE, _DOT, _MINUS = 48, 44, 10, 46, 45

ChunkProgress = Optional[Callable[[float], None]]


def _with_separators(chars: np.ndarray) -> np.ndarray:
    """Append ',' after every field and '\\n' after the last field of each row; ravel to bytes."""
    rows, cols, _ = chars.shape
    sep = np.full((rows, cols, 1), _COMMA, dtype=np.uint8)
    sep[:, -1, 0] = _NEWLINE
    out = np.concatenate([chars, sep], axis=2).ravel()
    return out[out != 0]  # 0 marks padding (leading zeros, absent signs)


def format_int_rows(values: np.ndarray) -> bytes:
    """CSV text of a 2-D array of non-negative integers."""
    if values.ndim != 2 or values.dtype.kind not in "iu":
        raise ValueError(f"expected a 2-D integer array, got {values.dtype} with shape {values.shape}")
    if values.size == 0:
        return b""
    if int(values.min()) < 0:
        raise ValueError(f"integers must be non-negative, found {int(values.min())}")
    a = values.astype(np.int64, copy=False)
    width = len(str(int(a.max())))
    pow10 = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    chars = ((a[:, :, None] // pow10) % 10 + _ZERO).astype(np.uint8)
    chars[(a[:, :, None] < pow10) & (pow10 > 1)] = 0  # drop leading zeros, keep the units digit
    return _with_separators(chars).tobytes()


def format_sixteenths(values: np.ndarray) -> bytes:
    """CSV text of a 2-D float array whose entries are multiples of 1/16 with |x| < 10.

    Such numbers have an exact 4-digit decimal expansion and parse back to the identical float32.
    """
    if values.ndim != 2 or values.dtype.kind != "f":
        raise ValueError(f"expected a 2-D float array, got {values.dtype} with shape {values.shape}")
    if values.size == 0:
        return b""
    k = np.rint(values.astype(np.float64) * 16.0)
    if not np.array_equal(k, values * 16.0) or np.abs(k).max() > 159:
        raise ValueError("features must be multiples of 1/16 in [-9.9375, 9.9375] to be written exactly")
    k = k.astype(np.int32)
    m = np.abs(k)
    frac = (m % 16) * 625  # 1/16 = 0.0625: four decimals, exactly
    chars = np.empty(values.shape + (7,), dtype=np.uint8)
    chars[..., 0] = np.where(k < 0, _MINUS, 0)
    chars[..., 1] = m // 16 + _ZERO
    chars[..., 2] = _DOT
    for i, p in enumerate((1000, 100, 10, 1)):
        chars[..., 3 + i] = (frac // p) % 10 + _ZERO
    return _with_separators(chars).tobytes()


_FORMAT_ROWS = 1 << 13  # rows formatted at once inside a chunk: the digit arrays are ~50x the values
_GZIP_HEADER = gzip.compress(b"", compresslevel=1, mtime=0)[:10]


def gzip_member(pieces: Iterable[bytes]) -> bytes:
    """``gzip.compress(b"".join(pieces), compresslevel=1, mtime=0)`` without joining the pieces: zlib's
    output does not depend on how its input is split, so the bytes are the same (tested)."""
    deflate = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    out, crc, size = [_GZIP_HEADER], 0, 0
    for piece in pieces:
        out.append(deflate.compress(piece))
        crc, size = zlib.crc32(piece, crc), size + len(piece)
    out.append(deflate.flush())
    out.append(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return b"".join(out)


def _rechunked(blocks: Iterable[np.ndarray], rows: int) -> Iterator[np.ndarray]:
    """The rows of ``blocks`` (2-D, equal widths) regrouped into arrays of exactly ``rows`` rows (the
    last may be shorter), so the gzip members, and hence the bytes, do not depend on how they came."""
    pending: list[np.ndarray] = []
    held = 0
    for block in blocks:
        block = block[:, None] if block.ndim == 1 else block
        start = 0
        while start < block.shape[0]:
            take = min(rows - held, block.shape[0] - start)
            pending.append(block[start:start + take])
            held += take
            start += take
            if held == rows:
                yield pending[0] if len(pending) == 1 else np.concatenate(pending)
                pending, held = [], 0
    if pending:
        yield pending[0] if len(pending) == 1 else np.concatenate(pending)


def write_csv_gz(
    path: Path,
    values: np.ndarray,
    formatter: Callable[[np.ndarray], bytes],
    progress: ChunkProgress = None,
    workers: int | None = None,
) -> None:
    """Write ``values`` (2-D) to ``path`` as gzip CSV via ``formatter``; atomic (temp file + rename)."""
    if values.ndim == 1:
        values = values[:, None]
    step = max(1, CHUNK_VALUES // max(values.shape[1], 1))
    blocks = (values[start:start + step] for start in range(0, values.shape[0], step))
    write_csv_gz_blocks(path, blocks, values.shape[1], formatter, total_rows=values.shape[0],
                        progress=progress, workers=workers)


def write_csv_gz_blocks(
    path: Path,
    blocks: Iterable[np.ndarray],
    num_columns: int,
    formatter: Callable[[np.ndarray], bytes],
    total_rows: int | None = None,
    progress: ChunkProgress = None,
    workers: int | None = None,
) -> None:
    """`write_csv_gz` for rows that arrive in ``blocks`` of any sizes (a generator, so the whole array
    never needs to be in memory): the same bytes as writing their concatenation. ``total_rows`` (if
    known) makes ``progress`` a fraction."""
    path = Path(path)
    rows_per_chunk = max(1, CHUNK_VALUES // max(num_columns, 1))
    workers = workers or min(4, os.cpu_count() or 1)

    def encode(chunk: np.ndarray) -> bytes:
        return gzip_member((formatter(chunk[i:i + _FORMAT_ROWS]) for i in range(0, chunk.shape[0], _FORMAT_ROWS)))

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f, ThreadPoolExecutor(workers) as pool:
            pending, done_rows, any_rows = [], 0, False
            for chunk in _rechunked(blocks, rows_per_chunk):
                any_rows = True
                pending.append((pool.submit(encode, chunk), chunk.shape[0]))
                # Keep at most workers + 1 chunks in flight so memory stays bounded.
                while len(pending) > workers:
                    done_rows += _write_first(f, pending)
                    if progress is not None and total_rows:
                        progress(done_rows / total_rows)
            while pending:
                done_rows += _write_first(f, pending)
                if progress is not None:
                    progress(done_rows / total_rows if total_rows else 1.0)
            if not any_rows:  # an empty file is still one (empty) gzip member, as for an empty array
                f.write(gzip.compress(b"", compresslevel=1, mtime=0))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _write_first(f, pending: list) -> int:
    future, rows = pending.pop(0)
    f.write(future.result())
    return rows
