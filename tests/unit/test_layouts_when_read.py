"""`DegreeLayout`s are made only for models that read them (an LSTM aggregator): on a device each costs
host read-backs, so mean, GCN and GAT runs make none (the GPU's sync count is in test_gpu_faults.py)."""
from __future__ import annotations

import pytest
import torch

from cherry.execution import Trainer
from cherry.sampling import NeighborSampler
from cherry.sampling.layout import DegreeLayout
from cherry.spec import make_spec
from tests.unit.graphs import random_dataset


def test_sampler_makes_layouts_unless_told_not_to():
    graph = random_dataset(num_nodes=300, avg_degree=6).graph
    seeds = torch.arange(40)
    with_layouts = NeighborSampler(graph, [4, 6]).sample(seeds, torch.Generator().manual_seed(0))
    without = NeighborSampler(graph, [4, 6], layouts=False).sample(seeds, torch.Generator().manual_seed(0))
    assert all(b.layout is not None for b in with_layouts.layers)
    assert all(b.layout is None for b in without.layers)
    for a, b in zip(with_layouts.layers, without.layers):  # the same sample otherwise
        assert torch.equal(a.indptr, b.indptr) and torch.equal(a.indices, b.indices)
    with pytest.raises(TypeError, match="layouts must be a bool"):
        NeighborSampler(graph, [4, 6], layouts=1)


@pytest.mark.parametrize("model,aggr,reads", [("sage", "mean", False), ("gat", None, False), ("gcn", None, False),
                                              ("sage", "lstm", True)])
def test_trainer_makes_layouts_only_for_models_that_read_them(synth_tiny, monkeypatch, model, aggr, reads):
    spec = make_spec(system="cherry", dataset="synth-tiny", model=model, aggr=aggr, hidden=8, fanouts=(4, 6),
                     batch_size=128, num_microbatches=4, device="cpu", epochs=0, steps=1, warmup=0, evaluate=False,
                     **({"heads": 2} if model == "gat" else {}))
    trainer = Trainer(synth_tiny, spec)
    made = []
    real = DegreeLayout.of
    monkeypatch.setattr(DegreeLayout, "of", staticmethod(lambda indptr: (made.append(1), real(indptr))[1]))
    planned = trainer.prepare(synth_tiny.train_idx[:128], torch.Generator().manual_seed(1))
    layers = [b for part in planned.plan.microbatches for b in part.layers]
    assert len(planned.plan.microbatches) == 4
    assert all((b.layout is not None) == reads for b in layers), (model, aggr)
    assert bool(made) == reads
    stats = trainer.step(planned)
    trainer.close()
    assert stats.num_microbatches == 4 and stats.loss > 0
