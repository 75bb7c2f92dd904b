"""The streamed input layer for `from_dgl` / `from_pyg` models: the stock first layer streams its input
projection exactly (gradients equal to the unstreamed step), or declines naming the layer."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.execution.partition_check import compare
from cherry.execution.stream import can_stream
from cherry.models import ModelSpec
from cherry.planning import MemoryModel
from cherry.sampling import NeighborSampler, sampling_generator
from tests.unit.graphs import random_dataset
from tests.unit.library_models import DGLNet, PyGNet, dgl_nn, pyg_nn

FEATURES, HIDDEN = 40, 8


@pytest.fixture(scope="module")
def graph():
    ds = random_dataset(num_nodes=200, avg_degree=6, feature_dim=FEATURES)
    blocks = NeighborSampler(ds.graph, [4, 5]).sample(ds.train_idx[:24], sampling_generator(3))
    return ds, blocks


def _dgl(kind: str, classes: int, pre_dropout: bool = False, pre_scale: bool = False) -> nn.Module:
    dglnn = dgl_nn()
    from cherry.interop import from_dgl

    make = {"gcn": lambda i, o: dglnn.GraphConv(i, o, allow_zero_in_degree=True),
            "gat": lambda i, o: dglnn.GATConv(i, o // 2, 2, allow_zero_in_degree=True),
            "gat_residual": lambda i, o: dglnn.GATConv(i, o // 2, 2, residual=True, allow_zero_in_degree=True),
            "sage": lambda i, o: dglnn.SAGEConv(i, o, "mean"),
            "sage_pool": lambda i, o: dglnn.SAGEConv(i, o, "pool")}[kind]
    return from_dgl(DGLNet(make(FEATURES, HIDDEN), make(HIDDEN, 2 * classes), 0.5 if pre_dropout else 0.3,
                           pre_dropout=pre_dropout, pre_scale=pre_scale))


def _pyg(kind: str, classes: int) -> nn.Module:
    pygnn = pyg_nn()
    from cherry.interop import from_pyg

    if kind == "gcn":
        convs = [pygnn.GCNConv(FEATURES, HIDDEN), pygnn.GCNConv(HIDDEN, 2 * classes)]
    elif kind == "gat":
        convs = [pygnn.GATConv(FEATURES, HIDDEN // 2, heads=2), pygnn.GATConv(HIDDEN, classes, heads=2)]
    else:
        convs = [pygnn.SAGEConv(FEATURES, HIDDEN), pygnn.SAGEConv(HIDDEN, 2 * classes)]
    return from_pyg(PyGNet(convs, 0.3, bipartite=kind != "gcn"))


def _grads(model, ds, blocks, k: int, stream: str, recompute: str = "off"):
    options = ExecutorOptions(num_microbatches=k, budget_bytes=None, stage_features=False, pipeline=False,
                              balance="count", safety=0.0, recover_oom=False, dropout_seed=11, recompute=recompute,
                              stream_inputs=stream, exactness_check="off")
    spec = ModelSpec("sage", FEATURES, HIDDEN, ds.num_classes, 2)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec), options)
    try:
        stats = ex.accumulate(blocks, ds.features, ds.labels)
        assert stats.streamed == (stream == "on")
        return stats.loss, [g.clone() for g in ex.gradients()]
    finally:
        ex.close()


CASES = [("dgl", "gcn"), ("dgl", "gat"), ("dgl", "gat_residual"), ("dgl", "sage"), ("pyg", "gcn"), ("pyg", "gat")]


def _assert_streamed_equals_unstreamed(model, ds, blocks, k, recompute):
    """Loss and gradients streamed equal the same K unstreamed (1e-5 relative), from the same weights:
    the same K, since a stock GCN normalises by degrees within its block, which K changes."""
    weights = {n: v.clone() for n, v in model.state_dict().items()}
    want_loss, want = _grads(model, ds, blocks, k, "off", recompute)
    model.load_state_dict(weights)
    loss, got = _grads(model, ds, blocks, k, "on", recompute)
    assert abs(loss - want_loss) <= 1e-5 * abs(want_loss)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    worst = max(compare(names, want, got), key=lambda d: d.max_rel_diff)
    assert worst.max_rel_diff <= 1e-5, worst


@pytest.mark.parametrize("lib,kind", CASES)
@pytest.mark.parametrize("k,recompute", [(1, "off"), (3, "off"), (3, "on")])
def test_streamed_adapter_equals_unstreamed(graph, monkeypatch, lib, kind, k, recompute):
    ds, blocks = graph
    monkeypatch.setattr("cherry.execution.executor.chunk_rows", lambda width, budget: 7)  # several chunks
    torch.manual_seed(0)
    model = (_dgl if lib == "dgl" else _pyg)(kind, ds.num_classes)
    assert can_stream(model)
    _assert_streamed_equals_unstreamed(model, ds, blocks, k, recompute)
    assert not any("forward" in m.__dict__ for m in model.modules())  # every shadow is gone


@pytest.mark.parametrize("lib,kind,named", [("dgl", "sage_pool", r"dgl\.nn\.SAGEConv: aggregator 'pool'"),
                                             ("pyg", "sage", r"torch_geometric\.nn\.SAGEConv: lin_l runs after")])
def test_on_is_refused_naming_the_layer(graph, lib, kind, named):
    ds, _ = graph
    model = (_dgl if lib == "dgl" else _pyg)(kind, ds.num_classes)
    assert not can_stream(model)
    with pytest.raises(ValueError, match=r"^stream_inputs='on' .*layer 0 \(" + named):
        MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0),
                           MemoryModel.for_model(ModelSpec("sage", FEATURES, HIDDEN, ds.num_classes, 2)),
                           ExecutorOptions.for_k(1, None, stream_inputs="on"))


@pytest.mark.parametrize("k,recompute", [(1, "off"), (3, "off"), (3, "on")])
def test_an_exact_input_dropout_moves_into_the_chunks(graph, monkeypatch, k, recompute):
    """Made exact (the trainer's guard), a dropout on x streams: each chunk dropped by the same mask."""
    from cherry.execution.exactness import guard_model

    ds, blocks = graph
    monkeypatch.setattr("cherry.execution.executor.chunk_rows", lambda width, budget: 7)
    torch.manual_seed(0)
    model = guard_model(_dgl("gat", ds.num_classes, pre_dropout=True))
    _assert_streamed_equals_unstreamed(model, ds, blocks, k, recompute)
    assert can_stream(model) and not any("forward" in m.__dict__ for m in model.modules())


def test_a_transform_before_the_layer_is_refused_at_its_first_step(graph):
    """The stock layer is called on a transformed copy of x, not x: streaming it would lose the
    transform."""
    ds, blocks = graph
    model = _dgl("gcn", ds.num_classes, pre_scale=True)
    with pytest.raises(ValueError, match=r"layer 0 \(dgl\.nn\.GraphConv is called on a tensor other than"):
        _grads(model, ds, blocks, 1, "on")
    assert not can_stream(model)  # auto does not try again
    assert not any("forward" in m.__dict__ for m in model.modules())
