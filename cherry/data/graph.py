"""Graphs in compressed sparse column (CSC) form and the `Dataset` bundle.

A `Graph` stores, for every destination node ``v``, its in-neighbours (message sources)
``indices[indptr[v]:indptr[v + 1]]``. Invariants, checked on construction:
``indptr`` is int64 of length ``num_nodes + 1``, starts at 0, never decreases and ends at
``len(indices)``; ``indices`` is int64 with every entry in ``[0, num_nodes)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from cherry.data import checks
from cherry.ops.sampling import check_index_vector


def _check_index_tensor(name: str, t: Any) -> None:
    check_index_vector(name, t, dtype_error=TypeError)


@dataclass(frozen=True)
class Graph:
    """A directed graph in CSC form: column ``v`` lists the sources of edges into ``v``."""

    indptr: torch.Tensor
    indices: torch.Tensor
    num_nodes: int
    trusted: bool = field(default=False, repr=False, compare=False)  # a copy of a validated graph

    def __post_init__(self) -> None:
        if self.trusted:
            return
        if not isinstance(self.num_nodes, int) or self.num_nodes < 0:
            raise ValueError(f"num_nodes must be a non-negative int, got {self.num_nodes!r}")
        _check_index_tensor("indptr", self.indptr)
        _check_index_tensor("indices", self.indices)
        if self.indptr.numel() != self.num_nodes + 1:
            raise ValueError(
                f"indptr must have num_nodes + 1 = {self.num_nodes + 1} entries, got {self.indptr.numel()}"
            )
        if int(self.indptr[0]) != 0:
            raise ValueError(f"indptr must start at 0, got {int(self.indptr[0])}")
        if int(self.indptr[-1]) != self.indices.numel():
            raise ValueError(
                f"indptr must end at len(indices) = {self.indices.numel()}, got {int(self.indptr[-1])}"
            )
        if self.num_nodes > 0 and bool((self.indptr[1:] < self.indptr[:-1]).any()):
            raise ValueError("indptr must be non-decreasing")
        if self.indices.numel() > 0:
            lo, hi = int(self.indices.min()), int(self.indices.max())
            if lo < 0 or hi >= self.num_nodes:
                raise ValueError(
                    f"indices must lie in [0, {self.num_nodes}), found values in [{lo}, {hi}]"
                )

    @property
    def num_edges(self) -> int:
        return int(self.indices.numel())

    @property
    def device(self) -> torch.device:
        return self.indptr.device

    @property
    def nbytes(self) -> int:
        """Bytes of the CSC arrays (what holding the graph on a device costs)."""
        return (self.indptr.numel() + self.indices.numel()) * self.indptr.element_size()

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Graph":
        """The same graph on ``device`` (not validated again: it is a copy of a valid graph)."""
        return Graph(self.indptr.to(device, non_blocking=non_blocking),
                     self.indices.to(device, non_blocking=non_blocking), self.num_nodes, trusted=True)

    def pin_memory(self) -> "Graph":
        """The same graph in pinned (page-locked) host memory, for asynchronous copies to a GPU."""
        if self.indptr.device.type != "cpu":
            raise ValueError(f"pin_memory needs a host graph, this one is on {self.indptr.device}")
        return Graph(self.indptr.pin_memory(), self.indices.pin_memory(), self.num_nodes, trusted=True)

    def in_degrees(self) -> torch.Tensor:
        """In-degree of every node (int64, length ``num_nodes``)."""
        return self.indptr[1:] - self.indptr[:-1]

    @staticmethod
    def from_edges(src: torch.Tensor, dst: torch.Tensor, num_nodes: int) -> "Graph":
        """Build the CSC graph of edges ``src[i] -> dst[i]``; in-neighbours keep edge-list order."""
        _check_index_tensor("src", src)
        _check_index_tensor("dst", dst)
        if src.numel() != dst.numel():
            raise ValueError(f"src and dst must have equal length, got {src.numel()} and {dst.numel()}")
        if dst.numel() > 0 and (int(dst.min()) < 0 or int(dst.max()) >= num_nodes):
            raise ValueError(f"dst ids must lie in [0, {num_nodes})")
        order = torch.argsort(dst, stable=True)
        counts = torch.bincount(dst, minlength=num_nodes)
        indptr = torch.zeros(num_nodes + 1, dtype=torch.int64)
        torch.cumsum(counts, 0, out=indptr[1:])
        return Graph(indptr=indptr, indices=src[order].contiguous(), num_nodes=num_nodes)


@dataclass(frozen=True)
class Dataset:
    """A node-classification dataset: graph, float32 features, int64 labels and the split.

    Invariants: ``features`` is ``[num_nodes, feature_dim]`` float32 (possibly memory-mapped).
    ``labels`` is ``[num_nodes]`` int64 with values in ``[0, num_classes)`` for labelled nodes and
    -1 for unlabelled ones. Split index tensors are int64 node ids in range, distinct, pairwise
    disjoint and labelled, with a non-empty train split. These are checked here by
    `cherry.data.checks`, O(nodes); finiteness of the features is checked where they are read, not on
    every construction.
    """

    name: str
    graph: Graph
    features: torch.Tensor
    labels: torch.Tensor
    train_idx: torch.Tensor
    valid_idx: torch.Tensor
    test_idx: torch.Tensor
    num_classes: int
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = self.graph.num_nodes
        if self.features.dim() != 2 or self.features.shape[0] != n:
            raise ValueError(f"features must be [{n}, F], got {tuple(self.features.shape)}")
        if self.features.dtype != torch.float32:
            raise TypeError(f"features must be float32, got {self.features.dtype}")
        if self.labels.shape != (n,) or self.labels.dtype != torch.int64:
            raise ValueError(f"labels must be int64 [{n}], got {self.labels.dtype} {tuple(self.labels.shape)}")
        for split in ("train_idx", "valid_idx", "test_idx"):
            _check_index_tensor(split, getattr(self, split))
        if isinstance(self.num_classes, bool) or not isinstance(self.num_classes, int) or self.num_classes < 1:
            raise ValueError(f"num_classes must be an int >= 1, got {self.num_classes!r}")
        checks.check_labels(self.labels, n, self.num_classes)
        checks.check_splits({s: getattr(self, f"{s}_idx") for s in checks.SPLITS}, n, self.labels)

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    @classmethod
    def from_arrays(cls, name: str, edge_index=None, features=None, labels=None, train_idx=None,
                    valid_idx=None, test_idx=None, **options) -> "Dataset":
        """A dataset from a user's arrays: ``edge_index`` ``[2, E]`` (or ``csc=(indptr, indices)``),
        features, labels and the split, validated like prepared data (`cherry.data.arrays`)."""
        from cherry.data.arrays import dataset_from_arrays

        return cls._from_fields(dataset_from_arrays(name, edge_index, features, labels, train_idx, valid_idx,
                                                    test_idx, **options))

    @classmethod
    def from_pyg(cls, data, name: str = "pyg", **options) -> "Dataset":
        """A dataset from a ``torch_geometric.data.Data`` (``x``, ``y``, ``edge_index``, masks or index
        splits, or ``split="random:20,30"``), validated like `from_arrays` (`cherry.data.library_objects`)."""
        from cherry.data.library_objects import dataset_from_pyg

        return cls._from_fields(dataset_from_pyg(data, name, **options))

    @classmethod
    def from_dgl(cls, graph, name: str = "dgl", **options) -> "Dataset":
        """A dataset from a DGLGraph (``ndata`` feat, label and masks, or ``split="random:20,30"``),
        validated like `from_arrays` (`cherry.data.library_objects`)."""
        from cherry.data.library_objects import dataset_from_dgl

        return cls._from_fields(dataset_from_dgl(graph, name, **options))

    @classmethod
    def _from_fields(cls, fields: dict) -> "Dataset":
        indptr, indices, num_nodes = fields.pop("csc")
        return cls(graph=Graph(indptr, indices, num_nodes), **fields)

    def to(self, device: torch.device | str, features: bool = True) -> "Dataset":
        """This dataset with its graph, labels and split on ``device`` (and the features when
        ``features``; left on the host, they are gathered per batch into pinned buffers)."""
        import dataclasses

        move = lambda t: t.to(device)  # noqa: E731
        return dataclasses.replace(
            self, graph=self.graph.to(device), features=move(self.features) if features else self.features,
            labels=move(self.labels), train_idx=move(self.train_idx), valid_idx=move(self.valid_idx),
            test_idx=move(self.test_idx))
