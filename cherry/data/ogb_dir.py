"""Any directory in OGB's node-property layout, read as a dataset by its path (no ``ogb`` package).

Layout read (gzip CSV without header, as OGB ships it): ``raw/edge.csv.gz`` ("src,dst" rows),
``raw/node-feat.csv.gz``, ``raw/node-label.csv.gz`` (NaN or -1: unlabelled), optionally
``raw/num-node-list.csv.gz`` (else one node per feature row), and ``split/<one split>/{train,valid,
test}.csv.gz``; OGB's binary form (``raw/data.npz`` + ``raw/node-label.npz``) is read too.
``RELEASE_v1.txt`` and further node files (``node_year``) are optional and ignored. The graph is stored
undirected (reverses added, duplicates removed). The class count is OGB's for a directory named like an
OGB dataset (``ogbn_arxiv``: 40) and otherwise the largest label + 1.

Both layouts are converted in bounded memory (`convert_directory`: features streamed, npz members
read in blocks, the CSC built on disk by `cherry.data.bounded`), into the same bytes as reading them
whole (`read_directory`, kept as the reference). The converted cache lives in ``<dir>/cherry`` (`cherry.data.cache`, checksummed, written atomically);
its manifest records each source file's sha256, so an edited source is converted again (even with
its size and modification time restored) and an unchanged one is read from the cache; the files'
stat (with the change time, which no user can set back) spares re-reading them while untouched.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cherry.data import cache as cache_mod
from cherry.data import checks
from cherry.data.arrays import undirected_csc
from cherry.data.registry import CACHE_DIRNAME, OGB_SPECS
from cherry.data.values import integer_array, integer_column
from cherry.extras import require

LAYOUT_VERSION = 1


def is_dataset_path(name: object) -> bool:
    """Whether a dataset name is meant as a directory: it names a path (a separator, ``.``, ``~``) or
    an existing directory."""
    if not isinstance(name, str) or not name:
        return False
    return "/" in name or name.startswith((".", "~")) or Path(name).is_dir()


def _split_dir(directory: Path) -> Path:
    split_root = directory / "split"
    subdirs = sorted(p for p in split_root.iterdir() if p.is_dir()) if split_root.is_dir() else []
    if len(subdirs) != 1:
        found = ", ".join(p.name for p in subdirs) or "none"
        raise ValueError(f"{split_root}: expected exactly one split directory with train/valid/test.csv.gz, "
                         f"found {found}")
    return subdirs[0]


def source_files(directory: Path) -> dict[str, Path]:
    """The files read from ``directory``; FileNotFoundError (one line, naming what is missing)."""
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise FileNotFoundError(f"dataset directory {directory} does not exist; expected a directory in OGB's "
                                "node-property layout (raw/, split/<name>/)")
    raw = directory / "raw"
    if (raw / "data.npz").exists():
        files = {"graph": raw / "data.npz", "labels": raw / "node-label.npz"}
    else:
        files = {"edges": raw / "edge.csv.gz", "features": raw / "node-feat.csv.gz",
                 "labels": raw / "node-label.csv.gz"}
        if (raw / "num-node-list.csv.gz").exists():
            files["num_nodes"] = raw / "num-node-list.csv.gz"
    split = _split_dir(directory)
    files.update({s: split / f"{s}.csv.gz" for s in checks.SPLITS})
    missing = [str(p.relative_to(directory)) for p in files.values() if not p.exists()]
    if missing:
        raise FileNotFoundError(f"dataset directory {directory} lacks {', '.join(missing)} "
                                "(OGB's node-property layout)")
    return files


def fingerprint(files: dict[str, Path]) -> dict[str, str]:
    """The sha256 of each source file's content: what the cache was built from, and what decides
    whether it is stale (a size and a modification time can be restored by ``cp -p`` or tar over an
    edit; the content cannot)."""
    return {k: cache_mod.sha256_file(p) for k, p in sorted(files.items())}


def _stat_key(files: dict[str, Path]) -> dict[str, list[int]]:
    """Size, modification and change time and inode of each file: when all are as recorded, the
    content is (the change time cannot be set back by a user), so the hashes need not be read again."""
    return {k: [(st := p.stat()).st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino] for k, p in sorted(files.items())}


def _csv(path: Path, dtype) -> np.ndarray:
    pd = require("pandas")

    try:
        return pd.read_csv(path, compression="gzip", header=None).to_numpy(dtype=dtype)
    except Exception as exc:  # gzip, parser or conversion errors: name the file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {reason}); expected headerless "
                         "numeric CSV in gzip") from None


def _member(npz, key: str, path: Path) -> np.ndarray:
    """Member ``key`` of an open npz archive; a missing one is a one-line ValueError naming both."""
    if key not in npz.files:
        raise ValueError(f"{path} has no member {key!r} (it holds: {', '.join(npz.files) or 'none'}); expected "
                         "OGB's binary layout (edge_index, node_feat, num_nodes_list)")
    return npz[key]


def _first_member(npz, path: Path) -> np.ndarray:
    """The labels of ``raw/node-label.npz``: its one member, whatever its name."""
    return _member(npz, npz.files[0] if npz.files else "node_label", path)


def _num_nodes(path: Path) -> int:
    """The node count of ``raw/num-node-list.csv.gz``: one integer (2000.5 is refused, not truncated)."""
    counts = integer_column(_csv(path, None), "node count", str(path), source=path)
    if counts.size != 1 or counts[0] < 0:
        raise ValueError(f"{path} must hold one node count >= 0 (a single graph), got {counts.tolist()[:5]}")
    return int(counts[0])


def _labels(values, path: Path) -> np.ndarray:
    """One label per row, as int64 (`cherry.data.values`: 1.5, -0.5, 1e20 or text refused; NaN is
    unlabelled)."""
    return integer_column(values, "label", str(path), missing=checks.UNLABELLED, source=path)


def _splits(files: dict[str, Path]) -> dict[str, np.ndarray]:
    """The split files' node ids, one per row, as int64 (`cherry.data.values`)."""
    return {s: integer_column(_csv(files[s], None), "node id", str(files[s]), source=files[s]) for s in checks.SPLITS}


