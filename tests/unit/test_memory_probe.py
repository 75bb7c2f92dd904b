"""Memory for any model: per-node and per-edge costs fitted from probe batches predict other batches."""
from __future__ import annotations

import torch
from torch import nn

from cherry.execution import Trainer
from cherry.execution.memory_probe import _fit_nonnegative, _peak_of_step, needs_probe, probe_costs
from cherry.models import BlockModel, ModelSpec, build_model
from cherry.ops import aggregate_block
from cherry.planning import BatchShape
from cherry.sampling import NeighborSampler, sampling_generator
from cherry.spec import make_spec


class Wide(nn.Module):
    """A layer that keeps a wide per-edge tensor (cost per edge) and a wide per-node one."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.up = nn.Linear(in_dim, 64)
        self.out = nn.Linear(64, out_dim)

    def forward(self, block, h):
        z = torch.tanh(self.up(h))
        dst = torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees(), output_size=block.num_edges)
        msg = torch.sigmoid(z[block.indices] * z[dst])  # [E, 64], kept for backward
        agg = torch.zeros(block.num_dst, 64).index_add_(0, dst, msg)
        return self.out(agg + z[: block.num_dst])


def test_fit_recovers_known_costs():
    probes = [(100, 1000, 100 * 7 + 1000 * 3), (200, 1500, 200 * 7 + 1500 * 3), (100, 400, 100 * 7 + 400 * 3)]
    a, b, floor = _fit_nonnegative(probes)
    assert abs(a - 7) < 1e-6 and abs(b - 3) < 1e-6 and abs(floor) < 1e-3
    with_floor = [(n, e, y + 5000) for n, e, y in probes] + [(300, 900, 300 * 7 + 900 * 3 + 5000)]
    a, b, floor = _fit_nonnegative(with_floor)  # a per-micro-batch floor is told apart from the per-count terms
    assert abs(a - 7) < 1e-6 and abs(b - 3) < 1e-6 and abs(floor - 5000) < 1e-3
    assert min(_fit_nonnegative([(10, 10, 100), (20, 10, 50)])) >= 0  # never a negative cost


def test_probed_costs_predict_a_larger_batch(synth_tiny):
    torch.manual_seed(0)
    spec = ModelSpec("sage", synth_tiny.feature_dim, 32, synth_tiny.num_classes, 2)
    model = BlockModel(spec, [Wide(synth_tiny.feature_dim, 32), Wide(32, synth_tiny.num_classes)])
    assert needs_probe(model)  # its spec says "sage", but its layers are not Cherry's
    fit = probe_costs(model, synth_tiny, [5, 10], 256)
    blocks = NeighborSampler(synth_tiny.graph, [5, 10]).sample(synth_tiny.train_idx[300:1100], sampling_generator(9))
    measured = _peak_of_step(model, blocks, synth_tiny.features, synth_tiny.labels, torch.device("cpu"))
    nodes = sum(b.num_src + b.num_dst for b in blocks.layers)
    edges = sum(b.num_edges for b in blocks.layers)
    predicted = fit.predict_bytes(nodes, edges)
    assert abs(predicted - measured) / measured < 0.25, (predicted, measured, fit)
    # the analytic price of a SAGE-mean layer of these widths misses this layer's per-edge tensors
    from cherry.planning import MemoryModel

    analytic = MemoryModel.for_model(spec).activation_bytes(BatchShape.of(blocks))
    assert abs(analytic - measured) / measured > 2 * abs(predicted - measured) / measured


def test_trainer_probes_a_user_model_under_automatic_k(synth_tiny):
    spec = make_spec(dataset="synth-tiny", fanouts=(5, 5), batch_size=400, max_steps_per_epoch=1,
                     budget_bytes="3MiB", evaluate=False)
    torch.manual_seed(0)
    user = BlockModel(ModelSpec("sage", synth_tiny.feature_dim, 32, synth_tiny.num_classes, 2),
                      [Wide(synth_tiny.feature_dim, 32), Wide(32, synth_tiny.num_classes)])

    class Whole(nn.Module):  # not a BlockModel: priced by probing
        def __init__(self):
            super().__init__()
            self.inner = user

        def forward(self, blocks, x):
            return self.inner(blocks, x)

    torch.manual_seed(spec.seed)  # what the Trainer seeds; the probe must leave it so
    rng = torch.get_rng_state()
    trainer = Trainer(synth_tiny, spec, model=Whole())
    try:
        assert torch.equal(torch.get_rng_state(), rng)  # the probe leaves the run's random state alone
        costs = trainer.memory_model.costs
        assert costs[0].per_edge > 0 and costs[0] == costs[1]
        stats = trainer.train_epoch(0)
        assert stats[0].num_microbatches > 1  # automatic K split the batch under the 3 MiB budget
    finally:
        trainer.close()
    gcn = build_model(ModelSpec("gcn", synth_tiny.feature_dim, 16, synth_tiny.num_classes, 2))
    assert not needs_probe(gcn)  # built-in models keep their analytic costs
