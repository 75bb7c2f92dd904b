"""Trainer and `cherry train`/`cherry verify`: determinism, the emulated memory wall, one-line errors."""
from __future__ import annotations

import json

import pytest
import torch

from cherry.cli import main
from cherry.execution import Trainer
from cherry.memory import DeviceMemory
from cherry.models import ModelSpec
from cherry.spec import SpecError, make_spec


def _trainer(ds, memory=None, **config):
    config.setdefault("aggr", "mean")
    spec = make_spec(dataset="synth-tiny", hidden=32, fanouts=(5, 10), batch_size=256, evaluate=False, **config)
    trainer = Trainer(ds, spec, memory=memory)
    assert trainer.model_spec == ModelSpec("sage", ds.feature_dim, 32, ds.num_classes, 2, aggr=config["aggr"])
    return trainer


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


def test_config_errors(synth_tiny):
    with pytest.raises(SpecError, match="fanouts"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(0,), batch_size=4)
    with pytest.raises(SpecError, match="batch_size"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=-3)
    with pytest.raises(SpecError, match="ordering"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, options={"ordering": "spectral"})
    with pytest.raises(SpecError, match="epochs"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, epochs=-1)
    with pytest.raises(SpecError, match="lr"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, lr=0)
    with pytest.raises(SpecError, match="max_steps_per_epoch"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, max_steps_per_epoch=0)
    with pytest.raises(SpecError, match="budget_bytes"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, budget_bytes=0)
    with pytest.raises(SpecError, match="num_microbatches"):
        make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), batch_size=4, num_microbatches=0)
    with pytest.raises(TypeError, match="RunSpec"):
        Trainer(synth_tiny, {"dataset": "synth-tiny"})


def test_trainer_without_budget_or_fixed_k_trains_the_whole_batch(synth_tiny):
    """"auto" with no budget on a CPU is K = 1 (formerly a spec error)."""
    trainer = _trainer(synth_tiny, max_steps_per_epoch=2)
    assert trainer.budget_bytes is None
    steps = trainer.train_epoch(0)
    trainer.close()
    assert len(steps) == 2 and all(s.num_microbatches == 1 for s in steps)


def test_trainer_batches_are_the_loaders_rule(synth_tiny):
    from cherry.sampling import spec_seed_batches

    trainer = _trainer(synth_tiny, num_microbatches=2)
    try:
        expected = spec_seed_batches(trainer.spec, synth_tiny.train_idx, 1)
        got = trainer.epoch_batches(1)
        assert len(got) == len(expected) == trainer.num_steps(1)
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    finally:
        trainer.close()


def _cli(args, data_root):
    return main(["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "32",
                 "--fanouts", "5,10", "--batch-size", "512", "--quiet", *args])


def test_train_cli_crosses_the_memory_wall(synth_tiny, data_root, tmp_path, capsys):
    out = tmp_path / "summary.json"
    args = ["--aggr", "lstm", "--device-memory", "4MiB", "--max-steps", "2", "--no-eval"]
    assert _cli(args + ["--json", str(out)], data_root) == 0
    summary = json.loads(out.read_text())
    assert summary["status"] == "ok" and summary["epochs"][0]["max_microbatches"] > 1
    assert summary["construction"]["where"] == "host" and "CPU" in summary["construction"]["reason"]
    assert "construction: host (the device is the CPU" in capsys.readouterr().out
    assert _cli(args + ["--microbatches", "1"], data_root) == 3
    assert "cherry: out of memory: micro-batch 1/1" in capsys.readouterr().err


@pytest.mark.parametrize("args,message", [
    (["--batch-size", "-4"], "cherry: error: --batch-size: -4 is less than the minimum of 1"),
    (["--fanouts", "10,x"], "cherry: error: --fanouts: expected comma-separated integers"),
    (["--device-memory", "lots"], "cherry: error: --device-memory: size 'lots'"),
    (["--microbatches", "zero"], "cherry: error: --microbatches: expected 'auto' or a positive integer"),
    (["--num-microbatches", "zero"], "cherry: error: --microbatches: expected 'auto' or a positive integer"),
    (["--hidden", "0"], "cherry: error: --hidden: 0"),
    (["--hidden", "x"], "cherry: error: --hidden: expected an integer, got 'x'"),
    (["--layers", "3"], "cherry: error: --fanouts: [5, 10] has 2 values for num_layers=3"),
    (["--epochs", "0"], "cherry: error: --epochs: expected an integer >= 1"),
    (["--ordering", "spectral"], "cherry: error: argument --ordering: invalid choice: 'spectral'"),
    (["--bogus", "1"], "cherry: error: unrecognized arguments: --bogus 1"),
])
def test_train_cli_bad_options_give_one_line_errors(args, message, data_root, capsys):
    """A bad option value exits 2 with one line naming the option; an argparse error (unknown option,
    bad choice) exits via SystemExit(2), also one line with no usage block."""
    try:
        code = _cli(args, data_root)
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message), err


