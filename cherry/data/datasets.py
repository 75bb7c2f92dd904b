"""Public entry points: prepare (generate or convert once), load (from the verified cache), describe.

Flow for a generated name: generate arrays -> write OGB's CSV layout -> read back with OGB's loader ->
CSC graph -> `.npy` cache, all inside a temporary directory renamed into ``<root>/<dir_name>`` at the
end, so an interruption leaves nothing half-written. For a real OGB name the user's files in
``<root>/<ogbn_name>`` are checked first (a missing file is a one-line FileNotFoundError naming the
directory; nothing is downloaded, nothing prompts), read with OGB's loader and converted into
``<root>/<ogbn_name>/cherry``. Every graph is stored undirected: generated and ogbn-products edges get
their reverses from OGB (``add_inverse_edge``); ogbn-arxiv and ogbn-papers100M are symmetrised here,
as the OGB reference models do.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from cherry.data import cache as cache_mod
from cherry.data.graph import Dataset, Graph
from cherry.data.ogb_io import check_ogb_files, read_ogb, synth_meta_dict, write_synth_layout
from cherry.data.registry import (CACHE_DIRNAME, OGB_SPECS, check_name, dir_name, resolve_root,
                                  resolve_scale, synth_spec)
from cherry.data.synthetic import generate

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


def _current_manifest(cache_dir: Path, expected: dict) -> dict | None:
    """The manifest if the cache exists and was made from the same source/spec; else None."""
    try:
        manifest = cache_mod.read_manifest(cache_dir)
    except (FileNotFoundError, ValueError):
        return None
    meta = manifest.get("metadata", {})
    return manifest if all(meta.get(k) == v for k, v in expected.items()) else None


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


def _prepare_generated(name, root: Path, scale, report) -> Path:
    spec = synth_spec(name, scale)
    final = root / dir_name(name, scale)
    cache_mod.remove_stale_temps(final)  # left by a killed prepare
    tmp = cache_mod.temp_sibling(final)
    try:
        report("generating graph, features and split", 0.0)
        arrays = generate(spec)
        write_synth_layout(tmp, arrays, progress=report)
        del arrays
        report("reading back through ogb.NodePropPredDataset", 0.0)
        read = read_ogb(name, tmp, meta_dict=synth_meta_dict(tmp, spec))
        # OGB's processed pickle duplicates the raw CSVs; the cache supersedes it.
        shutil.rmtree(tmp / "processed", ignore_errors=True)
        (tmp / "processed").mkdir()
        cache_arrays, summary = _convert(read, report)
        del read
        report("writing cache", 0.0)
        info = {"name": name, "num_classes": spec.num_classes, **summary,
                "metadata": _expected_metadata(name, scale)}
        cache_mod.write_cache(tmp / CACHE_DIRNAME, cache_arrays, info)
        cache_mod.swap_into_place(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final / CACHE_DIRNAME


def _prepare_real(name, root: Path, report) -> Path:
    directory = root / dir_name(name)
    check_ogb_files(name, directory)
    report(f"reading {directory} through ogb.NodePropPredDataset", 0.0)
    read = read_ogb(name, directory)
    cache_arrays, summary = _convert(read, report)
    del read
    report("writing cache", 0.0)
    info = {"name": name, "num_classes": OGB_SPECS[name].num_classes, **summary,
            "metadata": _expected_metadata(name, None)}
    return cache_mod.write_cache(directory / CACHE_DIRNAME, cache_arrays, info)


def prepare_dataset(name: str, root=None, scale: float | None = None, force: bool = False,
                    progress: Progress = None) -> Path:
    """Make sure ``name``'s cache exists and is current; return the cache directory.

    The manifest is ``<returned path>/manifest.json``. ``scale`` (generated datasets only, in (0, 1])
    shrinks nodes, edges and split; ``force`` rebuilds even a current cache. ``progress(stage,
    fraction)`` is called as work advances. Raises ValueError for an unknown name or bad scale and a
    one-line FileNotFoundError naming the directory to populate for a missing real dataset.
    """
    check_name(name)
    scale = resolve_scale(name, scale)
    root = resolve_root(root)
    report = progress or (lambda stage, fraction: None)
    cache_dir = root / dir_name(name, scale) / CACHE_DIRNAME
    if not force and _current_manifest(cache_dir, _expected_metadata(name, scale)) is not None:
        return cache_dir
    root.mkdir(parents=True, exist_ok=True)
    if name in OGB_SPECS:
        return _prepare_real(name, root, report)
    return _prepare_generated(name, root, scale, report)


def load_dataset(name: str, root=None, scale: float | None = None, verify: bool = True) -> Dataset:
    """Load ``name`` (preparing it first if needed) from the checksum-verified cache.

    ``verify=False`` skips the sha256 pass (sizes are still checked). Large arrays are memory-mapped.
    """
    cache_dir = prepare_dataset(name, root=root, scale=scale)
    arrays, manifest = cache_mod.load_cache(cache_dir, verify=verify)
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    graph = Graph(indptr=t["indptr"], indices=t["indices"], num_nodes=int(manifest["num_nodes"]))
    metadata = dict(manifest["metadata"], cache_dir=str(cache_dir), source_edges=manifest["source_edges"])
    return Dataset(name=name, graph=graph, features=t["features"], labels=t["labels"],
                   train_idx=t["train_idx"], valid_idx=t["valid_idx"], test_idx=t["test_idx"],
                   num_classes=int(manifest["num_classes"]), metadata=metadata)


def dataset_info(name: str, root=None, scale: float | None = None) -> dict:
    """JSON-able summary of ``name`` from its manifest (prepared first if needed; sizes verified)."""
    cache_dir = prepare_dataset(name, root=root, scale=scale)
    manifest = cache_mod.read_manifest(cache_dir)
    cache_mod.verify_cache(cache_dir, manifest, checksums=False)
    keys = ("name", "num_nodes", "num_edges", "source_edges", "feature_dim", "num_classes",
            "split_sizes", "degree", "metadata")
    info = {k: manifest[k] for k in keys}
    info["cache_dir"] = str(cache_dir)
    info["cache_bytes"] = sum(entry["bytes"] for entry in manifest["files"].values())
    return info
