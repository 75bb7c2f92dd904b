"""Bad input at the CLI and the runner: one line, the promised exit code, before any work.

Each case is a row of tests/BAD_INPUTS.md. The commands run in-process (`cherry.cli.main`,
`cherry.bench.run.main`), so a traceback would fail the test as an exception rather than pass as text.
"""
from __future__ import annotations

import json

import pytest
import torch

from cherry.bench.run import main as run_main
from cherry.cli import main

TINY = ["--dataset", "synth-tiny", "--fanouts", "5,10", "--hidden", "16", "--batch-size", "128"]


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err, err
    return err


@pytest.mark.parametrize("argv, words", [
    (["train", *TINY, "--hidden", "16.0"], ["--hidden", "16.0"]),
    (["train", *TINY, "--microbatches", "many"], ["--microbatches", "many"]),
    (["train", *TINY, "--budget", "12 parsecs"], ["--budget", "parsecs"]),
    (["train", *TINY, "--seed", "18446744073709551616"], ["--seed"]),
    (["train", *TINY, "--fanouts", "99999999999999999999,5"], ["--fanouts"]),
    (["train", *TINY, "--epochs", "0"], ["--epochs", "0"]),
    (["verify", *TINY, "--microbatches", "2", "--tolerance", "-1"], ["--tolerance", "-1"]),
    (["train", *TINY, "--model", "gcn", "--aggr", "lstm"], ["--aggr", "lstm"]),
    (["verify", *TINY, "--microbatches", "2", "--json", "/no/such/dir/v.json"], ["--json", "/no/such/dir"]),
])
def test_bad_values_are_one_line_errors_naming_the_option(argv, words, data_root, capsys):
    assert main([*argv, "--root", str(data_root)]) == 2
    err = one_line_error(capsys)
    assert err.startswith("cherry: error:") and all(w in err for w in words), err


def test_argument_errors_print_one_line_without_the_usage_block(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--dataset", "synth-tiny", "--bogus"])
    assert info.value.code == 2
    assert one_line_error(capsys).startswith("cherry: error: unrecognized arguments: --bogus")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")
@pytest.mark.parametrize("command", ["train", "verify"])
def test_cuda_without_a_gpu_is_one_line(command, data_root, capsys):
    extra = ["--microbatches", "2"] if command == "verify" else []
    assert main([command, *TINY, *extra, "--device", "cuda", "--root", str(data_root)]) == 2
    assert "no CUDA device" in one_line_error(capsys)


def test_json_onto_a_directory_fails_before_training(data_root, tmp_path, capsys):
    assert main(["train", *TINY, "--root", str(data_root), "--json", str(tmp_path)]) == 2
    assert "is a directory" in one_line_error(capsys)


def test_train_json_is_strict_json(data_root, tmp_path):
    out = tmp_path / "summary.json"
    assert main(["train", *TINY, "--root", str(data_root), "--max-steps", "1", "--no-eval", "--quiet",
                 "--json", str(out)]) == 0
    text = out.read_text()
    assert "NaN" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))


def test_budget_too_small_for_the_planner_is_a_budget_error(data_root, capsys):
    # 200 KiB holds the model but not the slicing of a 512-seed batch: no K can help
    code = main(["train", *TINY[:-2], "--batch-size", "512", "--root", str(data_root), "--max-steps", "1",
                 "--no-eval", "--quiet", "--device-memory", "200KiB"])
    assert code == 2
    # the planner prices each micro-batch's index buffers, so it refuses before slicing runs out
    err = one_line_error(capsys)
    assert "too small for one seed" in err or "cannot hold even the planning" in err
    assert "smallest budget that would fit" in err or "cannot hold even the planning" in err


def test_fixed_k_larger_than_the_last_batch_is_cut_to_its_seeds(data_root):
    from cherry.data import load_dataset
    from cherry.execution import Trainer
    from cherry.spec import make_spec

    ds = load_dataset("synth-tiny", data_root)
    batch = 128
    last = ds.train_idx.numel() % batch
    assert 0 < last < 60, "synth-tiny's training set must leave a small last batch"
    spec = make_spec(dataset="synth-tiny", root=str(data_root), hidden=8, fanouts=(5, 10), batch_size=batch,
                     num_microbatches=60, evaluate=False)
    trainer = Trainer(ds, spec)
    steps = trainer.train_epoch(0)
    trainer.close()
    assert len(steps) == trainer.num_steps(0) and steps[-1].num_microbatches == last


def _spec_file(tmp_path, text: str):
    path = tmp_path / "spec.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, words", [
    ('{"system": "cherry", "dataset": "synth-tiny", "hidden": 16.0}', ["hidden", "16.0", "integer"]),
    ('{"system": "cherry", "dataset": "synth-tiny", "hidden": 8, "hidden": 9}', ["repeats the key", "hidden"]),
    ('{"system": "dgl", "dataset": "synth-tiny", "num_microbatches": 4}', ["num_microbatches", "whole batch"]),
    ('{"system": "cherry", "dataset": "synth-tiny"', ["not valid JSON"]),
])
def test_bad_specs_exit_2_with_one_line_and_write_nothing(text, words, tmp_path, capsys):
    out = tmp_path / "record.json"
    assert run_main(["--spec", str(_spec_file(tmp_path, text)), "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert all(w in err for w in words), err
    assert not out.exists()


def test_runner_output_checked_before_the_run(tmp_path, capsys):
    spec = _spec_file(tmp_path, '{"system": "cherry", "dataset": "synth-tiny"}')
    assert run_main(["--spec", str(spec), "--out", str(spec)]) == 2
    assert "is the spec itself" in one_line_error(capsys)
    assert json.loads(spec.read_text()) == {"system": "cherry", "dataset": "synth-tiny"}  # untouched
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert run_main(["--spec", str(spec), "--out", str(blocker / "record.json")]) == 2
    assert "is not a directory" in one_line_error(capsys)


def test_config_naming_an_absent_real_dataset_fails_before_any_job(tmp_path):
    from cherry.bench.experiments import ConfigError, check_datasets_available

    config = {"data": {"root": str(tmp_path)}, "run": {},
              "experiments": {"breakdown": [{"dataset": "ogbn-arxiv", "systems": {"full": [1]}}]}}
    with pytest.raises(ConfigError, match="ogbn-arxiv.*ogbn_arxiv"):
        check_datasets_available(config)
