"""An ``.npz`` file in the raw layout of Shchur et al.'s gnn-benchmark, read as a dataset by its path.

Layout (what PyG's ``Amazon`` and ``Coauthor`` read): ``adj_data, adj_indices, adj_indptr, adj_shape``
(the adjacency as CSR; weights, duplicates and the stored direction are ignored: the graph is stored
undirected, reverses added and duplicates removed, as every graph Cherry prepares), ``attr_data,
attr_indices, attr_indptr, attr_shape`` (node features as CSR, mostly bag-of-words) and ``labels`` (one
integer per node; -1 unlabelled). No split ships with the files: one is drawn by a seeded split string
(`cherry.data.random_split`, default ``random:20,30@0``), given in the dataset name after ``?split=``
(``graphs/amazon_photo.npz?split=random:0.1,0.1@2``) or by the commands' ``--split``. A bare file name (``amazon_photo.npz``, no folder) that is not in
the working directory is looked up in `graphs_dir` (``$CHERRY_GRAPHS``, else ``../shared/graphs``
beside the repository; a workflow config's ``data: graphs:``), so a config and its run ids name a graph
the same way on every machine.

Bounded memory: the per-node vectors (labels, the two ``indptr``) are read whole; the CSR values are
read a row block at a time (`cherry.data.npz_stream.VectorStream`), the features densified into
``features.npy`` block by block (about `BLOCK_BYTES` of float32 at once), the edges handed to the on-disk
CSC build of `cherry.data.bounded`. Every member's dtype, shape and values are checked before any cast
(a one-line ValueError naming the file, the member and the value). The converted cache lives under the
data root, ``<root>/npz/<file stem>-<hash of its path>/<split>`` (the file's own directory may be
read-only), and its manifest records the file's size and modification time and the split string, so an
edited file or another split converts again.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator

import numpy as np

from cherry.data import cache as cache_mod
from cherry.data import checks
from cherry.data.random_split import DEFAULT_SPLIT, SplitSpec, draw_split, parse_split

LAYOUT_VERSION = 1
KEYS = ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "attr_data", "attr_indices", "attr_indptr",
        "attr_shape", "labels")
SPLIT_MARK = "?split="
BLOCK_BYTES = 16 << 20  # dense float32 feature rows densified at once


def is_npz_name(name: object) -> bool:
    """Whether a dataset name is an ``.npz`` file (with or without a ``?split=`` suffix)."""
    return isinstance(name, str) and name.split(SPLIT_MARK, 1)[0].endswith(".npz")


def graphs_dir() -> Path:
    """Where bare npz names are looked up: ``$CHERRY_GRAPHS``, else ``../shared/graphs`` beside the
    repository."""
    env = os.environ.get("CHERRY_GRAPHS")
    return Path(env).expanduser() if env else Path(__file__).resolve().parents[3] / "shared" / "graphs"


def parse_name(name: str) -> tuple[Path, SplitSpec]:
    """The file and the split of an npz dataset name; ValueError (one line) for a bad split string."""
    text, _, split = name.partition(SPLIT_MARK)
    path = Path(text).expanduser()
    if path.parent == Path(".") and not path.exists():  # a bare name: the graphs directory's file
        path = graphs_dir() / path
    return path, parse_split(split or DEFAULT_SPLIT)


def with_split(name: str, split: str | None) -> str:
    """``name`` with ``split`` as its split (None: ``name`` unchanged); ValueError if not an npz name."""
    if split is None:
        return name
    if not is_npz_name(name):
        raise ValueError(f"--split {split!r} applies to .npz datasets only, not to {name!r}")
    return f"{name.split(SPLIT_MARK, 1)[0]}{SPLIT_MARK}{parse_split(split).text()}"


def cache_dir_for(name: str, root=None) -> Path:
    """Where ``name``'s converted cache lives (see the module docstring)."""
    from cherry.data.registry import resolve_root

    path, split = parse_name(name)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    split_dir = split.text().replace(":", "_").replace(",", "_").replace("@", "_seed")
    return resolve_root(root) / "npz" / f"{path.stem}-{digest}" / split_dir


