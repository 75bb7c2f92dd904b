"""The memory model prices Cherry's GAT without per-edge messages of width F (the fused attention
aggregation holds none), close to its measured peak, on the safe side."""
from __future__ import annotations

import pytest
import torch

from cherry.memory.tracker import TensorMemoryTracker
from cherry.models import ModelSpec, build_model
from cherry.planning import BatchShape, MemoryModel
from cherry.planning.memory_model import layer_costs
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset


@pytest.fixture(scope="module")
def batch():
    ds = random_dataset(num_nodes=1500, avg_degree=12)
    blocks = NeighborSampler(ds.graph, [6, 10]).sample(ds.train_idx[:150], torch.Generator().manual_seed(1))
    return ds, blocks


@pytest.mark.parametrize("hidden,heads", [(32, 4), (64, 2)])
def test_gat_estimate_is_close_to_the_measured_peak(batch, hidden, heads):
    ds, blocks = batch
    torch.manual_seed(0)
    spec = ModelSpec("gat", ds.feature_dim, hidden, ds.num_classes, 2, heads=heads)
    model = build_model(spec)
    x = ds.features.index_select(0, blocks.input_nodes)
    with TensorMemoryTracker() as tracker:
        model(blocks, x).square().sum().backward()
    estimate = MemoryModel.for_model(spec).activation_bytes(BatchShape.of(blocks))
    # uncalibrated: within the range the calibrated scale then corrects, and on the safe side
    assert 0.6 * estimate <= tracker.peak_bytes <= 1.05 * estimate, (tracker.peak_bytes, estimate)


def test_gat_per_edge_cost_does_not_grow_with_the_head_width():
    narrow, wide = (ModelSpec("gat", 100, hidden, 7, 2, heads=4).layer_dims() for hidden in (8, 256))
    assert [c.per_edge for c in layer_costs(narrow)] == [c.per_edge for c in layer_costs(wide)]
