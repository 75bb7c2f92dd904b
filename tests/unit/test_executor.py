"""The central claim: K micro-batches give the mini-batch's gradient; OOM recovery keeps it exact."""
from __future__ import annotations

import pytest
import torch

from cherry.execution import ExecutorOptions, MicrobatchExecutor, MicrobatchOutOfMemoryError
from cherry.models import ModelSpec, build_model
from cherry.models.base import BlockModel
from cherry.planning import BatchShape, MemoryModel, locality_rank
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset

MODELS = [("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None)]


@pytest.fixture(scope="module")
def data():
    ds = random_dataset(num_nodes=500, avg_degree=8)
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:64], torch.Generator().manual_seed(3))
    return ds, blocks


def _options(**changes) -> ExecutorOptions:
    """Every field explicit (ExecutorOptions has no defaults): the engine's usual settings."""
    values = dict(num_microbatches=None, budget_bytes=None, stage_features=True, pipeline=True, balance="memory",
                  safety=0.1, recover_oom=True)
    values.update(changes)
    return ExecutorOptions(**values)


def _gradients(ds, blocks, model_name, aggr, k, rank=None, memory=None, budget=None, mm_scale=1.0, **options):
    torch.manual_seed(0)
    spec = ModelSpec(model_name, ds.feature_dim, 8, ds.num_classes, 2, aggr=aggr, heads=2)
    model = build_model(spec).double()
    mm = MemoryModel.for_model(spec)
    mm.scale = mm_scale
    options = _options(num_microbatches=k, budget_bytes=budget, **options)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), mm, options, seed_rank=rank,
                            memory=memory)
    stats = ex.accumulate(blocks, ds.features.double(), ds.labels)
    ex.close()
    return [g.clone() for g in ex.gradients()], stats


def _assert_close(ref, got, rtol=1e-4):
    for a, b in zip(ref, got):
        scale = a.abs().max().clamp(min=1e-12)
        assert float((a - b).abs().max() / scale) < rtol


@pytest.mark.parametrize("model_name,aggr", MODELS)
def test_accumulated_gradients_equal_full_batch(data, model_name, aggr):
    ds, blocks = data
    ref, ref_stats = _gradients(ds, blocks, model_name, aggr, 1)
    assert ref_stats.num_microbatches == 1
    rank = locality_rank(ds.graph, "metis", nodes_per_part=32)
    for k in (2, 3, 4, 8):
        got, stats = _gradients(ds, blocks, model_name, aggr, k, rank=rank)
        assert stats.num_microbatches == k
        assert stats.loss == pytest.approx(ref_stats.loss, rel=1e-9)
        assert stats.num_correct == ref_stats.num_correct
        _assert_close(ref, got)


class _CapacityOnly:
    """A device that states a capacity and measures nothing (the OOM is injected in the model)."""

    def __init__(self, capacity_bytes):
        self.capacity_bytes = capacity_bytes
        self.peak = 0

    def reset_peak(self):
        self.peak = 0

    def peak_bytes(self):
        return self.capacity_bytes // 4


def test_oom_recovery_keeps_the_gradient(data, monkeypatch):
    ds, blocks = data
    ref, _ = _gradients(ds, blocks, "sage", "mean", 1)
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="mean")
    # K > 1 without recomputation (the plan also holds every micro-batch's index buffers: 20% here)
    budget = int(MemoryModel.for_model(spec).estimate_bytes(BatchShape.of(blocks)) * 0.8)
    calls = {"n": 0}
    original = BlockModel.forward

    def failing_forward(self, b, x):
        calls["n"] += 1
        if calls["n"] == 2:  # the second micro-batch fails mid-step, after the first was accumulated
            raise torch.OutOfMemoryError("emulated: out of memory")
        return original(self, b, x)

    monkeypatch.setattr(BlockModel, "forward", failing_forward)
    got, stats = _gradients(ds, blocks, "sage", "mean", None, memory=_CapacityOnly(budget), budget=budget)
    assert stats.num_oom_recoveries == 1
    _assert_close(ref, got)


def test_fixed_k_oom_is_reported(data, monkeypatch):
    ds, blocks = data

    def oom(self, b, x):
        raise torch.OutOfMemoryError("emulated")

    monkeypatch.setattr(BlockModel, "forward", oom)
    with pytest.raises(MicrobatchOutOfMemoryError, match="ran out of device memory"):
        _gradients(ds, blocks, "sage", "mean", 1)


def test_options_validate():
    with pytest.raises(TypeError):
        ExecutorOptions()  # no defaults: built from a spec or with every field
    with pytest.raises(ValueError, match="num_microbatches"):
        _options()
    with pytest.raises(ValueError, match="num_microbatches must be >= 1"):
        _options(num_microbatches=0)
    with pytest.raises(ValueError, match="budget_bytes must be positive"):
        _options(budget_bytes=0)


