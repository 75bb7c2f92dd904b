"""Public entry points: prepare (generate or convert once), load (from the verified cache), describe.

Flow for a generated name: generate -> write OGB's CSV layout -> read it back in blocks and build the
CSC graph on disk (`cherry.data.bounded`, bounded memory; a ``chunked`` spec is also generated in
bounded memory) -> `.npy` cache, all inside a temporary directory renamed into ``<root>/<dir_name>`` at the
end, so an interruption leaves nothing half-written. For a real OGB name the user's files in
``<root>/<ogbn_name>`` are checked first: a missing file is a one-line FileNotFoundError naming the
directory, and nothing is downloaded or prompts. They are converted into ``<root>/<ogbn_name>/cherry``.
Ogbn-arxiv's and ogbn-products' raw CSV files, when all present, go through `cherry.data.bounded` in
bounded memory without OGB's loader. Ogbn-papers100M's raw npz files go through `cherry.data.ogb_dir`
(streamed, `cherry.data.npz_stream`) when `real_npz_streamable` (the same cache bytes, tested).
Anything else (only OGB's ``processed/`` file, or declared counts OGB would slice to) is read whole
with OGB's loader. Every graph is stored undirected: generated and ogbn-products edges get
their reverses from OGB (``add_inverse_edge``); ogbn-arxiv and ogbn-papers100M are symmetrised here,
as the OGB reference models do.

Validation: what OGB's loader returns is checked (`cherry.data.checks`, via `read_ogb`) before any
cache is written, so a cache holds only valid data; a `Dataset` re-checks labels and splits when it is
built, so a cache edited behind its manifest's back fails at load, not with an IndexError in training.
Trust (see `cherry.data.cache`): a cache is used only with a well-formed manifest that matches the
requested source; its files are checked against it. A cache whose manifest is missing or corrupt is
rebuilt by `prepare_dataset` (it says so through ``progress``) and refused by `load_dataset`,
`dataset_info` and `verify_dataset` with a one-line error saying how to rebuild it; a cache of another
spec or format version is rebuilt silently (that is what a version bump asks for).
Temporaries left by a killed prepare (``.<dir>.tmp-<host>-<pid>-<hex>``) are deleted by the next one.
Errors about the root (a file, not writable) are one-line ValueErrors naming the path.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from cherry.data import cache as cache_mod
from cherry.data import checks
from cherry.data.graph import Dataset, Graph
from cherry.data.bounded import convert_layout
from cherry.data.ogb_io import (check_ogb_files, read_ogb, real_csv_meta_dict, real_npz_streamable,
                               synth_meta_dict, write_synth_layout, write_synth_layout_blocks)
from cherry.data.registry import (CACHE_DIRNAME, OGB_SPECS, check_name, dir_name, ensure_writable_dir,
                                  is_synthetic, resolve_root, resolve_scale, synth_spec)
from cherry.data.synthetic import generate
from cherry.data.synthetic_chunked import ChunkedSynth

GENERATOR_VERSION = 1  # bump when the generator's output for a given spec changes
Progress = Optional[Callable[[str, float], None]]


def dataset_dir(name: str, root=None, scale: float | None = None) -> Path:
    """``<root>/<dir_name>``: where ``name`` (at ``scale``) lives in OGB's layout."""
    return resolve_root(root) / dir_name(check_name(name), scale)


def _expected_metadata(name: str, scale: float | None) -> dict:
    if name in OGB_SPECS:
        return {"source": "ogb", "ogb_name": name}
    spec = synth_spec(name, scale)
    meta = {"source": "generated", "generator_version": GENERATOR_VERSION,
            "spec": dataclasses.asdict(spec), "scale": spec.scale}
    return json.loads(json.dumps(meta))  # as the manifest stores it (tuples become lists)


def _cache_state(cache_dir: Path, expected: dict) -> tuple[str, dict | str | None]:
    """("current", manifest), ("stale", None), ("absent", None) or ("corrupt", reason)."""
    try:
        manifest = cache_mod.read_manifest(cache_dir)
    except cache_mod.StaleCacheError:
        return "stale", None
    except FileNotFoundError:
        return ("corrupt", "its manifest.json is missing") if cache_dir.is_dir() else ("absent", None)
    except ValueError as exc:
        return "corrupt", str(exc)
    meta = manifest.get("metadata", {})
    return ("current", manifest) if all(meta.get(k) == v for k, v in expected.items()) else ("stale", None)


