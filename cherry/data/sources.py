"""Where a dataset name leads: a built-in name, a registered one, or a directory path.

- Built-in names (`cherry.data.registry.DATASET_NAMES`) go to `cherry.data.datasets`.
- `register_dataset(name, loader)` adds a name: ``loader`` is a `Dataset` or a callable returning one
  (called with no arguments, once per process; the result is kept). Registered in a module listed in
  ``$CHERRY_PLUGINS`` (`cherry.plugins`), the name works in the CLI and the workflow too.
- A name that is an ``.npz`` file (`cherry.data.gnn_benchmark.is_npz_name`, optionally with
  ``?split=random:20,30@0``) is read in gnn-benchmark's layout, converted once into a cache under the
  data root (``root``), one per split.
- Any other name that names a directory (`cherry.data.ogb_dir.is_dataset_path`) is read as a dataset
  in OGB's node-property layout, converted once into ``<dir>/cherry``.

`load_dataset`, `prepare_dataset`, `dataset_info` and `verify_dataset` accept all four; ``scale``
applies to built-in names only.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Union

from cherry.data import cache as cache_mod
from cherry.data import checks, datasets
from cherry.data import gnn_benchmark
from cherry.data.graph import Dataset
from cherry.data.ogb_dir import cache_dir_of, is_dataset_path, prepare_directory
from cherry.data.registry import DATASET_NAMES

Loader = Union[Dataset, Callable[[], Dataset]]
_REGISTERED: dict[str, Loader] = {}
_LOADED: dict[str, Dataset] = {}
_lock = threading.Lock()


def register_dataset(name: str, loader: Loader, *, replace: bool = False) -> None:
    """Make ``name`` a dataset name everywhere a name is accepted (see the module docstring)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"dataset name must be a non-empty str without '/', got {name!r}")
    if name in DATASET_NAMES:
        raise ValueError(f"dataset name {name!r} is built in; choose another name")
    if not (isinstance(loader, Dataset) or callable(loader)):
        raise TypeError(f"loader must be a cherry.data.Dataset or a callable returning one, got "
                        f"{type(loader).__name__}")
    with _lock:
        if name in _REGISTERED and not replace and _REGISTERED[name] is not loader:
            raise ValueError(f"dataset {name!r} is already registered; pass replace=True to replace it")
        _REGISTERED[name] = loader
        _LOADED.pop(name, None)


def registered_datasets() -> tuple[str, ...]:
    from cherry.plugins import load_plugins

    load_plugins()
    return tuple(_REGISTERED)


def dataset_kind(name: object) -> str:
    """``"builtin"``, ``"registered"``, ``"npz"`` or ``"path"``; ValueError (one line) for an unknown
    name or an npz name with a bad split string."""
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a str, got {type(name).__name__}")
    if name in DATASET_NAMES:
        return "builtin"
    if name in registered_datasets():
        return "registered"
    if gnn_benchmark.is_npz_name(name):
        gnn_benchmark.parse_name(name)  # a bad split string: one line, before any work
        return "npz"
    if is_dataset_path(name):
        return "path"
    known = ", ".join(DATASET_NAMES + tuple(_REGISTERED))
    raise ValueError(f"unknown dataset {name!r}; expected one of: {known}, a name registered with "
                     "cherry.data.register_dataset, a directory in OGB's layout (a path) or an .npz file "
                     "in gnn-benchmark's layout")


def _registered(name: str) -> Dataset:
    with _lock:
        if name not in _LOADED:
            loader = _REGISTERED[name]
            ds = loader if isinstance(loader, Dataset) else loader()
            if not isinstance(ds, Dataset):
                raise TypeError(f"the loader of dataset {name!r} returned {type(ds).__name__}; expected a "
                                "cherry.data.Dataset")
            _LOADED[name] = ds
        return _LOADED[name]