def _fingerprint(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def check_file(name: str) -> Path:
    """The npz file of ``name`` if it exists and holds every member of the layout; else a one-line
    FileNotFoundError / ValueError naming the file and what is missing."""
    path, _ = parse_name(name)
    if not path.is_file():
        raise FileNotFoundError(f"dataset file {path} does not exist; expected an .npz file in "
                                "gnn-benchmark's layout (adj_*, attr_*, labels)")
    try:
        with zipfile.ZipFile(path) as archive:
            present = {n.removesuffix(".npy") for n in archive.namelist()}
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{path} cannot be read as an npz archive ({exc}); expected gnn-benchmark's layout") from None
    missing = [k for k in KEYS if k not in present]
    if missing:
        raise ValueError(f"{path} lacks {', '.join(missing)}; expected gnn-benchmark's npz layout ({', '.join(KEYS)})")
    return path


def _stream(archive: zipfile.ZipFile, key: str, where: Path):
    """`cherry.data.npz_stream.VectorStream` of ``key``, a fault (not 1-D, objects) naming the file."""
    from cherry.data import npz_stream

    try:
        return npz_stream.VectorStream(archive, key)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _vector(archive: zipfile.ZipFile, key: str, where: Path, kinds: str, length: int | None = None) -> np.ndarray:
    """The small 1-D member ``key`` whole, its dtype kind and length checked before any cast."""
    stream = _stream(archive, key, where)
    try:
        if stream.dtype.kind not in kinds:
            raise ValueError(f"{where}: {key} has dtype {stream.dtype}; expected "
                             f"{'integers' if kinds == 'iu' else 'numbers'}")
        if length is not None and stream.shape[0] != length:
            raise ValueError(f"{where}: {key} has {stream.shape[0]} entries; expected {length}")
        return stream.take(stream.shape[0])
    finally:
        stream.close()


def _check_indptr(indptr: np.ndarray, nnz: int, key: str, where: Path) -> None:
    if indptr[0] != 0 or indptr[-1] != nnz:
        raise ValueError(f"{where}: {key} runs from {int(indptr[0])} to {int(indptr[-1])}; expected 0 to {nnz} "
                         "(the number of stored values)")
    step = np.diff(indptr)
    if (step < 0).any():
        row = int(np.flatnonzero(step < 0)[0])
        raise ValueError(f"{where}: {key} decreases at row {row}; expected a non-decreasing CSR indptr")


def _read_layout(archive: zipfile.ZipFile, path: Path) -> dict:
    """Shapes, labels and both indptr, checked; the CSR values are left to stream."""
    shapes = {}
    for prefix in ("adj", "attr"):
        shape = _vector(archive, f"{prefix}_shape", path, "iu", 2)
        if (shape < 0).any():
            raise ValueError(f"{path}: {prefix}_shape is {shape.tolist()}; expected two non-negative sizes")
        shapes[prefix] = tuple(int(v) for v in shape)
    n = shapes["adj"][0]
    if shapes["adj"][1] != n or shapes["attr"][0] != n:
        raise ValueError(f"{path}: adj_shape {list(shapes['adj'])} and attr_shape {list(shapes['attr'])} disagree; "
                         "expected an n x n adjacency and n feature rows")
    raw_labels = _vector(archive, "labels", path, "iuf", n)
    if raw_labels.dtype.kind == "f":
        bad = ~np.isfinite(raw_labels) | (raw_labels != np.floor(raw_labels))
        if bad.any():
            node = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{path}: labels hold {raw_labels[node].item()!r} at node {node}; expected integer classes")
    out = {"num_nodes": n, "feature_dim": shapes["attr"][1], "labels": raw_labels.astype(np.int64)}
    for prefix in ("adj", "attr"):
        indptr = _vector(archive, f"{prefix}_indptr", path, "iu", n + 1).astype(np.int64)
        nnz = _member_length(archive, f"{prefix}_indices", path)
        if _member_length(archive, f"{prefix}_data", path) != nnz:
            raise ValueError(f"{path}: {prefix}_data and {prefix}_indices differ in length; expected one value per index")
        _check_indptr(indptr, nnz, f"{prefix}_indptr", path)
        out[f"{prefix}_indptr"] = indptr
    return out


def _member_length(archive: zipfile.ZipFile, key: str, where: Path) -> int:
    stream = _stream(archive, key, where)
    stream.close()
    return int(stream.shape[0])


def _csr_blocks(archive: zipfile.ZipFile, path: Path, prefix: str, indptr: np.ndarray, cols: int,
                rows: int) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """``(first_row, last_row, indices, data)`` of ``rows`` CSR rows at a time, the indices checked in
    ``[0, cols)`` and the data finite numbers before any cast."""
    indices = _stream(archive, f"{prefix}_indices", path)
    data = _stream(archive, f"{prefix}_data", path)
    try:
        if indices.dtype.kind not in "iu" or data.dtype.kind not in "iuf":
            raise ValueError(f"{path}: {prefix}_indices has dtype {indices.dtype}, {prefix}_data {data.dtype}; "
                             "expected integer indices and numeric values")
        n = indptr.size - 1
        for lo in range(0, n, rows):
            hi = min(lo + rows, n)
            count = int(indptr[hi] - indptr[lo])
            idx, val = indices.take(count), data.take(count)
            if idx.size and (idx.min() < 0 or idx.max() >= cols):
                pos = int(np.flatnonzero((idx < 0) | (idx >= cols))[0])
                row = lo + int(np.searchsorted(indptr[lo + 1:hi + 1], indptr[lo] + pos, side="right"))
                raise ValueError(f"{path}: {prefix}_indices names column {int(idx[pos])} in row {row}; "
                                 f"expected columns in [0, {cols})")
            if val.dtype.kind == "f" and not np.isfinite(val).all():
                pos = int(np.flatnonzero(~np.isfinite(val))[0])
                row = lo + int(np.searchsorted(indptr[lo + 1:hi + 1], indptr[lo] + pos, side="right"))
                raise ValueError(f"{path}: {prefix}_data holds {val[pos].item()!r} in row {row}; expected finite values")
            yield lo, hi, idx.astype(np.int64), val
    finally:
        indices.close()
        data.close()


def _write_features(archive, path: Path, layout: dict, out: Path) -> None:
    """Densify the feature CSR into ``out`` (float32 ``[n, F]``), one block of rows at a time;
    duplicate entries of a row add up (as scipy's ``toarray``)."""
    from cherry.data.bounded import NpyWriter

    n, dim, indptr = layout["num_nodes"], layout["feature_dim"], layout["attr_indptr"]
    writer = NpyWriter(out, (n, dim), np.float32)
    rows = max(1, BLOCK_BYTES // max(4 * dim, 1))
    for lo, hi, idx, val in _csr_blocks(archive, path, "attr", indptr, dim, rows):
        dense = np.zeros((hi - lo, dim), dtype=np.float32)
        row = np.repeat(np.arange(hi - lo), np.diff(indptr[lo:hi + 1]))
        np.add.at(dense, (row, idx), val.astype(np.float32))
        if not np.isfinite(dense).all():  # float32 overflow of a huge value or a sum of them
            r, c = (int(v) for v in np.argwhere(~np.isfinite(dense))[0])
            raise ValueError(f"{path}: feature of node {lo + r}, column {c} is {dense[r, c]} in float32; expected finite")
        writer.write(dense)
    writer.close()


def _edge_blocks(archive, path: Path, layout: dict) -> Iterator[np.ndarray]:
    """``[k, 2]`` (row, column) pairs of the adjacency's stored entries, a row block at a time."""
    n, indptr = layout["num_nodes"], layout["adj_indptr"]
    rows = max(1, n * (1 << 20) // max(int(indptr[-1]), 1))  # about a million entries per block
    for lo, hi, idx, _ in _csr_blocks(archive, path, "adj", indptr, n, rows):
        src = np.repeat(np.arange(lo, hi, dtype=np.int64), np.diff(indptr[lo:hi + 1]))
        yield np.stack([src, idx], axis=1)


def convert_npz(name: str, build_dir: Path, workdir: Path) -> dict:
    """Convert ``name``'s file into the cache arrays in ``build_dir`` (bounded memory, module
    docstring); return the manifest's summary fields."""
    from cherry.data.bounded import degree_summary, write_csc, write_npy

    path = check_file(name)
    split = parse_name(name)[1]
    build_dir = Path(build_dir)
    with zipfile.ZipFile(path) as archive:
        layout = _read_layout(archive, path)
        n, labels = layout["num_nodes"], layout["labels"]
        labelled = labels[labels >= 0]
        num_classes = int(labelled.max()) + 1 if labelled.size else 1
        checks.check_labels(labels, n, num_classes, where=f"{path}: labels")
        splits = draw_split(labels, split)
        checks.check_splits(splits, n, labels)
        _write_features(archive, path, layout, build_dir / "features.npy")
        indptr = write_csc(_edge_blocks(archive, path, layout), n, workdir, build_dir, inverse_interleaved=False,
                           expected_edges=int(layout["adj_indptr"][-1]), where=f"{path}: adj")
    write_npy(build_dir / "indptr.npy", indptr)
    write_npy(build_dir / "labels.npy", labels)
    for s in checks.SPLITS:
        write_npy(build_dir / f"{s}_idx.npy", splits[s])
    return {"name": name, "num_nodes": n, "num_edges": int(indptr[-1]),
            "source_edges": int(layout["adj_indptr"][-1]), "feature_dim": layout["feature_dim"],
            "num_classes": num_classes, "split_sizes": {s: int(v.size) for s, v in splits.items()},
            "degree": degree_summary(indptr), "metadata": _metadata(path, split)}


def _metadata(path: Path, split: SplitSpec) -> dict:
    return {"source": "npz", "layout_version": LAYOUT_VERSION, "file": str(path.resolve()),
            "fingerprint": _fingerprint(path), "split": split.text()}


def cache_is_current(name: str, root=None) -> bool:
    """Whether ``name``'s cache was built from its file as it is now, with the same split."""
    try:
        manifest = cache_mod.read_manifest(cache_dir_for(name, root))
    except (FileNotFoundError, ValueError):
        return False
    path, split = parse_name(name)
    expected = _metadata(path, split)
    return all(manifest.get("metadata", {}).get(k) == v for k, v in expected.items())


def prepare_npz(name: str, root=None, force: bool = False, progress=None) -> Path:
    """Convert ``name`` into its cache unless it is current (or ``force``); return the cache directory."""
    from cherry.data.registry import ensure_writable_dir

    check_file(name)  # a missing file or member: one line before any work
    cache_dir = cache_dir_for(name, root)
    if cache_is_current(name, root) and not force:
        return cache_dir
    if progress is not None:
        progress(f"converting {parse_name(name)[0]} (split {parse_name(name)[1].text()})", 0.0)
    ensure_writable_dir(cache_dir.parent, "npz cache directory")
    cache_mod.remove_stale_temps(cache_dir)
    build = cache_mod.temp_sibling(cache_dir)
    try:
        build.mkdir()
        with tempfile.TemporaryDirectory(prefix="cherry-csc-", dir=cache_dir.parent) as work:
            summary = convert_npz(name, build, Path(work))
        cache_mod.seal_cache(build, cache_dir, summary)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)
    return cache_dir
