"""Graph (CSC) and Dataset invariants, and the errors promised for broken input."""
import pytest
import torch

from cherry.data import Dataset, Graph


def _t(values):
    return torch.tensor(values, dtype=torch.int64)


def test_valid_graph_and_degrees():
    g = Graph(indptr=_t([0, 2, 2, 3]), indices=_t([1, 2, 0]), num_nodes=3)
    assert g.num_edges == 3
    assert g.in_degrees().tolist() == [2, 0, 1]


@pytest.mark.parametrize(
    "indptr, indices, num_nodes, error, fragment",
    [
        ([0, 1], [0], -1, ValueError, "num_nodes"),
        ([0, 1, 1], [0], 3, ValueError, "num_nodes + 1"),
        ([1, 1, 1], [0], 2, ValueError, "start at 0"),
        ([0, 1, 1], [0, 1], 2, ValueError, "end at len(indices)"),
        ([0, 2, 1, 2], [0, 1], 3, ValueError, "non-decreasing"),
        ([0, 1, 2], [0, 2], 2, ValueError, "indices must lie in [0, 2)"),
        ([0, 1, 2], [-1, 0], 2, ValueError, "indices must lie"),
    ],
)
def test_graph_rejects_broken_csc(indptr, indices, num_nodes, error, fragment):
    with pytest.raises(error) as info:
        Graph(indptr=_t(indptr), indices=_t(indices), num_nodes=num_nodes)
    assert fragment in str(info.value)


def test_graph_rejects_wrong_types():
    with pytest.raises(TypeError, match="indptr must have dtype torch.int64"):
        Graph(indptr=torch.tensor([0, 0], dtype=torch.int32), indices=_t([]), num_nodes=1)
    with pytest.raises(TypeError, match="indices must be a torch.Tensor"):
        Graph(indptr=_t([0, 0]), indices=[0], num_nodes=1)
    with pytest.raises(ValueError, match="one-dimensional"):
        Graph(indptr=_t([[0, 0]]), indices=_t([]), num_nodes=1)


def test_from_edges_builds_in_neighbour_csc():
    src, dst = _t([0, 1, 2, 2, 0]), _t([1, 2, 1, 0, 2])
    g = Graph.from_edges(src, dst, 3)
    for v in range(3):
        got = g.indices[g.indptr[v]:g.indptr[v + 1]].tolist()
        assert got == [int(s) for s, d in zip(src, dst) if int(d) == v]  # edge-list order kept


def test_from_edges_errors():
    with pytest.raises(ValueError, match="equal length"):
        Graph.from_edges(_t([0, 1]), _t([1]), 2)
    with pytest.raises(ValueError, match=r"dst ids must lie in \[0, 2\)"):
        Graph.from_edges(_t([0]), _t([2]), 2)
    with pytest.raises(ValueError, match="indices must lie"):
        Graph.from_edges(_t([5]), _t([0]), 2)


def test_dataset_invariants():
    g = Graph.from_edges(_t([0, 1]), _t([1, 0]), 2)
    ok = dict(name="x", graph=g, features=torch.zeros(2, 3), labels=_t([0, 1]), train_idx=_t([0]),
              valid_idx=_t([1]), test_idx=_t([]), num_classes=2)
    assert Dataset(**ok).feature_dim == 3
    with pytest.raises(ValueError, match=r"features must be \[2, F\]"):
        Dataset(**{**ok, "features": torch.zeros(3, 3)})
    with pytest.raises(TypeError, match="float32"):
        Dataset(**{**ok, "features": torch.zeros(2, 3, dtype=torch.float64)})
    with pytest.raises(ValueError, match="labels must be int64"):
        Dataset(**{**ok, "labels": torch.zeros(2, dtype=torch.int32)})
    with pytest.raises(TypeError, match="train_idx must have dtype"):
        Dataset(**{**ok, "train_idx": torch.zeros(1)})
    with pytest.raises(ValueError, match="num_classes"):
        Dataset(**{**ok, "num_classes": 0})
