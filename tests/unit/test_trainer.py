"""Trainer and `cherry train`/`cherry verify`: determinism, the emulated memory wall, one-line errors."""
from __future__ import annotations

import json

import pytest
import torch

from cherry.cli import main
from cherry.execution import Trainer, TrainConfig
from cherry.memory import DeviceMemory
from cherry.models import ModelSpec


def _trainer(ds, memory=None, **config):
    spec = ModelSpec("sage", ds.feature_dim, 32, ds.num_classes, 2, aggr=config.pop("aggr", "mean"))
    cfg = TrainConfig(fanouts=(5, 10), batch_size=256, evaluate=False, **config)
    return Trainer(ds, spec, cfg, memory=memory)


def test_same_seed_same_losses(synth_tiny):
    runs = []
    for _ in range(2):
        trainer = _trainer(synth_tiny, num_microbatches=3, max_steps_per_epoch=3)
        runs.append([s.loss for s in trainer.train_epoch(0)])
        trainer.close()
    assert runs[0] == runs[1]


def test_every_microbatch_stays_within_emulated_capacity(synth_tiny):
    capacity = 3 << 20
    with DeviceMemory("cpu", capacity) as memory:
        trainer = _trainer(synth_tiny, memory=memory, aggr="lstm", budget_bytes=int(capacity * 0.9),
                           max_steps_per_epoch=4)
        steps = trainer.train_epoch(0)
        trainer.close()
    assert all(s.num_microbatches > 1 for s in steps)
    assert all(s.measured_peak_bytes <= capacity for s in steps)


def test_config_errors():
    with pytest.raises(ValueError, match="fanouts"):
        TrainConfig(fanouts=(0,), batch_size=4)
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig(fanouts=(5,), batch_size=-3)
    with pytest.raises(ValueError, match="ordering"):
        TrainConfig(fanouts=(5,), batch_size=4, ordering="bfs")


def _cli(args, data_root):
    return main(["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "32",
                 "--fanouts", "5,10", "--batch-size", "512", "--quiet", *args])


def test_train_cli_crosses_the_memory_wall(synth_tiny, data_root, tmp_path, capsys):
    out = tmp_path / "summary.json"
    args = ["--aggr", "lstm", "--device-memory", "4MiB", "--max-steps", "2", "--no-eval"]
    assert _cli(args + ["--json", str(out)], data_root) == 0
    summary = json.loads(out.read_text())
    assert summary["status"] == "ok" and summary["epochs"][0]["max_microbatches"] > 1
    assert _cli(args + ["--microbatches", "1"], data_root) == 3
    assert "cherry: out of memory: micro-batch 1/1" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--batch-size", "-4"], "expected a positive integer"),
    (["--fanouts", "10,x"], "fanouts must be comma-separated integers"),
    (["--device-memory", "lots"], "lots"),
    (["--microbatches", "zero"], "expected 'auto' or a positive integer"),
])
def test_train_cli_bad_options_give_one_line_errors(args, message, data_root, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _cli(args, data_root)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1]


def test_unknown_dataset_is_one_line(data_root, capsys):
    assert main(["train", "--dataset", "ogbn-nope", "--root", str(data_root), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ogbn-nope" in err[0]


def test_verify_cli_reports_equal_gradients(synth_tiny, data_root, capsys):
    code = main(["verify", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16",
                 "--fanouts", "5,10", "--batch-size", "300", "--microbatches", "4", "--aggr", "pool"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "within tolerance" in out