def _from_cache(path: str, cache_dir: Path, verify: bool) -> Dataset:
    """The `Dataset` in the converted cache ``cache_dir`` of the dataset called ``path``."""
    import torch

    from cherry.data.graph import Graph

    arrays, manifest = cache_mod.load_cache(cache_dir, verify=verify)
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}
    graph = Graph(indptr=t["indptr"], indices=t["indices"], num_nodes=int(manifest["num_nodes"]))
    try:
        return Dataset(name=path, graph=graph, features=t["features"], labels=t["labels"],
                       train_idx=t["train_idx"], valid_idx=t["valid_idx"], test_idx=t["test_idx"],
                       num_classes=int(manifest["num_classes"]),
                       metadata=dict(manifest["metadata"], cache_dir=str(cache_dir)))
    except ValueError as exc:
        raise ValueError(f"dataset cache {cache_dir}: {exc}") from None


def load_dataset(name: str, root=None, scale: float | None = None, verify: bool = True) -> Dataset:
    """The `Dataset` called ``name`` (built-in, registered, an npz file or a directory; module docstring)."""
    kind = dataset_kind(name)
    if kind == "builtin":
        return datasets.load_dataset(name, root=root, scale=scale, verify=verify)
    if kind == "registered":
        return _registered(name)
    if kind == "npz":
        return _from_cache(name, gnn_benchmark.prepare_npz(name, root), verify)
    return _from_cache(name, prepare_directory(Path(name)), verify)


def prepare_dataset(name: str, root=None, scale: float | None = None, force: bool = False, progress=None,
                    **kwargs) -> Path:
    """`cherry.data.datasets.prepare_dataset` for any name; a registered one has no cache (returns
    nothing to prepare: its loader runs, and '-' stands for the cache)."""
    kind = dataset_kind(name)
    if kind == "builtin":
        return datasets.prepare_dataset(name, root=root, scale=scale, force=force, progress=progress, **kwargs)
    if kind == "registered":
        _registered(name)
        return Path("-")
    if kind == "npz":
        return gnn_benchmark.prepare_npz(name, root, force=force, progress=progress)
    if progress is not None:
        progress(f"converting {name}", 0.0)
    return prepare_directory(Path(name), force=force)


def _summary(ds: Dataset) -> dict:
    degree = ds.graph.in_degrees().float()
    n = ds.graph.num_nodes
    return {"name": ds.name, "num_nodes": n, "num_edges": ds.graph.num_edges, "feature_dim": ds.feature_dim,
            "num_classes": ds.num_classes,
            "split_sizes": {s: int(getattr(ds, f"{s}_idx").numel()) for s in checks.SPLITS},
            "degree": {"min": int(degree.min()) if n else 0, "median": float(degree.median()) if n else 0.0,
                       "max": int(degree.max()) if n else 0},
            "metadata": {k: v for k, v in ds.metadata.items() if k != "files"}}


def dataset_info(name: str, root=None, scale: float | None = None, verify: bool = True) -> dict:
    kind = dataset_kind(name)
    if kind == "builtin":
        return datasets.dataset_info(name, root=root, scale=scale, verify=verify)
    info = _summary(load_dataset(name, root=root, verify=verify))
    if kind == "path":
        info["cache_dir"] = str(cache_dir_of(Path(name)))
    if kind == "npz":
        info["cache_dir"] = str(gnn_benchmark.cache_dir_for(name, root))
    return info


def verify_dataset(name: str, root=None, scale: float | None = None) -> dict:
    kind = dataset_kind(name)
    if kind == "builtin":
        return datasets.verify_dataset(name, root=root, scale=scale)
    if kind == "path" and not (cache_dir_of(Path(name)) / "manifest.json").exists():
        raise FileNotFoundError(f"no dataset cache at {cache_dir_of(Path(name))}; run `cherry data prepare "
                                f"{name}` first")
    if kind == "npz" and not gnn_benchmark.cache_is_current(name, root):
        raise FileNotFoundError(f"no current dataset cache at {gnn_benchmark.cache_dir_for(name, root)}; run "
                                f"`cherry data prepare {name}` first (same --root and --split)")
    ds = load_dataset(name, root=root, verify=True)
    checks.check_features(ds.features, ds.graph.num_nodes, where=f"features of {name}")
    return {"name": name, "num_nodes": ds.graph.num_nodes, "num_edges": ds.graph.num_edges,
            "labels_checked": int(ds.labels.numel()), "features_checked": int(ds.features.numel())}
