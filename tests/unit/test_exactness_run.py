"""Exactness on the user's own run: the one forward path and the engine's partition check.

- Input dropout (run by the model's forward before its layers) is applied under recomputation too:
  the same losses at K = 1 and recomputed K, every epoch.
- The five breakers the guard cannot see are stopped by the Trainer's first-step check in one line,
  before the optimizer step (the weights are untouched).
- A BatchNorm the user put in eval mode stays there under training, and is exact.
- The check changes nothing of an exact run (same losses on and off) and runs where the option says.
"""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cherry.data import Dataset
from cherry.execution import ExactnessError, Trainer
from cherry.execution.partition_check import PartitionCheck
from cherry.memory import DeviceMemory
from cherry.ops import aggregate_block
from cherry.spec import make_spec
from tests.unit.graphs import random_dataset


@pytest.fixture(scope="module")
def data():
    return random_dataset(num_nodes=600, avg_degree=8)


def _spec(ds, **changes):
    options = changes.pop("options", {})
    values = dict(dataset="test-graph", model="gcn", hidden=16, fanouts=(-1, -1), batch_size=140, epochs=2,
                  dropout=0.5, input_dropout=0.5, lr=0.01, seed=3, evaluate=False, optimizer="adam")
    values.update(changes)
    return make_spec(**values, options=options)


def _losses(ds, spec, model=None, memory=None) -> tuple[list[float], list]:
    trainer = Trainer(ds, spec, memory=memory, model=model)
    steps: list = []
    try:
        losses = [r.loss for r in trainer.fit(on_step=steps.append)]
    finally:
        trainer.close()
    return losses, steps


@pytest.fixture(autouse=True)
def _registered(data):
    from cherry.data import register_dataset

    register_dataset("test-graph", data, replace=True)


def test_input_dropout_is_applied_under_recomputation(data):
    """Kipf's GCN setting with input dropout: recomputed micro-batches give the K = 1 losses."""
    reference, _ = _losses(data, _spec(data, num_microbatches=1, options={"recompute": "off"}))
    recomputed, steps = _losses(data, _spec(data, num_microbatches=4, options={"recompute": "on"}))
    assert all(s.recompute for s in steps)
    for a, b in zip(reference, recomputed, strict=True):
        assert abs(a - b) <= 1e-5 * abs(a), (reference, recomputed)
    without_input_dropout, _ = _losses(data, _spec(data, num_microbatches=1, input_dropout=0.0))
    assert abs(without_input_dropout[0] - reference[0]) > 1e-4  # the test sees input dropout at all


class _Breaker(nn.Module):
    """A two-layer mean-aggregation model whose hidden rows pass through ``twist`` (one of the
    known breakers of exactness)."""

    def __init__(self, in_dim: int, num_classes: int, twist) -> None:
        super().__init__()
        self.fc1, self.fc2, self.twist = nn.Linear(in_dim, 16), nn.Linear(16, num_classes), twist

    def forward(self, blocks, x):
        first, second = blocks.layers
        h = torch.relu(self.fc1(aggregate_block(first, x, "mean")))
        h = self.twist(h, first)
        return self.fc2(aggregate_block(second, h, "mean"))


BREAKERS = {
    "functional_dropout": lambda h, blk: F.dropout(h, 0.5, training=True),
    "centring_by_batch_mean": lambda h, blk: h - h.mean(0, keepdim=True),
    "scaling_by_batch_mean_norm": lambda h, blk: h / h.norm(dim=1).mean(),
    "per_call_noise": lambda h, blk: h + 0.1 * torch.randn_like(h),
    "scaling_by_block_size": lambda h, blk: h * (100.0 / blk.num_dst),
}


@pytest.mark.parametrize("name", sorted(BREAKERS))
def test_trainer_stops_each_breaker_before_the_first_optimizer_step(data, name):
    torch.manual_seed(0)
    model = _Breaker(data.feature_dim, data.num_classes, BREAKERS[name])
    before = copy.deepcopy(model.state_dict())
    spec = _spec(data, num_microbatches=3, dropout=0.0, input_dropout=0.0)
    trainer = Trainer(data, spec, model=model)
    try:
        with pytest.raises(ExactnessError) as err:
            list(trainer.fit())
    finally:
        trainer.close()
    message = str(err.value)
    assert "\n" not in message and "differs by" in message and "remedy" in message, message
    assert "fc" in message  # names a parameter
    for key, value in trainer.model.state_dict().items():
        assert torch.equal(value, before[key]), f"{key} changed: the optimizer stepped"


def test_a_failed_check_names_the_module_a_probe_finds(data):
    model = _Breaker(data.feature_dim, data.num_classes, BREAKERS["functional_dropout"])
    trainer = Trainer(data, _spec(data, num_microbatches=3, dropout=0.0, input_dropout=0.0), model=model)
    try:
        with pytest.raises(ExactnessError, match="calls dropout|draws random"):
            list(trainer.fit())
    finally:
        trainer.close()


class _WithBatchNorm(nn.Module):
    def __init__(self, in_dim: int, num_classes: int) -> None:
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(in_dim, 16), nn.BatchNorm1d(16), nn.Linear(16, num_classes)
        with torch.no_grad():  # statistics that are not the identity, so a switch to batch statistics shows
            self.norm.running_mean.uniform_(-0.5, 0.5)
            self.norm.running_var.uniform_(0.5, 2.0)

    def forward(self, blocks, x):
        first, second = blocks.layers
        h = self.norm(torch.relu(self.fc1(aggregate_block(first, x, "mean"))))
        return self.fc2(aggregate_block(second, h, "mean"))


