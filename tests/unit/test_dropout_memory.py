"""The memory model prices exact dropout at its output only, and that is what a step measures: input
dropout adds one copy of the gathered features, hidden dropout one row per destination, and neither
anything when its probability is 0."""
from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn import functional as F

from cherry.memory import TensorMemoryTracker
from cherry.models import ModelSpec, build_model
from cherry.models.dropout import set_dropout_step
from cherry.planning import MemoryModel, layer_costs
from cherry.planning.shapes import BatchShape
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset


@pytest.mark.parametrize("model,aggr", [("gcn", None), ("sage", "mean"), ("sage", "pool"), ("gat", None)])
def test_dropout_costs_its_output_only(model, aggr):
    base = ModelSpec(model, 300, 16, 5, 3, aggr=aggr, heads=2)
    plain = layer_costs(base.layer_dims())
    hidden = layer_costs(dataclasses.replace(base, dropout=0.5).layer_dims())
    inputs = layer_costs(dataclasses.replace(base, input_dropout=0.5).layer_dims())
    dims = base.layer_dims()
    for d, p, h, i in zip(dims, plain, hidden, inputs):
        assert h.per_dst - p.per_dst == (0 if d.is_last else d.out_dim)  # the dropped rows, no mask
        assert (h.per_src, h.per_edge, h.per_src_kept) == (p.per_src, p.per_edge, p.per_src_kept)
        copy = d.in_dim if d.index == 0 else 0  # a dropped copy of the gathered features, kept when recomputing
        assert (i.per_src - p.per_src, i.per_src_kept - p.per_src_kept) == (copy, copy)
        assert (i.per_dst, i.per_edge) == (p.per_dst, p.per_edge)


def _step_peak(ds, blocks, spec) -> int:
    """Peak tensor bytes of one forward + backward at K = 1, the gathered features included."""
    torch.manual_seed(0)
    model = build_model(spec).train()
    set_dropout_step(model, 3)
    with TensorMemoryTracker() as tracker:
        x = ds.features.index_select(0, blocks.input_nodes)
        F.cross_entropy(model(blocks, x), ds.labels[blocks.layers[-1].dst_nodes]).backward()
        return tracker.peak_bytes


def test_what_input_dropout_adds_is_priced_and_is_the_features_bytes():
    ds = random_dataset(num_nodes=2000, avg_degree=10, feature_dim=400)
    blocks = NeighborSampler(ds.graph, [-1, -1]).sample(ds.train_idx[:40], torch.Generator().manual_seed(0))
    shape = BatchShape.of(blocks)
    spec = ModelSpec("gcn", ds.feature_dim, 16, ds.num_classes, 2)
    dropped = dataclasses.replace(spec, input_dropout=0.5)
    added = _step_peak(ds, blocks, dropped) - _step_peak(ds, blocks, spec)
    priced = MemoryModel.for_model(dropped).activation_bytes(shape) - MemoryModel.for_model(spec).activation_bytes(shape)
    feature_bytes = blocks.input_nodes.numel() * ds.feature_dim * 4
    assert priced == feature_bytes
    # the op adds the dropped copy (the reference also a bounded chunk transient), never a mask
    from cherry.ops.reference_dropout import transient_bytes

    assert 0.9 * feature_bytes <= added <= feature_bytes + transient_bytes(ds.feature_dim), (added, feature_bytes)
