"""Exact micro-batching with dropout: K-micro-batch gradients equal K = 1 with dropout 0.5 for every
model; a node's mask is the same in every micro-batch; steps and layers draw different masks."""
from __future__ import annotations

import pytest
import torch

from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.execution.verify import compare_gradients
from cherry.models import ModelSpec, build_model
from cherry.models.dropout import NodeDropout, dropout_keep, set_dropout_step
from cherry.planning import MemoryModel, locality_rank
from cherry.sampling import NeighborSampler, slice_blocks
from tests.unit.graphs import random_dataset

MODELS = [("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None), ("mlp", None)]


@pytest.fixture(scope="module")
def data():
    ds = random_dataset(num_nodes=500, avg_degree=8)
    blocks = NeighborSampler(ds.graph, [4, 6, 5]).sample(ds.train_idx[:64], torch.Generator().manual_seed(3))
    return ds, blocks, locality_rank(ds.graph, "metis", nodes_per_part=32)


def _model(ds, name, aggr, layers=3):
    torch.manual_seed(0)
    spec = ModelSpec(name, ds.feature_dim, 16, ds.num_classes, layers, aggr=aggr, heads=2, dropout=0.5)
    return spec, build_model(spec).train()


@pytest.mark.parametrize("name,aggr", MODELS)
@pytest.mark.parametrize("k", [2, 3, 5, 8, 16])
def test_gradient_with_dropout_equals_k1(data, name, aggr, k):
    ds, blocks, rank = data
    spec, model = _model(ds, name, aggr)
    diffs = compare_gradients(model, MemoryModel.for_model(spec), blocks, ds.features, ds.labels, k, rank)
    worst = max(d.max_rel_diff for d in diffs)
    assert worst <= 1e-5, (name, aggr, k, worst)


def test_every_k_from_2_to_16(data):
    ds, blocks, rank = data
    spec, model = _model(ds, "sage", "mean")
    for k in range(2, 17):
        diffs = compare_gradients(model, MemoryModel.for_model(spec), blocks, ds.features, ds.labels, k, rank)
        assert max(d.max_rel_diff for d in diffs) <= 1e-5, k


def test_dropout_is_active_and_differs_per_step(data):
    """The masks really drop (the gradient differs from dropout 0) and two steps draw different ones."""
    ds, blocks, _ = data
    spec, model = _model(ds, "sage", "mean")
    grads = []
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec),
                            ExecutorOptions.for_k(2))
    for _ in range(2):
        ex.accumulate(blocks, ds.features, ds.labels)
        grads.append([g.clone() for g in ex.gradients()])
    ex.close()
    model.eval()  # eval mode: no dropout at all
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec),
                            ExecutorOptions.for_k(2))
    ex.accumulate(blocks, ds.features, ds.labels)
    plain = ex.gradients()
    ex.close()
    assert not torch.allclose(grads[0][0], grads[1][0])
    assert not torch.allclose(grads[0][0], plain[0])


def test_shared_nodes_get_the_same_mask_in_every_microbatch(data):
    """Logits of a micro-batch equal the whole batch's rows in training mode with dropout."""
    ds, blocks, _ = data
    _, model = _model(ds, "sage", "pool")
    set_dropout_step(model, 1234)
    whole = model(blocks, ds.features[blocks.input_nodes])
    for part in (torch.arange(0, 64, 2), torch.arange(1, 64, 2), torch.arange(10, 40)):
        mb = slice_blocks(blocks, part)
        assert torch.allclose(model(mb, ds.features[mb.input_nodes]), whole[part], atol=1e-6)


def test_mask_is_a_function_of_node_layer_and_step():
    nodes = torch.tensor([5, 17, 2**40 + 3, 99])
    keep = dropout_keep(nodes, 64, 0.5, step_seed=7, layer=0)
    again = dropout_keep(nodes.flip(0), 64, 0.5, step_seed=7, layer=0).flip(0)
    assert torch.equal(keep, again)  # per node, whatever the order or company
    assert not torch.equal(keep, dropout_keep(nodes, 64, 0.5, step_seed=8, layer=0))
    assert not torch.equal(keep, dropout_keep(nodes, 64, 0.5, step_seed=7, layer=1))
    big = dropout_keep(torch.arange(20000), 32, 0.3, step_seed=1, layer=0)
    assert abs(float(big.float().mean()) - 0.7) < 0.01


def test_without_step_seed_it_is_plain_dropout_and_bad_input_is_refused():
    layer = NodeDropout(0.5).train()
    h = torch.ones(1000, 8)
    out = layer(h, torch.arange(1000), 0)
    assert set(out.unique().tolist()) == {0.0, 2.0}
    with pytest.raises(ValueError, match="one node id per row"):
        set_dropout_step(layer, 3)
        layer(h, torch.arange(10), 0)
    with pytest.raises(TypeError, match="step_seed must be an int"):
        set_dropout_step(layer, 1.5)
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\)"):
        NodeDropout(1.0)


@pytest.mark.parametrize("k", [1, 3])
def test_recomputation_applies_the_input_dropout(data, k):
    """Per-layer recomputation runs the model's forward with its input dropout: same loss and gradients."""
    ds, blocks, _ = data
    results = []
    for recompute in ("off", "on"):
        torch.manual_seed(0)
        spec = ModelSpec("gcn", ds.feature_dim, 16, ds.num_classes, 3, input_dropout=0.5, dropout=0.3)
        model = build_model(spec).train()
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec),
                                ExecutorOptions.for_k(k, recompute=recompute))
        stats = ex.accumulate(blocks, ds.features, ds.labels)
        assert stats.recompute == (recompute == "on")
        results.append((stats.loss, [g.clone() for g in ex.gradients()]))
        ex.close()
    (loss_plain, plain), (loss_rc, recomputed) = results
    assert abs(loss_plain - loss_rc) <= 1e-6
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(plain, recomputed))