def num_classes_for(directory: Path, labels: np.ndarray) -> int:
    """OGB's class count for a directory named like an OGB dataset, else the largest label + 1."""
    ogb_name = Path(directory).name.replace("_", "-")
    if ogb_name in OGB_SPECS:
        return OGB_SPECS[ogb_name].num_classes
    labelled = labels[labels >= 0]
    return int(labelled.max()) + 1 if labelled.size else 1


def read_directory(directory: Path) -> tuple[dict[str, np.ndarray], dict]:
    """Cache arrays (`cherry.data.cache.ARRAY_NAMES`) and the manifest summary of ``directory``."""
    directory = Path(directory).expanduser()
    files = source_files(directory)
    if "graph" in files:
        with np.load(files["graph"]) as npz:
            edges = integer_array(_member(npz, "edge_index", files["graph"]), "node id", str(files["graph"]))
            features = np.asarray(_member(npz, "node_feat", files["graph"]), dtype=np.float32)
            n = int(np.asarray(npz["num_nodes_list"]).reshape(-1)[0]) if "num_nodes_list" in npz else features.shape[0]
        with np.load(files["labels"]) as npz:
            labels = _labels(_first_member(npz, files["labels"]), files["labels"])
    else:
        edges = integer_array(_csv(files["edges"], None), "node id", str(files["edges"]), source=files["edges"]).T
        features = _csv(files["features"], np.float32)
        n = _num_nodes(files["num_nodes"]) if "num_nodes" in files else features.shape[0]
        labels = _labels(_csv(files["labels"], None), files["labels"])
    splits = _splits(files)
    checks.check_edges(edges, n, where=str(files.get("edges", files.get("graph"))))
    checks.check_features(features, n, where=str(files.get("features", files.get("graph"))))
    num_classes = num_classes_for(directory, labels)
    checks.check_labels(labels, n, num_classes, where=str(files["labels"]))
    checks.check_splits(splits, n, labels, where={s: str(files[s]) for s in checks.SPLITS})
    indptr, indices = undirected_csc(edges[0], edges[1], n)
    degree = np.diff(indptr)
    arrays = {"indptr": indptr, "indices": indices, "features": features, "labels": labels,
              "train_idx": splits["train"], "valid_idx": splits["valid"], "test_idx": splits["test"]}
    summary = {"name": str(directory), "num_nodes": n, "num_edges": int(indices.size),
               "source_edges": int(edges.shape[1]), "feature_dim": int(features.shape[1]),
               "num_classes": num_classes,
               "split_sizes": {s: int(v.size) for s, v in splits.items()},
               "degree": {"min": int(degree.min()) if n else 0, "median": float(np.median(degree)) if n else 0.0,
                          "max": int(degree.max()) if n else 0},
               "metadata": _source_metadata(files)}
    return arrays, summary


