"""Optimizers, weight decay, exact input dropout, --save/--resume checkpoints."""
from __future__ import annotations

import json

import pytest
import torch

from cherry.cli import main
from cherry.execution import Trainer, compare_gradients
from cherry.execution.checkpoint import CheckpointError, load_best_model, read_checkpoint
from cherry.execution.optim import make_optimizer
from cherry.models import ModelSpec, build_model
from cherry.planning import MemoryModel
from cherry.sampling import NeighborSampler, sampling_generator
from cherry.spec import SpecError, make_spec


def _spec(**config):
    base = dict(dataset="synth-tiny", hidden=16, fanouts=(5, 5), batch_size=200, max_steps_per_epoch=2,
                num_microbatches=3, seed=3)
    base.update(config)
    return make_spec(**base)


def test_optimizer_factory_and_spec_keys():
    params = [torch.nn.Parameter(torch.ones(2))]
    assert isinstance(make_optimizer(params, "adamw", 0.1, 5e-4), torch.optim.AdamW)
    sgd = make_optimizer(params, "sgd", 0.1, 0.0, momentum=0.5)
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["momentum"] == 0.5
    assert make_optimizer(params, "adam", 0.1, 5e-4).defaults["weight_decay"] == 5e-4
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer(params, "lamb", 0.1)
    spec = make_spec(dataset="synth-tiny", optimizer="sgd", weight_decay=5e-4, input_dropout=0.5)
    assert (spec.optimizer, spec.weight_decay, spec.input_dropout) == ("sgd", 5e-4, 0.5)
    for bad in ({"optimizer": "lamb"}, {"weight_decay": -1}, {"input_dropout": 1.0}, {"momentum": 1.0}):
        with pytest.raises(SpecError, match=next(iter(bad))):
            make_spec(dataset="synth-tiny", **bad)


def test_weight_decay_reaches_the_trainers_optimizer(synth_tiny):
    trainer = Trainer(synth_tiny, _spec(optimizer="adamw", weight_decay=0.01, evaluate=False))
    try:
        assert isinstance(trainer.optimizer, torch.optim.AdamW)
        assert trainer.optimizer.defaults["weight_decay"] == 0.01
    finally:
        trainer.close()


def test_input_dropout_is_exact_across_microbatches(synth_tiny):
    blocks = NeighborSampler(synth_tiny.graph, [5, 5]).sample(synth_tiny.train_idx[:150], sampling_generator(1))
    grads = {}
    for p in (0.0, 0.5):
        torch.manual_seed(0)
        spec = ModelSpec("gcn", synth_tiny.feature_dim, 16, synth_tiny.num_classes, 2, input_dropout=p)
        model = build_model(spec)
        diffs = compare_gradients(model, MemoryModel.for_model(spec), blocks, synth_tiny.features,
                                  synth_tiny.labels, 5)
        assert max(d.max_rel_diff for d in diffs) < 1e-5
        from cherry.execution.verify import _gradients_at

        grads[p] = _gradients_at(1, model, MemoryModel.for_model(spec), blocks, synth_tiny.features,
                                 synth_tiny.labels, None, "cpu")
    # the mask is really applied: the gradient with input dropout differs from the one without
    assert any(not torch.allclose(a, b) for a, b in zip(grads[0.0], grads[0.5]))


def _losses(results):
    return [r.loss for r in results]


def test_resume_after_a_kill_between_epochs_gives_the_same_losses(synth_tiny, tmp_path):
    spec = _spec(epochs=3, dropout=0.3, input_dropout=0.2, num_microbatches="auto", budget_bytes="2MiB")
    full = Trainer(synth_tiny, spec)
    uninterrupted = list(full.fit())
    full.close()
    first = Trainer(synth_tiny, spec)
    killed = []
    for result in first.fit(save_dir=tmp_path / "ck"):
        killed.append(result)
        if len(killed) == 2:
            break  # the process dies between epochs 1 and 2
    first.close()
    again = Trainer(synth_tiny, spec)
    resumed = list(again.fit(save_dir=tmp_path / "ck", resume_dir=tmp_path / "ck"))
    again.close()
    assert [r.epoch for r in resumed] == [2]
    assert _losses(killed + resumed) == pytest.approx(_losses(uninterrupted), rel=1e-6, abs=1e-7)
    assert resumed[0].valid_acc == pytest.approx(uninterrupted[2].valid_acc)
    best = load_best_model(tmp_path / "ck")
    assert best["valid_acc"] == max(r.valid_acc for r in uninterrupted)
    assert read_checkpoint(tmp_path / "ck", spec)["epochs_done"] == 3


def test_resume_refuses_another_spec_and_a_corrupt_checkpoint(synth_tiny, tmp_path):
    spec = _spec(epochs=1, evaluate=False)
    trainer = Trainer(synth_tiny, spec)
    list(trainer.fit(save_dir=tmp_path))
    trainer.close()
    with pytest.raises(CheckpointError, match=r"another run spec \(key hidden: 16 there, 32 here\)"):
        read_checkpoint(tmp_path, spec.replace(hidden=32))
    read_checkpoint(tmp_path, spec.replace(epochs=4))  # more epochs: a continuation
    data = bytearray((tmp_path / "last.pt").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "last.pt").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256") as info:
        read_checkpoint(tmp_path, spec)
    assert "\n" not in str(info.value)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        read_checkpoint(tmp_path / "empty", spec)


def test_cli_save_and_resume(synth_tiny, data_root, tmp_path, capsys):
    common = ["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16", "--fanouts", "5,5",
              "--batch-size", "200", "--max-steps", "2", "--microbatches", "2", "--quiet", "--model", "gcn",
              "--weight-decay", "5e-4", "--input-dropout", "0.5", "--dropout", "0.5", "--optimizer", "adam"]
    assert main(common + ["--epochs", "2", "--json", str(tmp_path / "full.json")]) == 0
    assert main(common + ["--epochs", "1", "--save", str(tmp_path / "ck")]) == 0
    assert main(common + ["--epochs", "2", "--resume", str(tmp_path / "ck"), "--json", str(tmp_path / "r.json")]) == 0
    full = json.loads((tmp_path / "full.json").read_text())
    resumed = json.loads((tmp_path / "r.json").read_text())
    assert [e["loss"] for e in resumed["epochs"]] == pytest.approx([e["loss"] for e in full["epochs"]], rel=1e-6)
    assert resumed["best"]["valid_acc"] == max(e["valid_acc"] for e in full["epochs"])
    capsys.readouterr()
    assert main(common + ["--epochs", "2", "--hidden", "8", "--resume", str(tmp_path / "ck")]) != 0
    err = capsys.readouterr().err.strip()
    assert "another run spec" in err and len(err.splitlines()) == 1