_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR, errno.EISDIR}


@contextlib.contextmanager
def _writing(where: Path):
    """Turn a failed write under ``where`` (permissions, read-only or full disk) into a one-line ValueError."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise ValueError(f"cannot write {exc.filename or where}: {exc.strerror}; "
                         f"expected a writable directory for {where}") from None


def _convert(read: dict, report: Callable[[str, float], None]) -> tuple[dict, dict]:
    """OGB arrays -> cache arrays (undirected CSC) and the manifest's summary fields."""
    n = read["num_nodes"]
    src, dst = read["edge_index"]
    source_edges = int(src.size // 2 if read["inverse_added"] else src.size)
    if not read["inverse_added"]:
        report("symmetrising edges", 0.0)
        keys = np.sort(np.concatenate([dst * n + src, src * n + dst]))  # sort: numpy's hash unique is slower
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        dst, src = keys // n, keys % n
    report("building CSC graph", 0.0)
    graph = Graph.from_edges(torch.from_numpy(np.ascontiguousarray(src)),
                             torch.from_numpy(np.ascontiguousarray(dst)), n)
    degree = graph.in_degrees().numpy()
    arrays = {"indptr": graph.indptr.numpy(), "indices": graph.indices.numpy(),
              "features": read["features"], "labels": read["labels"],
              "train_idx": read["train_idx"], "valid_idx": read["valid_idx"], "test_idx": read["test_idx"]}
    labelled = read["labels"][read["labels"] >= 0]
    summary = {
        "num_nodes": n, "num_edges": graph.num_edges, "source_edges": source_edges,
        "feature_dim": int(read["features"].shape[1]),
        "num_classes_observed": int(labelled.max()) + 1 if labelled.size else 0,
        "split_sizes": {k: int(read[f"{k}_idx"].size) for k in ("train", "valid", "test")},
        "degree": {"min": int(degree.min()) if n else 0, "median": float(np.median(degree)) if n else 0.0,
                   "max": int(degree.max()) if n else 0},
    }
    return arrays, summary


def _write_generated_layout(spec, directory: Path, report) -> None:
    """Write ``spec``'s dataset in OGB's CSV layout; a ``chunked`` spec never holds its edges or
    features whole (`cherry.data.synthetic_chunked`), the others are generated in memory."""
    if not spec.chunked:
        write_synth_layout(directory, generate(spec), progress=report)
        return
    with ChunkedSynth(spec, workdir=directory) as source:
        write_synth_layout_blocks(directory, source.labels, source.edge_blocks(), source.feature_blocks(),
                                  (source.train_idx, source.valid_idx, source.test_idx),
                                  num_edges=spec.num_edges, feature_dim=spec.feature_dim, progress=report)


def _prepare_generated(name, root: Path, scale, report) -> Path:
    spec = synth_spec(name, scale)
    final = root / dir_name(name, scale)
    cache_mod.remove_stale_temps(final)
    tmp = cache_mod.temp_sibling(final)
    try:
        tmp.mkdir(parents=True)
        report("generating graph, features and split", 0.0)
        _write_generated_layout(spec, tmp, report)
        report("reading back in blocks", 0.0)
        build = tmp / f".{CACHE_DIRNAME}.building"
        build.mkdir()
        with tempfile.TemporaryDirectory(prefix="cherry-csc-", dir=tmp) as work:
            summary = convert_layout(tmp, synth_meta_dict(tmp, spec), build, Path(work), progress=report)
        report("writing cache", 0.0)
        info = {"name": name, "num_classes": spec.num_classes, **summary,
                "metadata": _expected_metadata(name, scale)}
        cache_mod.seal_cache(build, tmp / CACHE_DIRNAME, info)
        cache_mod.swap_into_place(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final / CACHE_DIRNAME


def _seal_bounded(name: str, directory: Path, convert, report) -> Path:
    """Write the cache of the real dataset ``name`` by ``convert(build_dir, work_dir) -> summary``
    (a bounded converter) into a private sibling of its cache directory, sealed and renamed into place."""
    cache_dir = directory / CACHE_DIRNAME
    cache_mod.remove_stale_temps(cache_dir)
    build = cache_mod.temp_sibling(cache_dir)
    try:
        build.mkdir()
        with tempfile.TemporaryDirectory(prefix="cherry-csc-", dir=directory) as work:
            summary = convert(build, Path(work))
        report("writing cache", 0.0)
        info = {**summary, "name": name, "num_classes": OGB_SPECS[name].num_classes,
                "metadata": _expected_metadata(name, None)}
        return cache_mod.seal_cache(build, cache_dir, info)
    finally:
        if build.exists():
            shutil.rmtree(build, ignore_errors=True)


def _npz_summary(directory: Path, build: Path, work: Path) -> dict:
    """`cherry.data.ogb_dir.convert_directory` of OGB's npz layout, its summary in `_convert`'s fields."""
    from cherry.data.ogb_dir import convert_directory

    summary = convert_directory(directory, build, work)
    labels = np.load(build / "labels.npy")
    labelled = labels[labels >= 0]
    keep = ("num_nodes", "num_edges", "source_edges", "feature_dim", "split_sizes", "degree")
    return {**{k: summary[k] for k in keep},
            "num_classes_observed": int(labelled.max()) + 1 if labelled.size else 0}


def _prepare_real(name, root: Path, report) -> Path:
    directory = root / dir_name(name)
    check_ogb_files(name, directory)
    ensure_writable_dir(directory, f"{name} directory")  # OGB writes processed/, Cherry its cache
    meta_dict = real_csv_meta_dict(name, directory)
    if meta_dict is not None:  # raw CSV files present: bounded memory, without OGB's loader
        report(f"reading {directory} in blocks", 0.0)
        convert = lambda build, work: convert_layout(directory, meta_dict, build, work, progress=report)  # noqa: E731
        return _seal_bounded(name, directory, convert, report)
    if real_npz_streamable(name, directory):  # papers100M's raw npz: streamed, as a directory by path
        report(f"reading {directory} in blocks", 0.0)
        return _seal_bounded(name, directory, lambda build, work: _npz_summary(directory, build, work), report)
    report(f"reading {directory} through ogb.NodePropPredDataset", 0.0)
    read = read_ogb(name, directory)
    cache_arrays, summary = _convert(read, report)
    del read
    report("writing cache", 0.0)
    info = {"name": name, "num_classes": OGB_SPECS[name].num_classes, **summary,
            "metadata": _expected_metadata(name, None)}
    return cache_mod.write_cache(directory / CACHE_DIRNAME, cache_arrays, info)


def prepare_dataset(name: str, root=None, scale: float | None = None, force: bool = False,
                    progress: Progress = None, *, rebuild_corrupt: bool = True) -> Path:
    """Make sure ``name``'s cache exists and is current; return the cache directory.

    The manifest is ``<returned path>/manifest.json``. ``scale`` (generated datasets only, in (0, 1])
    shrinks nodes, edges and split; ``force`` rebuilds even a current cache. ``progress(stage,
    fraction)`` is called as work advances. A cache whose manifest is missing or corrupt is rebuilt,
    or refused with a one-line ValueError if not ``rebuild_corrupt``. Raises ValueError for an unknown
    name, a bad scale, a root that is a file or not writable, or invalid data files (naming the file),
    and a one-line FileNotFoundError naming the directory to populate for a missing real dataset.
    """
    check_name(name)
    scale = resolve_scale(name, scale)
    root = resolve_root(root)
    report = progress or (lambda stage, fraction: None)
    cache_dir = root / dir_name(name, scale) / CACHE_DIRNAME
    state, detail = _cache_state(cache_dir, _expected_metadata(name, scale))
    if state == "current" and not force:
        return cache_dir
    if state == "corrupt" and not force:
        if not rebuild_corrupt:
            raise ValueError(f"dataset cache {cache_dir} cannot be trusted: {detail}; rebuild it with "
                             f"`cherry data prepare {name}` (same --root and --scale)")
        report(f"rebuilding the cache ({detail})", 0.0)
    with _writing(root):
        if name in OGB_SPECS:
            return _prepare_real(name, root, report)
        return _prepare_generated(name, ensure_writable_dir(root), scale, report)


def load_dataset(name: str, root=None, scale: float | None = None, verify: bool = True) -> Dataset:
    """Load ``name`` (preparing it first if absent or stale) from the checksum-verified cache.

    ``verify=False`` skips the sha256 pass (sizes are still checked). Large arrays are memory-mapped.
    A cache with a missing or corrupt manifest is refused (see the module docstring).
    """
    cache_dir = prepare_dataset(name, root=root, scale=scale, rebuild_corrupt=False)
    arrays, manifest = cache_mod.load_cache(cache_dir, verify=verify)
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    graph = Graph(indptr=t["indptr"], indices=t["indices"], num_nodes=int(manifest["num_nodes"]))
    metadata = dict(manifest["metadata"], cache_dir=str(cache_dir), source_edges=manifest["source_edges"])
    try:
        return Dataset(name=name, graph=graph, features=t["features"], labels=t["labels"],
                       train_idx=t["train_idx"], valid_idx=t["valid_idx"], test_idx=t["test_idx"],
                       num_classes=int(manifest["num_classes"]), metadata=metadata)
    except ValueError as exc:
        raise ValueError(f"dataset cache {cache_dir}: {exc}") from None


def dataset_info(name: str, root=None, scale: float | None = None, verify: bool = True) -> dict:
    """JSON-able summary of ``name`` from its manifest (prepared first if needed; every file's size,
    and its sha256 unless ``verify=False``, checked against the manifest)."""
    cache_dir = prepare_dataset(name, root=root, scale=scale, rebuild_corrupt=False)
    manifest = cache_mod.read_manifest(cache_dir)
    cache_mod.verify_cache(cache_dir, manifest, checksums=verify)
    keys = ("name", "num_nodes", "num_edges", "source_edges", "feature_dim", "num_classes",
            "split_sizes", "degree", "metadata")
    info = {k: manifest[k] for k in keys}
    info["cache_dir"] = str(cache_dir)
    info["cache_bytes"] = sum(entry["bytes"] for entry in manifest["files"].values())
    return info


def verify_dataset(name: str, root=None, scale: float | None = None) -> dict:
    """Check ``name``'s cache in full: checksums, then contents (graph, finite features, labels, splits).

    Does not prepare: an absent cache is a FileNotFoundError. Returns what was checked (JSON-able);
    any fault is a one-line ValueError naming the file or the value.
    """
    check_name(name)
    scale = resolve_scale(name, scale)
    cache_dir = resolve_root(root) / dir_name(name, scale) / CACHE_DIRNAME
    state, detail = _cache_state(cache_dir, _expected_metadata(name, scale))
    if state == "absent":
        raise FileNotFoundError(f"no dataset cache at {cache_dir}; run `cherry data prepare {name}` first")
    if state != "current":
        reason = detail if state == "corrupt" else "it was built from another spec or cache version"
        raise ValueError(f"dataset cache {cache_dir} cannot be trusted: {reason}; rebuild it with "
                         f"`cherry data prepare {name}` (same --root and --scale)")
    ds = load_dataset(name, root=root, scale=scale, verify=True)  # sha256 of every file, Dataset checks
    checks.check_features(ds.features, ds.graph.num_nodes, where=str(cache_dir / "features.npy"))
    return {"name": name, "cache_dir": str(cache_dir), "files_verified": len(cache_mod.ARRAY_NAMES),
            "num_nodes": ds.graph.num_nodes, "num_edges": ds.graph.num_edges,
            "labels_checked": int(ds.labels.numel()), "features_checked": int(ds.features.numel())}


def check_available(name: str, root=None) -> None:
    """Raise FileNotFoundError (one line naming the directory to populate) unless ``name`` can be
    prepared here: generated datasets always can; a real one needs its OGB files (or its cache)."""
    check_name(name)
    if is_synthetic(name):
        return
    directory = resolve_root(root) / dir_name(name)
    if (directory / CACHE_DIRNAME / "manifest.json").is_file():
        return
    check_ogb_files(name, directory)
