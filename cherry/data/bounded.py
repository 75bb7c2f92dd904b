"""Convert a dataset in OGB's CSV layout into Cherry's cache in bounded memory (`cherry data prepare`).

What is held at once: the per-node vectors (labels, the split, ``indptr``: a few int64 per node) and
one block of rows (`READ_ROWS` CSV rows, or one bucket of edges). Everything else streams:

- features are parsed `READ_ROWS` rows at a time and appended to ``features.npy`` (header first);
- the CSC graph is built by a two-pass counting sort on disk. Pass 1 reads the edge CSV in blocks
  (adding each edge's reverse right after it, as OGB's ``add_inverse_edge`` does, or both directions
  for a symmetrised graph). It appends each ``(src, dst)`` pair to the bucket file of its
  destination's node range (about `BUCKET_ENTRIES` entries per bucket). Pass 2 takes the buckets in
  node order and sorts each by destination: stable, so in-neighbours keep edge-list order, exactly as
  `cherry.data.graph.Graph.from_edges` (or sorted and deduplicated when symmetrising). It appends each
  bucket to ``indices.npy``, filling ``indptr`` as it goes.

Arrays are written with plain sequential file writes, not through memory maps: pages of a mapped
file count as the writer's resident memory, while written pages sit in the page cache, which the
kernel can drop. The files are ordinary ``.npy`` files, byte for byte what ``np.save`` writes for the
same array, so `cherry.data.cache` checksums and loads them like any other. Checks are those of
`cherry.data.checks`, applied per block where the data streams (ids in range, finite features, the
declared edge count) and whole on the per-node vectors.
"""
from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

import numpy as np

from cherry.data import checks

READ_ROWS = 1 << 14  # CSV rows parsed per block (128 features: ~16 MiB of values)
BUCKET_ENTRIES = 1 << 20  # CSC entries per destination bucket (16 MiB of (src, dst) pairs)
_COPY_BYTES = 8 << 20
Progress = Optional[Callable[[str, float], None]]


def csv_blocks(path: Path, rows: int | None = None) -> Iterator[np.ndarray]:
    """The rows of a headerless gzip CSV, ``rows`` (default `READ_ROWS`) at a time, parsed as pandas
    parses the whole file (without pandas, the light install: by `_number_blocks`)."""
    rows = rows or READ_ROWS
    try:
        import pandas as pd
    except ModuleNotFoundError:
        yield from _number_blocks(path, rows)
        return
    with pd.read_csv(path, compression="gzip", header=None, chunksize=rows) as reader:
        for frame in reader:
            yield frame.to_numpy()


def _number_blocks(path: Path, rows: int) -> Iterator[np.ndarray]:
    """`csv_blocks` without pandas, for files of numbers only (what `cherry data prepare` writes for a
    generated dataset): each block int64 where all its values are integers, else float64, as pandas
    gives; a value that is no number is a one-line ValueError naming the file and the extra that
    names its row and column."""
    import itertools

    with gzip.open(path, "rt") as f:
        while True:
            lines = list(itertools.islice(f, rows))
            if not lines:
                return
            for dtype in (np.int64, np.float64):
                try:
                    yield np.loadtxt(lines, delimiter=",", dtype=dtype, ndmin=2)
                    break
                except ValueError:
                    continue
            else:
                raise ValueError(f"{path} holds a value that is not a number; expected numbers only "
                                 "(pip install -e '.[bench]' for pandas, which names its row and column)")


class NpyWriter:
    """Append rows to a ``.npy`` file of a shape known in advance (sequential writes, no mapping)."""

    def __init__(self, path: Path, shape: tuple[int, ...], dtype) -> None:
        self.path, self.shape, self.dtype = Path(path), tuple(shape), np.dtype(dtype)
        self.rows = 0
        self._file = open(self.path, "wb")
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_1_0(self._file, header)

    def write(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=self.dtype)
        if block.shape[1:] != self.shape[1:] or self.rows + block.shape[0] > self.shape[0]:
            raise ValueError(f"{self.path.name}: a block of shape {block.shape} does not fit the remaining "
                             f"{self.shape[0] - self.rows} rows of {self.shape}")
        self._file.write(block.tobytes())
        self.rows += block.shape[0]

    def close(self) -> None:
        self._file.close()
        if self.rows != self.shape[0]:
            raise ValueError(f"{self.path.name}: wrote {self.rows} rows, expected {self.shape[0]}")


