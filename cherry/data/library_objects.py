"""A `Dataset` from the objects users load data with: a PyG ``Data`` or a DGL graph.

Both routes end in `cherry.data.arrays.dataset_from_arrays`, so an object is validated exactly as
arrays are (ids in range, finite features, one label per node, disjoint labelled splits). What is
checked here first is the object's own shape: which fields it has, masks that are boolean and one
per node, one label per node (a ``[N, 1]`` label column is accepted, a multi-label ``[N, C]`` is not).

The split comes from the object: PyG's ``train_mask``/``val_mask``/``test_mask`` or
``train_idx``/``val_idx``/``test_idx`` (``valid_`` spellings too), DGL's ``ndata`` masks; a 2-D mask
(several splits, one per column) needs ``split_column=``. ``split="random:20,30@0"`` instead draws a
seeded split (`cherry.data.random_split`) over the labelled nodes, for objects that carry none (PyG's
``Amazon`` and ``Coauthor``); the drawn split is recorded in the dataset's metadata.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np
import torch

from cherry.data.arrays import dataset_from_arrays

_SPLIT_NAMES = {"train": ("train",), "valid": ("val", "valid"), "test": ("test",)}


def _as_numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def _labels(y: Any, what: str) -> np.ndarray:
    y = _as_numpy(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{what} has shape {tuple(y.shape)}; expected one class per node ([N] or [N, 1])")
    return y


def _mask_to_index(mask: Any, what: str, num_nodes: int, column: Optional[int]) -> np.ndarray:
    mask = _as_numpy(mask)
    if mask.dtype != np.bool_:
        raise TypeError(f"{what} has dtype {mask.dtype}; expected a boolean mask (or pass an index "
                        "vector as *_idx)")
    if mask.ndim == 2:
        if column is None:
            raise ValueError(f"{what} has shape {tuple(mask.shape)} (several splits); pass split_column= "
                             f"in [0, {mask.shape[1]})")
        if not 0 <= column < mask.shape[1]:
            raise ValueError(f"split_column={column} is out of range; expected [0, {mask.shape[1]})")
        mask = mask[:, column]
    if mask.shape != (num_nodes,):
        raise ValueError(f"{what} has shape {tuple(mask.shape)}; expected one entry per node ({num_nodes})")
    return np.flatnonzero(mask)


def _object_split(get: Callable[[str], Any], where: str, num_nodes: int,
                  column: Optional[int]) -> dict[str, Optional[np.ndarray]]:
    """Each split from ``get(<name>_mask)`` or ``get(<name>_idx)`` (None where absent)."""
    out: dict[str, Optional[np.ndarray]] = {}
    for split, spellings in _SPLIT_NAMES.items():
        out[split] = None
        for stem in spellings:
            mask, index = get(f"{stem}_mask"), get(f"{stem}_idx")
            if mask is not None:
                out[split] = _mask_to_index(mask, f"{where}.{stem}_mask", num_nodes, column)
            elif index is not None:
                out[split] = index
            if out[split] is not None:
                break
    if out["train"] is None:
        raise ValueError(f"{where} has no train_mask or train_idx; pass split='random:20,30' to draw a "
                         "seeded split")
    return out


def _fields(name: str, edge_index: Any, features: Any, labels: np.ndarray, num_nodes: int,
            get: Callable[[str], Any], where: str, split: Optional[str], split_column: Optional[int],
            options: dict) -> dict:
    metadata = dict(options.pop("metadata", None) or {}, library=where.split(".")[0])
    if split is not None:
        from cherry.data.random_split import draw_split, parse_split

        spec = parse_split(split)
        splits = draw_split(labels, spec)
        metadata["split"] = spec.text()
    else:
        splits = _object_split(get, where, num_nodes, split_column)
    return dataset_from_arrays(name, edge_index, features, labels, splits["train"], splits["valid"],
                               splits["test"], metadata=metadata, **options)


def dataset_from_pyg(data: Any, name: str = "pyg", *, split: Optional[str] = None,
                     split_column: Optional[int] = None, **options) -> dict:
    """The fields of a `cherry.data.Dataset` for a ``torch_geometric.data.Data`` (module docstring);
    ``options`` are `dataset_from_arrays`'s (``undirected``, ``num_classes``, ``metadata``)."""
    missing = [k for k in ("x", "y", "edge_index") if getattr(data, k, None) is None]
    if missing:
        raise TypeError(f"data ({type(data).__name__}) lacks {', '.join(missing)}; expected a "
                        "torch_geometric.data.Data with x, y and edge_index")
    if hasattr(data, "node_types") and len(getattr(data, "node_types")) > 1:
        raise ValueError(f"data has node types {list(data.node_types)}; expected a homogeneous graph")
    x = data.x
    num_nodes = int(x.shape[0]) if hasattr(x, "shape") and len(x.shape) else 0
    labels = _labels(data.y, "data.y")
    get = lambda key: getattr(data, key, None)  # noqa: E731
    return _fields(name, data.edge_index, x, labels, num_nodes, get, "pyg.data", split, split_column,
                   dict(options))


def dataset_from_dgl(graph: Any, name: str = "dgl", *, feature_key: str = "feat", label_key: str = "label",
                     split: Optional[str] = None, split_column: Optional[int] = None, **options) -> dict:
    """The fields of a `cherry.data.Dataset` for a DGL graph with ``ndata[feature_key]``,
    ``ndata[label_key]`` and masks (module docstring); an edge ``u -> v`` is a message into ``v``."""
    if not all(hasattr(graph, k) for k in ("ndata", "edges", "num_nodes")):
        raise TypeError(f"graph ({type(graph).__name__}) is not a DGLGraph; expected one with ndata, edges() "
                        "and num_nodes()")
    if len(getattr(graph, "ntypes", ("_N",))) > 1:
        raise ValueError(f"graph has node types {list(graph.ntypes)}; expected a homogeneous graph")
    ndata = graph.ndata
    missing = [k for k in (feature_key, label_key) if k not in ndata]
    if missing:
        raise ValueError(f"graph.ndata lacks {', '.join(repr(k) for k in missing)} (has {sorted(ndata.keys())}); "
                         "expected node features and labels (feature_key=, label_key=)")
    num_nodes = int(graph.num_nodes())
    src, dst = graph.edges()
    edge_index = torch.stack([src.long(), dst.long()])
    get = lambda key: ndata[key] if key in ndata else None  # noqa: E731
    return _fields(name, edge_index, ndata[feature_key], _labels(ndata[label_key], f"graph.ndata[{label_key!r}]"),
                   num_nodes, get, "dgl.graph.ndata", split, split_column, dict(options))
