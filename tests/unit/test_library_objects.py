"""`Dataset.from_pyg` and `Dataset.from_dgl`: the same dataset as `from_arrays` of the object's arrays,
validated like arrays, one-line errors for objects of the wrong shape."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cherry.data import Dataset
from tests.optional import importable
from tests.real_graphs import GRAPHS, needs_graph

needs_pyg = pytest.mark.skipif(not importable("torch_geometric"), reason="torch_geometric is not installed")


def _dgl():
    from cherry.compat import dgl_available, import_dgl

    ok, reason = dgl_available()
    if not ok:
        pytest.skip(reason)
    return import_dgl()


def _arrays(n: int = 60, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, n, (2, 4 * n), generator=g)
    x = torch.randn(n, 5, generator=g)
    y = torch.arange(n) % 3
    train = torch.zeros(n, dtype=torch.bool)
    train[:20] = True
    valid = torch.zeros(n, dtype=torch.bool)
    valid[20:35] = True
    test = ~(train | valid)
    return edge_index, x, y, train, valid, test


def _same(a: Dataset, b: Dataset) -> None:
    for key in ("features", "labels", "train_idx", "valid_idx", "test_idx"):
        assert torch.equal(getattr(a, key), getattr(b, key)), key
    assert torch.equal(a.graph.indptr, b.graph.indptr) and torch.equal(a.graph.indices, b.graph.indices)
    assert a.num_classes == b.num_classes


def _reference(edge_index, x, y, train, valid, test, **options) -> Dataset:
    idx = lambda m: torch.nonzero(m).view(-1)  # noqa: E731
    return Dataset.from_arrays("ref", edge_index, x, y, idx(train), idx(valid), idx(test), **options)


@needs_pyg
def test_from_pyg_masks_and_index_splits_equal_from_arrays():
    from torch_geometric.data import Data

    edge_index, x, y, train, valid, test = _arrays()
    ref = _reference(edge_index, x, y, train, valid, test)
    _same(Dataset.from_pyg(Data(x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=valid, test_mask=test)), ref)
    idx = lambda m: torch.nonzero(m).view(-1)  # noqa: E731
    by_index = Data(x=x, y=y.view(-1, 1), edge_index=edge_index, train_idx=idx(train), valid_idx=idx(valid),
                    test_idx=idx(test))
    _same(Dataset.from_pyg(by_index, name="by-index"), ref)
    directed = Dataset.from_pyg(Data(x=x, y=y, edge_index=edge_index, train_mask=train), undirected=False)
    _same(directed, _reference(edge_index, x, y, train, torch.zeros_like(train), torch.zeros_like(train),
                               undirected=False))
    several = torch.stack([train, ~train], 1)
    assert torch.equal(Dataset.from_pyg(Data(x=x, y=y, edge_index=edge_index, train_mask=several),
                                        split_column=1).train_idx, torch.nonzero(~train).view(-1))


@needs_pyg
def test_from_pyg_draws_a_seeded_split_where_the_object_has_none():
    from torch_geometric.data import Data

    edge_index, x, _, _, _, _ = _arrays(n=300)
    y = torch.arange(300) % 3
    ds = Dataset.from_pyg(Data(x=x, y=y, edge_index=edge_index), split="random:20,30@1")
    assert ds.train_idx.numel() == 60 and ds.valid_idx.numel() == 90 and ds.test_idx.numel() == 150
    assert ds.metadata["split"] == "random:20,30@1" and ds.metadata["library"] == "pyg"
    again = Dataset.from_pyg(Data(x=x, y=y, edge_index=edge_index), split="random:20,30@1")
    assert torch.equal(ds.train_idx, again.train_idx)


@needs_pyg
@pytest.mark.parametrize("edit, error, message", [
    (lambda d: d.update(x=None), TypeError, "lacks x; expected a torch_geometric.data.Data"),
    (lambda d: d.update(train_mask=None), ValueError, "has no train_mask or train_idx; pass split="),
    (lambda d: d.update(train_mask=d["train_mask"].long()), TypeError, "pyg.data.train_mask has dtype int64; expected a boolean"),
    (lambda d: d.update(val_mask=d["val_mask"][:-1]), ValueError, r"pyg.data.val_mask has shape \(59,\); expected one entry per node \(60\)"),
    (lambda d: d.update(y=torch.zeros(60, 3)), ValueError, r"data.y has shape \(60, 3\); expected one class per node"),
    (lambda d: d.update(edge_index=d["edge_index"] + 60), ValueError, "edge_index.* name node"),
    (lambda d: d["x"].__setitem__((4, 2), float("nan")), ValueError, "features must be finite; node 4, column 2"),
    (lambda d: d.update(test_mask=d["train_mask"]), ValueError, "shares node 0 with the train split"),
    (lambda d: d.update(train_mask=torch.stack([d["train_mask"]] * 2, 1)), ValueError, "several splits"),
])
def test_from_pyg_bad_objects_are_one_line_errors(edit, error, message):
    from torch_geometric.data import Data

    edge_index, x, y, train, valid, test = _arrays()
    fields = dict(x=x, y=y, edge_index=edge_index, train_mask=train, val_mask=valid, test_mask=test)
    edit(fields)
    with pytest.raises(error, match=message) as err:
        Dataset.from_pyg(Data(**{k: v for k, v in fields.items() if v is not None}))
    assert "\n" not in str(err.value)


def test_from_dgl_equals_from_arrays_and_checks_the_graph():
    dgl = _dgl()
    edge_index, x, y, train, valid, test = _arrays()
    graph = dgl.graph((edge_index[0], edge_index[1]), num_nodes=60)
    graph.ndata.update({"feat": x, "label": y, "train_mask": train, "val_mask": valid, "test_mask": test})
    _same(Dataset.from_dgl(graph), _reference(edge_index, x, y, train, valid, test))
    graph.ndata["h"] = graph.ndata.pop("feat")
    assert Dataset.from_dgl(graph, feature_key="h", undirected=False).graph.num_edges == edge_index.shape[1]
    with pytest.raises(ValueError, match=r"graph.ndata lacks 'feat' \(has \["):
        Dataset.from_dgl(graph)
    graph.ndata["feat"] = graph.ndata["h"]
    graph.ndata["train_mask"] = train.float()
    with pytest.raises(TypeError, match=r"dgl.graph.ndata.train_mask has dtype float32; expected a boolean"):
        Dataset.from_dgl(graph)
    del graph.ndata["train_mask"]
    ds = Dataset.from_dgl(graph, split="random:0.5,0.2")
    assert ds.train_idx.numel() == 30 and ds.metadata["library"] == "dgl"
    graph.ndata["label"] = torch.where(torch.arange(60) == 7, 9, y)
    with pytest.raises(ValueError, match="node 7 has label 9"):
        Dataset.from_dgl(graph, split="random:0.5,0.2", num_classes=3)
    with pytest.raises(TypeError, match="is not a DGLGraph"):
        Dataset.from_dgl(object())
    hetero = dgl.heterograph({("a", "r", "b"): (torch.tensor([0]), torch.tensor([0]))})
    with pytest.raises(ValueError, match="expected a homogeneous graph"):
        Dataset.from_dgl(hetero)


def _graph(name: str, slow: bool = False):
    marks = [needs_graph(f"{name}.npz")] + ([pytest.mark.slow] if slow else [])
    return pytest.param(name, marks=marks, id=name)


@needs_pyg
@pytest.mark.parametrize("graph", [_graph("amazon_photo"), _graph("amazon_computers", slow=True),
                                   _graph("coauthor_cs", slow=True), _graph("flickr", slow=True)])
def test_a_shared_graph_through_pyg_and_dgl_equals_it_by_path(tmp_path, graph):
    """Each shared graph read by PyG's own npz reader (what ``torch_geometric.datasets.Amazon`` calls)
    and handed in as a PyG ``Data`` and as a DGL graph is the dataset Cherry reads by path (PyG drops
    the self loops the file stores and binarises the features)."""
    from torch_geometric.io import read_npz

    from cherry.data import load_dataset

    data = read_npz(str(GRAPHS / f"{graph}.npz"), to_undirected=True)
    by_path = load_dataset(str(GRAPHS / f"{graph}.npz"), root=tmp_path)
    by_pyg = Dataset.from_pyg(data, split="random:20,30@0")
    for key in ("labels", "train_idx", "valid_idx", "test_idx"):
        assert torch.equal(getattr(by_pyg, key), getattr(by_path, key)), key
    # PyG's reader turns counts into 0/1 (Coauthor-CS and Flickr store counts up to 5); Cherry keeps them
    assert torch.equal(by_pyg.features, (by_path.features > 0).float())
    col = torch.repeat_interleave(torch.arange(by_path.graph.num_nodes), by_path.graph.indptr.diff())
    loops = by_path.graph.indices == col
    assert by_pyg.graph.num_edges == by_path.graph.num_edges - int(loops.sum())
    assert torch.equal(by_pyg.graph.indices, by_path.graph.indices[~loops])
    dgl = _dgl()
    dgl_graph = dgl.graph((data.edge_index[0], data.edge_index[1]), num_nodes=data.num_nodes)
    dgl_graph.ndata.update({"feat": data.x, "label": data.y})
    by_dgl = Dataset.from_dgl(dgl_graph, split="random:20,30@0")
    assert torch.equal(by_dgl.graph.indices, by_pyg.graph.indices) and torch.equal(by_dgl.train_idx, by_path.train_idx)
