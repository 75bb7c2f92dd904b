"""The experiment matrix: config -> run specs (cherry.bench.experiments) and the summary's parsers."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from cherry.bench.experiments import (
    ConfigError,
    datasets_used,
    expand_experiments,
    needs_ordering,
    plan_runs,
    plan_searches,
    verify_arguments,
    verify_checks,
)
from cherry.spec import run_id, spec_from_dict

REPO = Path(__file__).resolve().parents[2]


def load(name: str) -> dict:
    with open(REPO / "config" / name, encoding="utf-8") as f:
        return yaml.safe_load(f)


SMALL = {
    "run": {"hidden": 16, "fanouts": [5, 10], "batch_size": 256, "epochs": 0, "steps": 2, "warmup": 1,
            "evaluate": False},
    "experiments": {
        "memory_wall": [{"dataset": "synth-tiny", "device_memory_bytes": "12MiB", "start_batch": 128,
                         "systems": {"cherry": ["auto"], "full": [1], "betty": [2]}}],
        "epoch_time": [{"dataset": "synth-tiny", "device_memory_bytes": ["8MiB", "16MiB"],
                        "systems": {"cherry": ["auto"], "full": [1]}}],
        "microbatch_cost": [{"dataset": "synth-tiny", "systems": {"full": [1], "cherry": [2, 4]}, "repeats": 2}],
        "sensitivity": [{"dataset": "synth-tiny", "systems": {"full": [1]}, "layer_fanouts": [5, 10, 15],
                         "vary": {"aggr": ["mean", "gat"], "layers": [1, 3], "fanout": [4]}}],
        "ablation": [{"dataset": "synth-tiny", "num_microbatches": [2], "variants": [{"ordering": "none"}]}],
    },
    "verify": [{"name": "tiny", "dataset": "synth-tiny", "aggr": "lstm", "fanouts": [5, 10], "num_microbatches": 4}],
}


def test_small_config_expands_to_valid_specs_with_unique_stable_ids():
    specs = expand_experiments(SMALL)
    # cost (1 + 2) x 2 repeats; sensitivity 2 + 2 + 1; ablation 2; epoch time 2 systems x 2 capacities
    assert len(specs) == 6 + 5 + 2 + 4
    ids = [run_id(spec_from_dict(s)) for s in specs]
    assert len(set(ids)) == len(ids)
    assert list(plan_runs(SMALL)) == ids  # same order, same ids on every call
    assert not [s for s in specs if s["experiment"] == "memory_wall"]  # the memory wall is searched
    assert sorted(s["repeat"] for s in specs if s["experiment"] == "microbatch_cost" and s["num_microbatches"] == 4) == [0, 1]
    assert ids[0] == "microbatch_cost-full-synth-tiny-b256-k1-r0-" + ids[0][-6:]  # readable names
    epoch = [s for s in specs if s["experiment"] == "epoch_time"]
    assert sorted({s["device_memory_bytes"] for s in epoch}) == [8 * 2**20, 16 * 2**20]
    assert {(s["system"], s["num_microbatches"]) for s in epoch} == {("cherry", "auto"), ("full", 1)}


def test_memory_wall_expands_to_one_search_per_system_and_k():
    searches = plan_searches({**SMALL, "repeats": 3})  # a search is deterministic: never repeated
    assert len(searches) == 3
    wall = [s["spec"] for s in searches.values()]
    assert {s["device_memory_bytes"] for s in wall} == {12 * 2**20} and {s["batch_size"] for s in wall} == {128}
    assert {(s["system"], s["num_microbatches"]) for s in wall} == {("cherry", "auto"), ("full", 1), ("betty", 2)}
    assert {(s["ratio_tolerance"], s["seed_tolerance"]) for s in searches.values()} == {(1.1, 64)}
    first = next(iter(searches))
    assert first == "memory_wall-cherry-synth-tiny-b128-kauto-r0-" + first[-6:]
    assert first == run_id(spec_from_dict(searches[first]["spec"]))


def test_sensitivity_axes_set_model_layers_and_fanouts():
    specs = {(s["axis"], s["model"], s["aggr"], s["num_layers"], tuple(s["fanouts"]))
             for s in expand_experiments(SMALL) if s["experiment"] == "sensitivity"}
    assert ("aggr", "gat", None, 2, (5, 10)) in specs
    assert ("aggr", "sage", "mean", 2, (5, 10)) in specs
    assert ("layers", "sage", None, 3, (5, 10, 15)) in specs
    assert ("fanout", "sage", None, 2, (4, 4)) in specs


def test_ablation_runs_all_on_then_each_variant():
    from cherry.systems import system_entry

    defaults = system_entry("cherry").option_defaults
    options = [s["options"] for s in expand_experiments(SMALL) if s["experiment"] == "ablation"]
    assert options == [defaults, {**defaults, "ordering": "none"}]
    runs = [s for s in expand_experiments(SMALL) if s["experiment"] == "ablation"]
    assert [needs_ordering(s) for s in runs] == ["metis", None]


@pytest.mark.parametrize("mutate, fragment", [
    (lambda c: c.update(bogus=1), "Additional properties are not allowed ('bogus'"),
    (lambda c: c["experiments"].update(memory_walls=[]), "memory_walls"),
    (lambda c: c["run"].update(hidden=0), "key run/hidden"),
    (lambda c: c["experiments"]["memory_wall"][0].update(start_batch=0), "start_batch"),
    (lambda c: c["experiments"]["memory_wall"][0].update(ratio_tolerance=1), "ratio_tolerance"),
    (lambda c: c["experiments"]["memory_wall"][0].update(batch_sizes=[256]), "batch_sizes"),
    (lambda c: c["experiments"]["epoch_time"][0].update(device_memory_bytes=[]), "device_memory_bytes"),
    (lambda c: c["experiments"]["microbatch_cost"][0]["systems"].update(full=[2]), "K must be 1"),
    (lambda c: c["run"].update(layers=2), "'layers' was unexpected"),
    (lambda c: c["experiments"]["ablation"][0]["variants"].append({"turbo": True}), "options"),
    (lambda c: c["experiments"]["microbatch_cost"][0].update(dataset="nope"), "unknown dataset 'nope'"),
    (lambda c: c["experiments"]["microbatch_cost"][0]["systems"].update(cherry=[512]), "exceeds batch_size"),
    (lambda c: c["experiments"]["sensitivity"][0]["vary"].update(layers=[4]), "layer_fanouts"),
    (lambda c: c["experiments"]["memory_wall"][0]["systems"].update(nosuch=[1]), "nosuch"),
])
def test_bad_configs_give_one_line_errors_naming_the_problem(mutate, fragment):
    config = copy.deepcopy(SMALL)
    mutate(config)
    with pytest.raises(ConfigError) as info:
        expand_experiments(config)
    message = str(info.value)
    assert "\n" not in message and fragment in message, message


def test_verify_checks_become_cherry_verify_arguments():
    check = verify_checks(SMALL)["tiny"]
    args = verify_arguments(check, "/data")
    assert args[:2] == ["--dataset=synth-tiny", "--aggr=lstm"]
    assert "--num-microbatches=4" in args and "--fanouts=5,10" in args
    assert args[-2:] == ["--root", "/data"]
    from cherry.cli import build_parser
    from cherry.cli.options import spec_from_args

    parser = build_parser()
    parsed = parser.parse_args(["verify", *args])
    spec = spec_from_args(parsed, parsed._parser)  # the arguments are the spec keys the CLI knows
    assert (spec.aggr, spec.fanouts, spec.num_microbatches, spec.root) == ("lstm", (5, 10), 4, "/data")
    twice = copy.deepcopy(SMALL)
    twice["verify"].append(dict(twice["verify"][0]))
    with pytest.raises(ConfigError, match="used twice"):
        verify_checks(twice)


def test_shipped_configs_expand():
    default = expand_experiments(load("config.yaml"))
    assert {s["device"] for s in default} == {"cpu"}
    assert {s["dataset"] for s in default} <= {"synth-tiny", "synth-arxiv", "synth-products"}
    assert datasets_used(load("config.yaml")) == ["synth-arxiv", "synth-products", "synth-tiny"]
    paper = expand_experiments(load("paper.yaml"))
    assert {s["device"] for s in paper} == {"cuda"}
    assert {s["dataset"] for s in paper} == {"ogbn-arxiv", "ogbn-products", "ogbn-papers100M"}


def _difference(name: str, abs_diff: float, rel_diff: float):
    from cherry.execution.verify import ParameterDifference

    return ParameterDifference(name, abs_diff, rel_diff)


def test_verify_records_round_trip_and_feed_the_summary(tmp_path):
    """`cherry verify --json` records (one process, and ranks whose parameters differ) are what the
    summary's gradient-equivalence table reads; a record off the schema is named, not parsed."""
    from cherry.bench.verify_record import VerifyRecord, read_verify_record, write_verify_record
    from cherry.report.summary import verify_section

    diffs = [_difference("layers.0.weight", 8.94e-08, 3.57e-07), _difference("layers.1.weight", 1e-08, 2e-07)]
    one = VerifyRecord.from_differences(diffs, 4, 512, 1e-4)
    assert (one.max_rel_diff, one.max_abs_diff, one.nproc) == (3.57e-07, 8.94e-08, 1)
    assert one.within and one.passed and one.parameters_identical is None
    ranks = VerifyRecord.from_differences(diffs, 3, 512, 1e-7, rank_microbatches=[2, 3], parameters_identical=False)
    assert ranks.nproc == 2 and not ranks.within and not ranks.passed
    paths = []
    for name, record in (("sage", one), ("distributed", ranks)):
        paths.append(str(tmp_path / f"{name}.json"))
        write_verify_record(record, paths[-1])
        assert read_verify_record(paths[-1]) == record
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**one.as_dict(), "max_rel_diff": "small"}))
    with pytest.raises(ValueError, match="bad.json.*max_rel_diff"):
        read_verify_record(str(bad))
    lines = verify_section(paths + [str(bad)])
    assert "| sage | 4 | 512 | 3.57e-07 | 8.94e-08 | within 0.0001 |" in lines
    assert "| distributed | 3 | 512 | 3.57e-07 | 8.94e-08 | ABOVE 1e-07; ranks' parameters DIFFERENT |" in lines
    assert any(line.startswith("| bad | - |") and "unreadable" in line for line in lines)
