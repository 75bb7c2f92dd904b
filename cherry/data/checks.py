"""Content checks of a node-classification dataset: one-line ValueErrors naming the value and its source.

What a valid dataset is (the contract `cherry.data.Dataset` and every engine stage rely on):
- ``edge_index`` is ``[2, E]`` with node ids in ``[0, num_nodes)`` and, where the source declares
  its edge count, exactly that many edges (a short file would otherwise pass OGB's loader);
- ``features`` has one row per node and only finite values (NaN / inf rejected);
- ``labels`` has one entry per node, each in ``[0, num_classes)`` or `UNLABELLED` (-1, what
  `cherry.data.ogb_io` turns OGB's NaN label into);
- the train / valid / test index vectors hold distinct node ids in ``[0, num_nodes)``, are pairwise
  disjoint (as OGB's splits are), every split node is labelled, and the train split is not empty.

Every check takes an optional ``where`` (a file, or a field name) that the message names. They take
numpy arrays or torch tensors (viewed as numpy without a copy on the CPU), so that the converted data at
``data prepare`` and a `Dataset` at load share one definition; numpy because these are single passes
over memory, where torch's thread pool only adds overhead (50x on a loaded 2-core machine). Features
are scanned in chunks so a large (possibly memory-mapped) matrix needs no full-size temporary.
"""
from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import torch

UNLABELLED = -1
SPLITS = ("train", "valid", "test")
_FINITE_CHUNK_VALUES = 1 << 24


def _array(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def _at(where: Optional[str]) -> str:
    return f" ({where})" if where else ""


def _check_per_node(x: np.ndarray, what: str, unit: str, dims: int, num_nodes: int,
                    where: Optional[str]) -> None:
    if x.ndim != dims:
        raise ValueError(f"{what}{_at(where)} must be {dims}-D (one {unit} per node), got shape {tuple(x.shape)}")
    if x.shape[0] != num_nodes:
        raise ValueError(f"{what}{_at(where)} have {x.shape[0]} {unit}s for {num_nodes} nodes; "
                         f"expected one {unit} per node")


def check_edges(edge_index, num_nodes: int, declared_edges: Optional[int] = None,
                where: Optional[str] = None) -> None:
    """``edge_index`` is ``[2, E]`` with ids in ``[0, num_nodes)`` and ``E == declared_edges`` if given."""
    edges = _array(edge_index)
    if edges.ndim != 2 or edges.shape[0] != 2:
        raise ValueError(f"edges{_at(where)} must be pairs 'src,dst' ([2, E]), got shape {tuple(edges.shape)}")
    if declared_edges is not None and edges.shape[1] != declared_edges:
        raise ValueError(f"edges{_at(where)}: {edges.shape[1]} edges read, the dataset declares {declared_edges} "
                         "(truncated or padded file?)")
    if edges.size:
        lo, hi = int(edges.min()), int(edges.max())
        if lo < 0 or hi >= num_nodes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"edges{_at(where)} name node {bad}; expected node ids in [0, {num_nodes})")


def check_features(features, num_nodes: int, where: Optional[str] = None) -> None:
    """``features`` is ``[num_nodes, F]`` and every value is finite."""
    x = _array(features)
    _check_per_node(x, "features", "row", 2, num_nodes, where)
    if x.dtype.kind != "f":
        return
    rows = max(1, _FINITE_CHUNK_VALUES // max(x.shape[1], 1))
    for start in range(0, num_nodes, rows):
        chunk = x[start:start + rows]
        finite = np.isfinite(chunk)
        if not finite.all():
            r, c = (int(v) for v in np.argwhere(~finite)[0])
            raise ValueError(f"features{_at(where)} must be finite; node {start + r}, column {c} is "
                             f"{float(chunk[r, c])}")


def check_labels(labels, num_nodes: int, num_classes: int, where: Optional[str] = None) -> None:
    """``labels`` is ``[num_nodes]`` with values in ``[0, num_classes)`` or `UNLABELLED`."""
    y = _array(labels)
    _check_per_node(y, "labels", "label", 1, num_nodes, where)
    if y.size == 0:
        return
    bad = (y < UNLABELLED) | (y >= num_classes)
    if bad.any():
        node = int(np.flatnonzero(bad)[0])
        raise ValueError(f"labels{_at(where)}: node {node} has label {int(y[node])}; expected a class in "
                         f"[0, {num_classes}) or {UNLABELLED} (unlabelled)")


def check_splits(splits: Mapping[str, object], num_nodes: int, labels=None,
                 where: Optional[Mapping[str, str]] = None) -> None:
    """Split index vectors in ``[0, num_nodes)``, distinct, pairwise disjoint, labelled; train non-empty.

    ``splits`` maps each of `SPLITS` to a 1-D index vector; ``where`` maps a split to its source.
    """
    where = where or {}
    owner = np.full(num_nodes, -1, dtype=np.int8)
    y_all = None if labels is None else _array(labels)
    for i, split in enumerate(SPLITS):
        idx = _array(splits[split])
        at = _at(where.get(split))
        if idx.ndim != 1:
            raise ValueError(f"{split} split{at} must be a 1-D list of node ids, got shape {tuple(idx.shape)}")
        if split == "train" and idx.size == 0:
            raise ValueError(f"train split{at} is empty; expected at least one training node")
        if idx.size == 0:
            continue
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= num_nodes:
            raise ValueError(f"{split} split{at} names node {lo if lo < 0 else hi}; "
                             f"expected node ids in [0, {num_nodes})")
        counts = np.bincount(idx, minlength=num_nodes)
        if int(counts.max()) > 1:
            raise ValueError(f"{split} split{at} lists node {int(counts.argmax())} {int(counts.max())} times; "
                             "expected distinct node ids")
        taken = owner[idx]
        if (taken >= 0).any():
            pos = int(np.flatnonzero(taken >= 0)[0])
            other = SPLITS[int(taken[pos])]
            raise ValueError(f"{split} split{at} shares node {int(idx[pos])} with the {other} split; "
                             "expected disjoint splits")
        owner[idx] = i
        if y_all is not None:
            y = y_all[idx]
            if (y < 0).any():
                node = int(idx[int(np.flatnonzero(y < 0)[0])])
                raise ValueError(f"{split} split{at} holds node {node}, which is unlabelled; "
                                 "expected labelled split nodes")