def _blocks(path: Path, rows: int | None = None):
    """`cherry.data.bounded.csv_blocks` of ``path``, its read errors named as `_csv` names them."""
    from cherry.data.bounded import csv_blocks

    try:
        yield from csv_blocks(path, rows)
    except Exception as exc:  # raised by the reader only: the consumer's checks run outside this frame
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path} cannot be read ({type(exc).__name__}: {reason}); expected headerless "
                         "numeric CSV in gzip") from None


def _count_lines(path: Path) -> int:
    """Newlines of a gzip file, read in blocks: sizes the CSC's buckets (an estimate, not a check)."""
    import gzip

    lines = 0
    try:
        with gzip.open(path, "rb") as f:
            while block := f.read(8 << 20):
                lines += block.count(b"\n")
    except (OSError, EOFError):  # a corrupt stream: the parse names it
        pass
    return lines


def _write_features(path: Path, blocks, where: str, n: int | None, workdir: Path) -> tuple[int, int]:
    """Stream the feature rows of ``blocks`` into ``path`` (float32 ``.npy``, as `read_directory` casts
    them); return ``(rows, F)``. The rows go to a raw file first and are copied behind the header once
    counted, since without a node count the row count is the node count and the header comes first."""
    from cherry.data.bounded import NpyWriter, feature_block

    raw, rows, dim = Path(workdir) / "features.raw", 0, None
    with open(raw, "wb") as out:
        for block in blocks:
            values = feature_block(block, rows, where)
            dim = values.shape[1] if dim is None else dim
            values.tofile(out)
            rows += values.shape[0]
    if n is not None and rows != n:
        raise ValueError(f"features ({where}) have {rows} rows for {n} nodes; expected one row per node")
    writer = NpyWriter(path, (rows, dim), np.float32)
    with open(raw, "rb") as f:
        while block := f.read((8 << 20) // (4 * dim) * 4 * dim or 4 * dim):
            writer.write(np.frombuffer(block, dtype=np.float32).reshape(-1, dim))
    writer.close()
    raw.unlink()
    return rows, int(dim)


def convert_directory(directory: Path, build_dir: Path, workdir: Path) -> dict:
    """Convert the layout in ``directory`` (CSV, or OGB's binary npz) into the cache arrays in
    ``build_dir`` in bounded memory (`cherry.data.bounded`: features streamed into ``features.npy``,
    the undirected CSC built by the on-disk counting sort; labels, the split and ``indptr`` held
    whole; npz members read in blocks by `cherry.data.npz_stream`); return the manifest summary. The
    files and the summary are those of `read_directory` + `cherry.data.cache.write_cache`, byte for
    byte (tested); only the order of the checks differs (features, then labels and split, then edges)."""
    from cherry.data import bounded, npz_stream
    from cherry.data.bounded import degree_summary, write_csc, write_npy

    directory, build_dir = Path(directory).expanduser(), Path(build_dir)
    files = source_files(directory)
    if "graph" in files:
        graph = files["graph"]
        with np.load(graph) as npz:
            n = int(np.asarray(npz["num_nodes_list"]).reshape(-1)[0]) if "num_nodes_list" in npz else None
        n, feature_dim = _write_features(build_dir / "features.npy", npz_stream.row_blocks(graph, "node_feat"),
                                         str(graph), n, workdir)
        with np.load(files["labels"]) as npz:
            labels = _labels(_first_member(npz, files["labels"]), files["labels"])
        edge_shape = npz_stream.header(graph, "edge_index")[0]
        edge_blocks = npz_stream.pair_blocks(graph, "edge_index")
        expected, edges_where = (edge_shape[1] if len(edge_shape) == 2 else None), str(graph)
    else:
        n = _num_nodes(files["num_nodes"]) if "num_nodes" in files else None
        n, feature_dim = _write_features(build_dir / "features.npy", _blocks(files["features"]),
                                         str(files["features"]), n, workdir)
        labels = _labels(_csv(files["labels"], None), files["labels"])
        edge_blocks = _blocks(files["edges"], bounded.READ_ROWS * 8)
        expected, edges_where = _count_lines(files["edges"]), str(files["edges"])
    splits = _splits(files)
    num_classes = num_classes_for(directory, labels)
    checks.check_labels(labels, n, num_classes, where=str(files["labels"]))
    checks.check_splits(splits, n, labels, where={s: str(files[s]) for s in checks.SPLITS})
    source_edges = [0]

    def counted(blocks):
        for block in blocks:
            source_edges[0] += block.shape[0]
            yield block

    indptr = write_csc(counted(edge_blocks), n, workdir, build_dir, inverse_interleaved=False,
                       declared_edges=None, expected_edges=expected, where=edges_where)
    write_npy(build_dir / "indptr.npy", indptr)
    write_npy(build_dir / "labels.npy", labels)
    for s in checks.SPLITS:
        write_npy(build_dir / f"{s}_idx.npy", splits[s])
    return {"name": str(directory), "num_nodes": n, "num_edges": int(indptr[-1]), "source_edges": source_edges[0],
            "feature_dim": feature_dim, "num_classes": num_classes,
            "split_sizes": {s: int(v.size) for s, v in splits.items()}, "degree": degree_summary(indptr),
            "metadata": _source_metadata(files)}


def _source_metadata(files: dict[str, Path]) -> dict:
    return {"source": "path", "layout_version": LAYOUT_VERSION, "files": fingerprint(files), "stat": _stat_key(files)}


def _write_bounded(directory: Path, cache_dir: Path) -> None:
    """`convert_directory` into a private sibling of ``cache_dir``, sealed and renamed into place."""
    import shutil

    cache_mod.remove_stale_temps(cache_dir)
    tmp = cache_mod.temp_sibling(cache_dir)
    try:
        work = tmp / "work"
        work.mkdir(parents=True)
        summary = convert_directory(directory, tmp, work)
        shutil.rmtree(work)
        cache_mod.seal_cache(tmp, cache_dir, summary)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cache_dir_of(directory: Path) -> Path:
    return Path(directory).expanduser() / CACHE_DIRNAME


def cache_is_current(directory: Path) -> bool:
    """Whether ``<directory>/cherry`` was built from the directory's current source files."""
    try:
        manifest = cache_mod.read_manifest(cache_dir_of(directory))
    except (FileNotFoundError, ValueError):
        return False
    files = source_files(directory)
    meta = manifest.get("metadata", {})
    if meta.get("source") != "path" or meta.get("layout_version") != LAYOUT_VERSION:
        return False
    if meta.get("stat") == _stat_key(files) and meta.get("files") is not None:
        return True  # untouched since the conversion (see `_stat_key`)
    return meta.get("files") == fingerprint(files)  # the contents decide


def prepare_directory(directory: Path, force: bool = False) -> Path:
    """Convert ``directory`` into its cache unless it is current; return the cache directory."""
    directory = Path(directory).expanduser()
    source_files(directory)  # missing files: one line before any work
    if force or not cache_is_current(directory):
        try:
            _write_bounded(directory, cache_dir_of(directory))
        except PermissionError as exc:
            raise ValueError(f"cannot write the cache {cache_dir_of(directory)}: {exc.strerror}; expected a "
                             "writable dataset directory") from None
    return cache_dir_of(directory)


def dataset_slug(name: str) -> str:
    """A file-name-safe stand-in for a dataset name (the workflow's paths): a plain name is itself; a
    path becomes ``path-<basename>-<hash of the path>``."""
    import hashlib
    import re

    if re.fullmatch(r"[A-Za-z0-9_.-]+", name) and not name.startswith("."):
        return name
    base = re.sub(r"[^A-Za-z0-9_-]", "_", Path(name).name) or "dir"
    return f"path-{base}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
