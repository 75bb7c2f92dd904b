"""On synth-arxiv, a 2-layer GraphSAGE trained by Cherry (micro-batched) clearly beats a features-only MLP."""
from __future__ import annotations

import pytest

from cherry.data import load_dataset
from cherry.execution import Trainer
from cherry.spec import make_spec


@pytest.mark.slow
def test_graphsage_beats_mlp_on_synth_arxiv(data_root):
    ds = load_dataset("synth-arxiv", root=data_root)
    acc = {}
    for model in ("sage", "mlp"):
        spec = make_spec(dataset="synth-arxiv", root=data_root, model=model, hidden=64, fanouts=(5, 10),
                         batch_size=2048, epochs=2, lr=1e-2, num_microbatches=2 if model == "sage" else 1,
                         max_steps_per_epoch=25)
        trainer = Trainer(ds, spec)
        results = list(trainer.fit())
        trainer.close()
        acc[model] = results[-1].test_acc
    assert acc["sage"] > acc["mlp"] + 0.1, acc
