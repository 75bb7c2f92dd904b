"""The memory model prices each SAGE-LSTM implementation close to its measured peak (tensor tracker)."""
from __future__ import annotations

import pytest
import torch

from cherry.memory.tracker import TensorMemoryTracker
from cherry.models import ModelSpec, build_model
from cherry.planning import BatchShape, MemoryModel
from cherry.planning.memory_model import lstm_costs
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset


@pytest.fixture(scope="module")
def batch():
    ds = random_dataset(num_nodes=1500, avg_degree=12)
    blocks = NeighborSampler(ds.graph, [6, 10]).sample(ds.train_idx[:150], torch.Generator().manual_seed(1))
    return ds, blocks


def _peak_and_estimate(ds, blocks, impl):
    torch.manual_seed(0)
    spec = ModelSpec("sage", ds.feature_dim, 32, ds.num_classes, 2, aggr="lstm", lstm_impl=impl)
    model = build_model(spec)
    x = ds.features.index_select(0, blocks.input_nodes)
    with TensorMemoryTracker() as tracker:
        model(blocks, x).square().sum().backward()
    return tracker.peak_bytes, MemoryModel.for_model(spec).activation_bytes(BatchShape.of(blocks))


@pytest.mark.parametrize("impl", ["packed", "steps"])
def test_lstm_estimate_is_close_to_the_measured_peak(batch, impl):
    peak, estimate = _peak_and_estimate(*batch, impl)
    # uncalibrated: within the range the calibrated scale then corrects, and on the safe side
    assert 0.6 * estimate <= peak <= 1.05 * estimate, (peak, estimate)


def test_step_lstm_needs_less_memory_than_bucketed(batch):
    steps, _ = _peak_and_estimate(*batch, "steps")
    bucketed, _ = _peak_and_estimate(*batch, "bucketed")
    assert steps < 0.7 * bucketed


def test_auto_prices_the_largest_candidate():
    auto = lstm_costs("auto", 16)
    for impl in ("packed", "steps"):
        assert all(a >= c for a, c in zip(auto, lstm_costs(impl, 16)))
    with pytest.raises(ValueError, match="lstm_impl must be one of"):
        lstm_costs("cudnn", 16)


def test_auto_is_priced_as_what_it_runs_on_the_device():
    from cherry.models.spec import AUTO_LSTM_IMPL

    spec = ModelSpec("sage", 16, 16, 4, 2, aggr="lstm")
    for device_type, impl in AUTO_LSTM_IMPL.items():
        named = MemoryModel.for_model(ModelSpec("sage", 16, 16, 4, 2, aggr="lstm", lstm_impl=impl))
        assert MemoryModel.for_model(spec, device_type=device_type).costs == named.costs
    assert MemoryModel.for_model(spec).costs != MemoryModel.for_model(spec, device_type="cpu").costs
