"""A `Dataset` from a user's arrays (`Dataset.from_arrays`), validated like prepared data.

The graph comes as an edge list (``edge_index`` ``[2, E]``, source row first, as in PyG) or as CSC
(``(indptr, indices)``: column ``v`` lists ``v``'s in-neighbours, Cherry's own form). An edge list is
stored undirected by default, reverse edges added and duplicates removed, as `cherry data prepare`
stores every graph; ``undirected=False`` keeps the edges as given (each ``src -> dst`` a message into
``dst``). Arrays may be numpy arrays, torch tensors or lists. Every check of a prepared dataset runs:
edge ids in range, one finite feature row and one label per node, labels in ``[0, num_classes)`` or -1
(unlabelled), split ids distinct, disjoint, labelled, a non-empty train split; a fault is a one-line
ValueError naming the array. ``num_classes`` defaults to the largest label + 1.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from cherry.data import checks
from cherry.data.values import integer_array, integer_scalar


def _numpy(name: str, value: Any, kind: str) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be an array (numpy, torch or a list), got {type(value).__name__}: {exc}") from None
    if kind == "int":
        if arr.size and arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
        return integer_array(arr, "value", name)  # an uint64 above 2**63 - 1 is named, not wrapped
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold numbers, got dtype {arr.dtype}")
    return arr.astype(np.float32, copy=False)


def undirected_csc(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """CSC ``(indptr, indices)`` of the edges ``src -> dst`` and their reverses, duplicates removed
    (in-neighbours in ascending id order)."""
    n = int(num_nodes)
    keys = np.unique(np.concatenate([dst * n + src, src * n + dst]))
    cols, rows = keys // n, keys % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n), out=indptr[1:])
    return indptr, rows.astype(np.int64)


def dataset_from_arrays(name: str, edge_index: Any = None, features: Any = None, labels: Any = None,
                        train_idx: Any = None, valid_idx: Any = None, test_idx: Any = None, *,
                        csc: Optional[tuple[Any, Any]] = None, num_classes: Optional[int] = None,
                        undirected: bool = True, metadata: Optional[dict] = None) -> dict:
    """The validated fields of `cherry.data.Dataset` for these arrays (see the module docstring), with
    the graph as ``csc=(indptr, indices, num_nodes)``; `Dataset.from_arrays` builds the dataset (this
    module stays below `cherry.data.graph`, which imports it)."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if (edge_index is None) == (csc is None):
        raise ValueError("give the graph once: edge_index ([2, E] src, dst) or csc=(indptr, indices)")
    for key, value in (("features", features), ("labels", labels), ("train_idx", train_idx)):
        if value is None:
            raise ValueError(f"{key} is required")
    x = _numpy("features", features, "float")
    if x.ndim != 2:
        raise ValueError(f"features must be [num_nodes, F], got shape {tuple(x.shape)}")
    n = int(x.shape[0])
    y = _numpy("labels", labels, "int").reshape(-1) if np.ndim(labels) == 2 else _numpy("labels", labels, "int")
    splits = {s: _numpy(f"{s}_idx", v if v is not None else [], "int")
              for s, v in zip(checks.SPLITS, (train_idx, valid_idx, test_idx))}
    checks.check_features(x, n)
    if num_classes is None:
        labelled = y[y >= 0]
        num_classes = int(labelled.max()) + 1 if labelled.size else 1
    num_classes = integer_scalar(num_classes, "num_classes", low=1)  # not 4.5, not "4"
    checks.check_labels(y, n, num_classes)
    checks.check_splits(splits, n, y)
    if csc is not None:
        if not isinstance(csc, (tuple, list)) or len(csc) != 2:
            raise TypeError("csc must be a pair (indptr, indices)")
        indptr, indices = (_numpy(k, v, "int") for k, v in zip(("csc indptr", "csc indices"), csc))
    else:
        edges = _numpy("edge_index", edge_index, "int")
        checks.check_edges(edges, n, where="edge_index")
        if undirected:
            indptr, indices = undirected_csc(edges[0], edges[1], n)
        else:  # as Graph.from_edges: in-neighbours keep edge-list order
            order = np.argsort(edges[1], kind="stable")
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(edges[1], minlength=n), out=indptr[1:])
            indices = edges[0][order]
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    return dict(name=name, csc=(t(indptr), t(indices), n), features=t(x), labels=t(y), train_idx=t(splits["train"]),
                valid_idx=t(splits["valid"]), test_idx=t(splits["test"]), num_classes=int(num_classes),
                metadata=dict(metadata or {}, source="arrays"))