def test_batchnorm_in_eval_mode_stays_frozen_and_exact(data):
    losses = {}
    for k in (1, 4):
        torch.manual_seed(0)
        model = _WithBatchNorm(data.feature_dim, data.num_classes)
        model.norm.eval()  # the remedy the guard recommends
        losses[k], _ = _losses(data, _spec(data, num_microbatches=k, epochs=3, dropout=0.0, input_dropout=0.0),
                               model=model)
        assert not model.norm.training
        model.train()  # any later train() keeps it frozen too (a deep copy as well)
        assert not model.norm.training and not copy.deepcopy(model).train().norm.training
    for a, b in zip(losses[1], losses[4], strict=True):
        assert abs(a - b) <= 1e-5 * abs(a), losses


def test_batchnorm_in_training_mode_is_refused_in_one_line(data):
    model = _WithBatchNorm(data.feature_dim, data.num_classes)
    with pytest.raises(ExactnessError, match="eval mode") as err:
        Trainer(data, _spec(data, num_microbatches=2), model=model)
    assert "\n" not in str(err.value)


def test_the_check_changes_nothing_of_an_exact_run_and_runs_where_asked(data):
    on, steps_on = _losses(data, _spec(data, num_microbatches=3, epochs=2))
    off, steps_off = _losses(data, _spec(data, num_microbatches=3, epochs=2, options={"exactness_check": "off"}))
    assert on == off
    assert isinstance(steps_on[0].partition_check, PartitionCheck) and steps_on[0].partition_check.ok
    assert steps_on[0].partition_check.second_k == 4 and steps_on[0].partition_check.max_rel_diff < 1e-5
    assert all(s.partition_check is None for s in steps_on[1:] + steps_off)
    _, every = _losses(data, _spec(data, num_microbatches=3, epochs=2, options={"exactness_check": "every:2"}))
    assert [s.partition_check is not None for s in every] == [i % 2 == 0 for i in range(len(every))]


def test_one_seed_per_microbatch_is_checked_against_recomputed_pairs(data):
    _, steps = _losses(data, _spec(data, num_microbatches=8, batch_size=8, epochs=1))
    check = steps[0].partition_check
    assert check.first_k == 8 and check.second_k == 4 and check.second_recompute and check.ok


def test_a_bad_exactness_check_value_is_one_line(data):
    with pytest.raises(ValueError, match="exactness_check"):
        _spec(data, options={"exactness_check": "sometimes"})


def test_automatic_k_that_chooses_recomputation_keeps_input_dropout():
    """A budget between the recomputation estimate of one seed and its plain estimate: the planner picks
    recomputation, and the gradient equals K = 1's without it, input dropout included (which the
    recomputed path skipped when it re-implemented the model's loop)."""
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.models import ModelSpec, build_model
    from cherry.planning import MemoryModel
    from cherry.sampling import NeighborSampler
    from tests.unit.test_memory_control import _single_seed_worst

    ds = random_dataset(num_nodes=80, avg_degree=30)  # dense: all-neighbour layers saturate
    spec = ModelSpec("gcn", ds.feature_dim, 128, ds.num_classes, 4, dropout=0.5, input_dropout=0.5)
    blocks = NeighborSampler(ds.graph, [-1] * 4).sample(ds.train_idx[:6], torch.Generator().manual_seed(2))

    def gradients(budget, k):
        torch.manual_seed(0)
        model = build_model(spec).double()
        options = ExecutorOptions(num_microbatches=k, budget_bytes=budget, stage_features=False, pipeline=False,
                                  balance="memory", safety=0.1, recover_oom=k is None, dropout_seed=3)
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1),
                                MemoryModel.for_model(spec, fixed_bytes=0), options)
        stats = ex.accumulate(blocks, ds.features.double(), ds.labels)
        out = [g.clone() for g in ex.gradients()]
        ex.close()
        return stats, out

    mm = MemoryModel.for_model(spec, fixed_bytes=0)
    plain, rc = _single_seed_worst(blocks, mm), _single_seed_worst(blocks, mm.with_recompute(True))
    assert rc < 0.95 * plain
    ref_stats, ref = gradients(None, 1)
    stats, got = gradients(int((rc + plain) / 2), None)
    assert stats.recompute and not ref_stats.recompute
    assert stats.loss == pytest.approx(ref_stats.loss, rel=1e-12)
    for a, b in zip(ref, got, strict=True):
        assert float((a - b).abs().max()) <= 1e-9 * max(float(a.abs().max()), 1e-12)


def test_the_check_cost_benchmark_reports_a_ratio_with_its_interval(synth_tiny, data_root, tmp_path):
    import json

    from cherry.cli import main

    out = tmp_path / "exactness.json"
    assert main(["bench", "exactness", "--dataset", "synth-tiny", "--root", str(data_root), "--batch-size", "64",
                 "--fanouts", "3,3", "--hidden", "8", "--steps", "4", "--warmup", "1", "--round", "2",
                 "--microbatches", "4", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    low, high = result["ratio_interval"]
    assert low <= result["ratio_checked_over_plain"] <= high and result["second_K"] == 5
    assert result["largest_rel_diff"] < 1e-5