def test_unknown_dataset_is_one_line(data_root, capsys):
    assert main(["train", "--dataset", "ogbn-nope", "--root", str(data_root), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ogbn-nope" in err[0]


def test_verify_cli_reports_equal_gradients(synth_tiny, data_root, capsys, tmp_path):
    """The printed verdict and the ``--json`` record say the same; the summary reads the record."""
    from cherry.bench.verify_record import read_verify_record
    from cherry.report.summary import verify_section

    out_json = tmp_path / "pool.json"
    code = main(["verify", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16",
                 "--fanouts", "5,10", "--batch-size", "300", "--microbatches", "4", "--aggr", "pool",
                 "--json", str(out_json)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "within tolerance" in out
    record = read_verify_record(str(out_json))
    assert (record.num_microbatches, record.num_seeds, record.nproc, record.tolerance) == (4, 300, 1, 1e-4)
    assert record.within and record.passed and record.parameters_identical is None
    assert f"largest relative difference {record.max_rel_diff:.3e} (within" in out
    for p in record.parameters:  # every parameter's printed row
        assert f"{p.max_abs_diff:12.3e}  {p.max_rel_diff:12.3e}" in out
    assert record.max_abs_diff == max(p.max_abs_diff for p in record.parameters)
    row = [line for line in verify_section([str(out_json)]) if line.startswith("| pool |")]
    assert row and row[0].startswith("| pool | 4 | 300 |") and row[0].endswith("| within 0.0001 |"), row


def test_verify_cli_rejects_auto_and_accepts_dropout(data_root, capsys):
    base = ["verify", "--dataset", "synth-tiny", "--root", str(data_root), "--fanouts", "5,10"]
    assert main(base + ["--microbatches", "auto"]) == 2
    assert "--microbatches" in capsys.readouterr().err
    # dropout masks are drawn per node and step (cherry.models.dropout): K micro-batches stay exact
    assert main(base + ["--microbatches", "4", "--dropout", "0.5", "--hidden", "16", "--batch-size", "256"]) == 0
    assert "within tolerance" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["train", "verify"])
def test_negative_fanouts_parse_on_train_and_verify(command, data_root):
    """``--fanouts -1,-1`` (all neighbours) is a value, not an option, on both commands."""
    from cherry.cli import build_parser
    from cherry.cli.options import join_negative_values, spec_from_args

    for argv in ([command, "--dataset", "synth-tiny", "--fanouts", "-1,-1", "--microbatches", "2"],
                 [command, "--dataset", "synth-tiny", "--fanouts=-1,-1", "--microbatches", "2"]):
        parser = build_parser()
        args = parser.parse_args(join_negative_values(argv))
        assert spec_from_args(args, args._parser).fanouts == (-1, -1)


def test_verify_cli_runs_with_all_neighbours(synth_tiny, data_root, capsys):
    code = main(["verify", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16",
                 "--fanouts", "-1,-1", "--batch-size", "64", "--microbatches", "2"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "within tolerance" in out


def test_train_cli_runs_with_all_neighbours(synth_tiny, data_root):
    assert _cli(["--fanouts", "-1,-1", "--batch-size", "64", "--max-steps", "1", "--no-eval"], data_root) == 0


def test_an_epoch_counts_and_shows_its_streamed_steps(synth_tiny):
    import dataclasses

    from cherry.cli.train import _epoch_line

    spec = make_spec(dataset="synth-tiny", hidden=8, fanouts=(5, 10), batch_size=512, epochs=1, evaluate=False,
                     options={"stream_inputs": "on"})  # 24 features to 8: the first layer streams
    result = next(iter(Trainer(synth_tiny, spec).fit()))
    assert result.streamed_steps == result.num_steps > 0
    assert f" streamed={result.num_steps}/{result.num_steps}" in _epoch_line(result)
    assert "streamed=" not in _epoch_line(dataclasses.replace(result, streamed_steps=0))