def write_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` without pickles (for the small per-node vectors)."""
    np.save(path, np.ascontiguousarray(array), allow_pickle=False)


def _check_ids(block: np.ndarray, num_nodes: int, first_row: int, where: str) -> None:
    if block.ndim != 2 or block.shape[1] != 2:
        raise ValueError(f"edges ({where}) must be pairs 'src,dst' ([2, E]), got rows of {block.shape[1]} columns")
    if block.dtype.kind != "i":  # fractional, huge or text (a header row): refused, named, never cast
        from cherry.data.values import integer_array

        integer_array(block, "node id", where, first_row=first_row, source=Path(where))
    if block.size and (block.min() < 0 or block.max() >= num_nodes):
        bad_row = int(np.flatnonzero((block < 0).any(1) | (block >= num_nodes).any(1))[0])
        row = block[bad_row]
        bad = row[(row < 0) | (row >= num_nodes)][0]
        raise ValueError(f"edges ({where}) name node {bad}; expected node ids in [0, {num_nodes}) (row "
                         f"{first_row + bad_row}: {row.tolist()})")


def write_csc(edge_blocks: Iterable[np.ndarray], num_nodes: int, workdir: Path, out_dir: Path, *,
              inverse_interleaved: bool, declared_edges: int | None = None, expected_edges: int | None = None,
              where: str = "edges", progress: Progress = None) -> np.ndarray:
    """Write ``indices.npy`` of the CSC graph of ``edge_blocks`` (``[k, 2]`` rows ``src,dst``) into
    ``out_dir`` by the two-pass counting sort of the module docstring; return ``indptr``.

    ``inverse_interleaved``: every edge followed by its reverse (OGB's ``add_inverse_edge``), kept in
    that order; otherwise both directions of every edge, sorted and deduplicated per column (an
    undirected graph from a directed edge list). ``declared_edges``: the row count the source
    declares (a shorter or longer edge list is a ValueError naming ``where``); ``expected_edges``: an
    estimate of it where none is declared (a line count), only to size the buckets.
    """
    n = int(num_nodes)
    # sizes the buckets (~BUCKET_ENTRIES entries each); without a count or an estimate, ~1 edge per node
    expected = declared_edges or expected_edges
    per_bucket = max(1, BUCKET_ENTRIES * n // max(2 * (expected or n), 1))
    num_buckets = max(1, math.ceil(n / per_bucket))
    bucket_path = lambda b: Path(workdir) / f"csc-{b}.i64"  # noqa: E731
    rows = 0
    for block in edge_blocks:  # pass 1: partition (src, dst) by destination range, in edge-list order
        _check_ids(block, n, rows, where)
        rows += block.shape[0]
        s, d = block[:, 0].astype(np.int64), block[:, 1].astype(np.int64)
        pairs = np.empty((2 * s.size, 2), dtype=np.int64)  # (src, dst): edge i at 2i, its reverse at 2i+1
        pairs[0::2, 0], pairs[0::2, 1], pairs[1::2, 0], pairs[1::2, 1] = s, d, d, s
        bucket = pairs[:, 1] // per_bucket
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange(num_buckets + 1))
        for b in np.flatnonzero(np.diff(bounds)):
            with open(bucket_path(b), "ab") as f:
                pairs[order[bounds[b]:bounds[b + 1]]].tofile(f)
        if progress is not None and expected:
            progress("partitioning edges", min(rows / expected, 1.0))
    if declared_edges is not None and rows > declared_edges:
        raise ValueError(f"{where} has {rows} edge rows, the dataset declares {declared_edges}: expected "
                         "exactly that many")
    if declared_edges is not None and rows != declared_edges:
        raise ValueError(f"edges ({where}): {rows} edges read, the dataset declares {declared_edges} "
                         "(truncated file?)")
    indptr = np.zeros(n + 1, dtype=np.int64)
    raw = Path(workdir) / "indices.raw"
    with open(raw, "wb") as out:  # pass 2: each destination range, in node order
        for b in range(num_buckets):
            path = bucket_path(b)
            lo, hi = b * per_bucket, min((b + 1) * per_bucket, n)
            if not path.exists():
                indptr[lo + 1:hi + 1] = indptr[lo]
                continue
            pairs = np.fromfile(path, dtype=np.int64).reshape(-1, 2)
            path.unlink()
            if inverse_interleaved:
                src = pairs[np.argsort(pairs[:, 1], kind="stable"), 0]
                dst_sorted = np.sort(pairs[:, 1])
            else:
                keys = np.unique(pairs[:, 1] * n + pairs[:, 0])
                src, dst_sorted = keys % n, keys // n
            del pairs
            counts = np.bincount(dst_sorted - lo, minlength=hi - lo)
            indptr[lo + 1:hi + 1] = indptr[lo] + np.cumsum(counts)
            src.tofile(out)
            if progress is not None:
                progress("building CSC graph", (b + 1) / num_buckets)
    _npy_from_raw(raw, Path(out_dir) / "indices.npy", int(indptr[-1]))
    return indptr


def _npy_from_raw(raw: Path, path: Path, length: int) -> None:
    writer = NpyWriter(path, (length,), np.int64)
    with open(raw, "rb") as f:
        while block := f.read(_COPY_BYTES):
            writer.write(np.frombuffer(block, dtype=np.int64))
    writer.close()
    raw.unlink()


def feature_block(block: np.ndarray, first_row: int, where: str) -> np.ndarray:
    """A parsed block of feature rows (rows ``first_row``... of ``where``) as float32, checked to be
    numbers and finite; the one-line error names the node and column."""
    _check_numeric(block, first_row, where)
    values = block.astype(np.float32)
    finite = np.isfinite(values)
    if not finite.all():
        r, c = (int(v) for v in np.argwhere(~finite)[0])
        raise ValueError(f"features ({where}) must be finite; node {first_row + r}, column {c} is "
                         f"{values[r, c]}")
    return values


def _check_numeric(block: np.ndarray, first_row: int, where: str) -> None:
    """A block pandas parsed as text (object dtype) names its first non-number, as
    `cherry.data.ogb_files.file_problem` does for a whole file."""
    if block.dtype != object:
        return
    import pandas as pd

    for column in range(block.shape[1]):
        numeric = pd.to_numeric(pd.Series(block[:, column]), errors="coerce").to_numpy()
        text = np.flatnonzero(np.isnan(numeric) & pd.notna(block[:, column]))
        if text.size:
            row = int(text[0])
            raise ValueError(f"{where} holds {block[row, column]!r} at row {first_row + row}, column {column}; "
                             "expected numbers")


def write_features(path: Path, blocks: Iterable[np.ndarray], num_nodes: int, where: str) -> int:
    """Append the feature rows of ``blocks`` to ``path`` (float32 ``[num_nodes, F]``); return F.

    The parse keeps the in-memory reader's dtype rule (integers stay exact, floats via float64 to
    float32); non-finite values and a row count other than ``num_nodes`` are one-line ValueErrors."""
    writer, rows = None, 0
    try:
        for block in blocks:
            if writer is None:
                writer = NpyWriter(path, (num_nodes, block.shape[1]), np.float32)
            block = block[: max(num_nodes - rows, 0)]  # as OGB: the declared node count slices
            writer.write(feature_block(block, rows, where))
            rows += block.shape[0]
        if writer is None or rows != num_nodes:
            raise ValueError(f"features ({where}) have {rows} rows for {num_nodes} nodes; expected one row per node")
    finally:
        if writer is not None:
            writer._file.close()
    return int(writer.shape[1])


def degree_summary(indptr: np.ndarray) -> dict:
    degree = np.diff(indptr)
    n = degree.size
    return {"min": int(degree.min()) if n else 0, "median": float(np.median(degree)) if n else 0.0,
            "max": int(degree.max()) if n else 0}


def check_per_node(labels: np.ndarray, splits: dict, num_nodes: int, num_classes: int, where: dict) -> None:
    checks.check_labels(labels, num_nodes, num_classes, where=where["labels"])
    checks.check_splits({s: splits[s] for s in checks.SPLITS}, num_nodes, labels,
                        where={s: where[s] for s in checks.SPLITS})


def _whole_csv(path: Path) -> np.ndarray:
    try:
        import pandas as pd
    except ModuleNotFoundError:  # the light install: a file of numbers only
        blocks = list(_number_blocks(path, READ_ROWS))
        if not blocks:
            raise ValueError(f"{path} is empty; expected numbers") from None
        return np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
    return pd.read_csv(path, compression="gzip", header=None).values


def _read_counts(files: dict) -> tuple[int, int]:
    counts = []
    for key in ("num_nodes", "num_edges"):
        values = _whole_csv(files[key]).reshape(-1)
        _check_numeric(values[:, None], 0, str(files[key]))
        if values.size != 1:
            raise ValueError(f"{files[key]} must hold one count (a single graph), got {values.size} values")
        counts.append(int(values[0]))
    return counts[0], counts[1]


def convert_layout(directory: Path, meta_dict: dict, out_dir: Path, workdir: Path,
                   progress: Progress = None) -> dict:
    """Convert the homogeneous CSV layout in ``directory`` (described by OGB's ``meta_dict``) into the
    cache arrays in ``out_dir`` (the ``.npy`` files of `cherry.data.cache.ARRAY_NAMES`), in bounded
    memory; return the manifest's summary fields. The arrays equal those of reading the layout
    whole (`cherry.data.ogb_io.read_ogb`) and converting it; an unreadable file is named in a
    one-line ValueError (`cherry.data.ogb_files.unreadable_error`), as there."""
    from cherry.data.ogb_files import source_files, unreadable_error
    from cherry.data.ogb_io import _as_int64

    report = progress or (lambda stage, fraction: None)
    directory, out_dir = Path(directory), Path(out_dir)
    if meta_dict.get("binary") == "True" or meta_dict.get("is hetero") == "True":
        raise ValueError(f"{directory}: a bounded conversion reads a homogeneous CSV layout; got "
                         f"binary={meta_dict.get('binary')!r}, is hetero={meta_dict.get('is hetero')!r}")
    files = source_files(directory, meta_dict["split"], False, [], raw_only=True)
    num_classes = int(meta_dict["num classes"])
    try:
        n, declared = _read_counts(files)
        labels = _as_int64(_whole_csv(files["labels"]), files["labels"], "label")
        if labels.dtype.kind == "f":
            labels = np.where(np.isnan(labels), checks.UNLABELLED, labels)
        labels = labels.astype(np.int64)
        splits = {s: _as_int64(_whole_csv(files[s]), files[s], "node id").astype(np.int64)
                  for s in checks.SPLITS}
        report("reading features in blocks", 0.0)
        feature_dim = write_features(out_dir / "features.npy", csv_blocks(files["features"]), n,
                                     where=str(files["features"]))
        check_per_node(labels, splits, n, num_classes, where={k: str(files[k]) for k in ("labels", *checks.SPLITS)})
        inverse = meta_dict["add_inverse_edge"] == "True"
        indptr = write_csc(csv_blocks(files["edges"], READ_ROWS * 8), n, workdir, out_dir,
                           inverse_interleaved=inverse, declared_edges=declared, where=str(files["edges"]),
                           progress=report)
    except ValueError as exc:
        if type(exc) is ValueError:  # our checks; a parser's error (a ValueError subclass) is the file's
            raise
        raise unreadable_error(directory, files, exc) from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a truncated or corrupt gzip stream
        raise unreadable_error(directory, files, exc) from None
    write_npy(out_dir / "indptr.npy", indptr)
    write_npy(out_dir / "labels.npy", labels)
    for s in checks.SPLITS:
        write_npy(out_dir / f"{s}_idx.npy", splits[s])
    labelled = labels[labels >= 0]
    return {"num_nodes": n, "num_edges": int(indptr[-1]), "source_edges": declared, "feature_dim": feature_dim,
            "num_classes_observed": int(labelled.max()) + 1 if labelled.size else 0,
            "split_sizes": {s: int(splits[s].size) for s in checks.SPLITS}, "degree": degree_summary(indptr)}
