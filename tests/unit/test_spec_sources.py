"""One source of defaults: the CLI (`cherry train`), the Python API (`cherry.spec.make_spec`) and a
workflow run (`cherry.bench.experiments.expand_experiments`) with the same settings build equal specs."""
from __future__ import annotations

import json

import pytest

from cherry.bench.experiments import expand_experiments
from cherry.cli import build_parser
from cherry.cli.options import join_negative_values, spec_from_args
from cherry.spec import load_spec, make_spec, run_id, spec_from_dict


def _cli_spec(argv: list[str]):
    args = build_parser().parse_args(join_negative_values(argv))
    return spec_from_args(args, args._parser)


def _workflow_spec(case: dict, run: dict, experiment: str = "microbatch_cost", pick: int = 0):
    config = {"run": run, "experiments": {experiment: [case]}}
    specs = [spec_from_dict(s) for s in expand_experiments(config)]
    spec = specs[pick]
    assert spec.experiment == experiment and spec.axis is None
    return spec.replace(experiment="")  # the experiment a run belongs to is the one difference


def test_defaults_alone_give_equal_specs():
    cli = _cli_spec(["train", "--dataset", "synth-tiny"])
    python = make_spec(dataset="synth-tiny")
    workflow = _workflow_spec({"dataset": "synth-tiny", "systems": {"cherry": ["auto"]}}, run={})
    assert cli == python == workflow
    assert python.num_microbatches is None and python.epochs == 1 and python.hidden == 256
    assert run_id(cli) == run_id(python) == run_id(workflow)


def test_the_same_settings_give_equal_specs(tmp_path):
    cli = _cli_spec(["train", "--dataset", "synth-tiny", "--layers", "3", "--hidden", "64", "--fanouts", "-1,5,10",
                     "--batch-size", "256", "--microbatches", "4", "--budget", "8MiB", "--device-memory", "16MiB",
                     "--epochs", "2", "--max-steps", "3", "--lr", "0.01", "--seed", "3", "--aggr", "lstm",
                     "--dropout", "0.25", "--ordering", "random", "--no-eval"])
    python = make_spec(dataset="synth-tiny", num_layers=3, hidden=64, fanouts=(-1, 5, 10), batch_size=256,
                       num_microbatches=4, budget_bytes="8MiB", device_memory_bytes=16 << 20, epochs=2,
                       max_steps_per_epoch=3, lr=0.01, seed=3, aggr="lstm", dropout=0.25,
                       options={"ordering": "random"}, evaluate=False)
    run = {"num_layers": 3, "hidden": 64, "fanouts": [-1, 5, 10], "batch_size": 256, "budget_bytes": "8MiB",
           "device_memory_bytes": "16MiB", "epochs": 2, "max_steps_per_epoch": 3, "lr": 0.01, "seed": 3,
           "aggr": "lstm", "dropout": 0.25, "evaluate": False}
    # the ablation's variant sets cherry's options (its first run has every option at its default)
    workflow = _workflow_spec({"dataset": "synth-tiny", "num_microbatches": [4], "variants": [{"ordering": "random"}]},
                              run=run, experiment="ablation", pick=1)
    assert cli == python == workflow
    assert python.budget_bytes == 8 << 20 and python.options["ordering"] == "random"
    # the spec file the workflow writes and the runner loads is the same spec again
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(workflow.to_dict()))
    assert load_spec(path) == python


def test_spec_long_names_and_human_aliases_are_the_same_option():
    long = _cli_spec(["train", "--dataset", "synth-tiny", "--num-layers", "1", "--fanouts", "5",
                      "--num-microbatches", "2", "--budget-bytes", "1MiB", "--device-memory-bytes", "2MiB",
                      "--max-steps-per-epoch", "4"])
    short = _cli_spec(["train", "--dataset", "synth-tiny", "--layers", "1", "--fanouts", "5", "--microbatches", "2",
                       "--budget", "1MiB", "--device-memory", "2MiB", "--max-steps", "4"])
    assert long == short == make_spec(dataset="synth-tiny", num_layers=1, fanouts=(5,), num_microbatches=2,
                                      budget_bytes=1 << 20, device_memory_bytes=2 << 20, max_steps_per_epoch=4)


def test_verify_builds_its_spec_the_same_way():
    verify = _cli_spec(["verify", "--dataset", "synth-tiny", "--fanouts", "5,10", "--microbatches", "4"])
    assert verify == make_spec(dataset="synth-tiny", fanouts=(5, 10), num_microbatches=4)


@pytest.mark.parametrize("argv,flag", [
    (["train", "--dataset", "synth-tiny", "--hidden", "0"], "--hidden"),
    (["train", "--dataset", "synth-tiny", "--num-layers", "0"], "--layers"),
    (["train", "--dataset", "synth-tiny", "--budget-bytes", "-1"], "--budget"),
])
def test_bad_cli_values_name_the_option(argv, flag):
    with pytest.raises(ValueError) as info:
        _cli_spec(argv)
    message = str(info.value)
    assert message.startswith(flag + ":") and "\n" not in message