def test_options_from_spec_are_the_specs_settings():
    from cherry.spec import make_spec

    base = dict(dataset="synth-tiny", fanouts=(5, 10))
    auto = ExecutorOptions.from_spec(make_spec(**base), None)  # "auto" without a budget: K = 1
    # recover_oom is moot without a budget; a run spec checks partition invariance on its first step
    assert auto == _options(num_microbatches=1, exactness_check="first-step")
    budgeted = ExecutorOptions.from_spec(make_spec(**base, budget_bytes="1MiB"), 1 << 20)
    assert budgeted == _options(budget_bytes=1 << 20, exactness_check="first-step")  # K from the budget, recovering
    fixed = ExecutorOptions.from_spec(make_spec(**base, num_microbatches=4), 1000)
    assert fixed == _options(num_microbatches=4, budget_bytes=1000, recover_oom=False, exactness_check="first-step")
    switched = make_spec(**base, num_microbatches=2, options={"stage_features": False, "pipeline": False,
                                                               "balance": "count", "safety": 0.25,
                                                               "exactness_check": "every:3"})
    assert ExecutorOptions.from_spec(switched, None) == _options(
        num_microbatches=2, stage_features=False, pipeline=False, balance="count", safety=0.25, recover_oom=False,
        exactness_check="every:3")


def test_forced_underestimate_is_recovered_exactly(data):
    """A real (emulated) out-of-memory from a too-optimistic estimator: re-planned, same gradient."""
    from cherry.memory import DeviceMemory

    ds, blocks = data
    ref, _ = _gradients(ds, blocks, "sage", "lstm", 1)
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="lstm", heads=2)
    true_peak = MemoryModel.for_model(spec).estimate_bytes(BatchShape.of(blocks))
    capacity = true_peak // 3
    with DeviceMemory("cpu", capacity) as memory:
        got, stats = _gradients(ds, blocks, "sage", "lstm", None, memory=memory, budget=capacity,
                                mm_scale=0.05)
    assert stats.num_oom_recoveries >= 1
    assert stats.measured_peak_bytes <= capacity
    _assert_close(ref, got)


def test_a_measurement_above_its_estimate_replans_the_rest_before_it_runs_out(data, monkeypatch):
    """A micro-batch measured above its estimate recalibrates the model; when the rest of the step's
    micro-batches are then above the budget, they are re-planned finer at once (no out-of-memory,
    no recovery), and the gradient is the whole batch's."""
    from cherry.memory import DeviceMemory

    ds, blocks = data
    ref, _ = _gradients(ds, blocks, "sage", "mean", 1)
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="mean", heads=2)
    def learn(self, *args, **kwargs):  # the calibration learns it priced twice too low
        self.scale = 1.0
    monkeypatch.setattr(MemoryModel, "observe", learn)
    budget = 72_000  # K = 2 at half the price (57 kB each), 8 at the price learnt (62 kB; 89 kB at K = 2)
    planned = []
    with DeviceMemory("cpu", "1GiB") as memory:
        real_plan = MicrobatchExecutor.plan

        def plan(self, *args, **kwargs):
            out = real_plan(self, *args, **kwargs)
            planned.append(out.num_microbatches)
            return out
        monkeypatch.setattr(MicrobatchExecutor, "plan", plan)
        got, stats = _gradients(ds, blocks, "sage", "mean", None, memory=memory, budget=budget, mm_scale=0.5,
                                stream_inputs="off")
    assert len(planned) >= 2 and stats.num_microbatches > planned[0], (planned, stats)  # the rest re-planned, finer
    assert stats.num_oom_recoveries == 0
    _assert_close(ref, got)


def test_plan_estimates_are_balanced(data):
    from cherry.planning import plan_microbatches

    ds, blocks = data
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="lstm")
    plan = plan_microbatches(blocks, MemoryModel.for_model(spec), num_microbatches=4)
    est = torch.tensor(plan.estimated_bytes, dtype=torch.float64)
    assert float(est.max() / est.mean()) < 1.5


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_microbatch_leaves_nothing_live_in_the_next_ones_window(data, pipeline):
    """Every micro-batch's peak window opens at the same live bytes: the previous micro-batch's inputs,
    activations and gradients are gone. Gradients still held there would add one parameter-sized set to
    every later window, above the one transient set the memory model's fixed part prices."""
    from cherry.memory import DeviceMemory

    ds, blocks = data
    spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, 2, aggr="mean")
    torch.manual_seed(0)
    model = build_model(spec)
    with DeviceMemory("cpu", "1GiB") as memory:
        opened = []
        reset = memory.reset_peak

        def reset_peak():
            opened.append(int(memory.live_bytes()))
            reset()

        memory.reset_peak = reset_peak
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), MemoryModel.for_model(spec),
                                _options(num_microbatches=4, pipeline=pipeline), memory=memory)
        stats = ex.accumulate(blocks, ds.features, ds.labels)
        ex.close()
    assert stats.num_microbatches == 4 and len(opened) == 4
    assert opened == [opened[0]] * 4
