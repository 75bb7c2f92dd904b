"""Run specs (`cherry.spec`): schema validation with one-line errors, defaults, cross-field checks,
readable stable run ids, the systems table (`cherry.systems`)."""
from __future__ import annotations

import json
import re

import pytest

from cherry.bench.run import main
from cherry.systems.contract import System, SystemUnavailable
from cherry.spec import RunSpec, SpecError, load_spec, make_spec, resolve_budget_bytes, run_id, spec_from_dict
from cherry.systems import get_system, is_whole_batch, system_entry, system_names

BASE = {"system": "cherry", "dataset": "synth-tiny", "fanouts": [5, 10], "batch_size": 64}
CHERRY_OPTION_DEFAULTS = {"ordering": "metis", "balance": "memory", "stage_features": True, "pipeline": True,
                          "native_ops": True, "safety": 0.1, "recompute": "auto", "stream_inputs": "auto",
                          "feature_cache": "none", "exactness_check": "first-step"}


def _spec(**changes) -> RunSpec:
    data = dict(BASE)
    data.update(changes)
    return spec_from_dict(data)


def _error(**changes) -> str:
    with pytest.raises(SpecError) as info:
        _spec(**changes)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_defaults_come_from_the_schema_and_round_trip():
    spec = _spec()
    assert spec.model == "sage" and spec.num_layers == 2 and spec.num_microbatches is None  # default "auto"
    assert spec.device == "cpu" and spec.steps == 10 and spec.warmup == 2 and spec.epochs == 1
    assert spec.max_steps_per_epoch is None and spec.experiment == "" and spec.axis is None
    assert spec.fanouts == (5, 10) and spec.timeout_s == 3600.0
    assert dict(spec.options) == CHERRY_OPTION_DEFAULTS  # every option present, defaults filled in
    assert dict(spec.options) == system_entry("cherry").option_defaults
    assert spec.to_dict()["num_microbatches"] == "auto"
    assert spec_from_dict(spec.to_dict()) == spec
    fixed = _spec(num_microbatches=1)
    assert fixed.num_microbatches == 1 and spec_from_dict(fixed.to_dict()) == fixed
    with pytest.raises(TypeError):
        spec.options["ordering"] = "none"  # read-only
    assert dict(_spec(system="naive", num_microbatches=2).options) == {}  # naive declares no options
    assert dict(_spec(system="betty", num_microbatches=2).options) == {"weighted_reg": False, "num_re_partition": 0}


def test_cherrys_options_are_the_run_schemas_and_the_executors_defaults_are_the_specs():
    """One place for cherry's option defaults: the run schema's ``$defs/cherry_options``. Its enums are
    the engine's lists; `ExecutorOptions.for_k` (no spec) and `from_spec` (a default spec) agree."""
    from cherry.execution import ExecutorOptions
    from cherry.planning.ordering import ORDERINGS
    from cherry.planning.residency import RESIDENCY_MODES
    from cherry.schemas import load_schema

    schema = load_schema("run")["$defs"]["cherry_options"]["properties"]
    assert dict(system_entry("cherry").options) == schema
    assert schema["ordering"]["enum"] == list(ORDERINGS)
    assert schema["feature_cache"]["enum"] == list(RESIDENCY_MODES)
    spec = _spec(num_microbatches=4)
    assert ExecutorOptions.for_k(4, dropout_seed=spec.seed) == ExecutorOptions.from_spec(spec, None)


def test_sizes_accept_strings_and_auto_means_none():
    spec = _spec(num_microbatches="auto", device_memory_bytes="1MiB", budget_bytes=1000)
    assert spec.device_memory_bytes == 1 << 20 and spec.budget_bytes == 1000 and spec.num_microbatches is None
    assert _spec(num_microbatches=None).num_microbatches is None  # Python's None is "auto"
    assert make_spec(dataset="synth-tiny", fanouts=(5, 10), batch_size=64, num_microbatches=None, budget_bytes="1KiB") == \
        _spec(budget_bytes=1024)


def test_auto_without_a_budget_on_a_cpu_is_valid_and_has_no_budget():
    """Formerly an error ("auto needs a budget"); now K = 1: there is nothing to fit."""
    spec = _spec(num_microbatches="auto")
    assert spec.num_microbatches is None and resolve_budget_bytes(spec) is None


def test_resolve_budget_bytes_is_the_budget_or_the_capacity_less_the_reserve():
    assert resolve_budget_bytes(_spec(budget_bytes="1MiB", device_memory_bytes="2MiB")) == 1 << 20
    assert resolve_budget_bytes(_spec(device_memory_bytes="256KiB")) == 256 * 1024 - 26214
    assert resolve_budget_bytes(_spec()) is None


@pytest.mark.parametrize("changes, words", [
    ({"batchsize": 3}, ["batchsize", "unexpected"]),
    ({"fanouts": [5, 0]}, ["fanouts/1", "0"]),
    ({"num_microbatches": "many"}, ["num_microbatches", "many"]),
    ({"device": "tpu"}, ["device", "tpu"]),
    ({"dropout": 1.5}, ["dropout", "1.5"]),
    ({"options": {"ordering": "spectral"}}, ["options/ordering", "spectral"]),
    ({"options": {"turbo": True}}, ["options", "turbo"]),
    ({"device_memory_bytes": "12 parsecs"}, ["device_memory_bytes", "parsecs"]),
    ({"fanouts": [5]}, ["fanouts", "num_layers=2"]),
    ({"model": "gcn", "aggr": "lstm"}, ["aggr", "lstm"]),
    ({"budget_bytes": "2MiB", "device_memory_bytes": "1MiB"}, ["budget_bytes", "device_memory_bytes"]),
    ({"dataset": "ogbn-nothing"}, ["dataset", "ogbn-nothing", "synth-tiny"]),
    ({"num_microbatches": 65}, ["num_microbatches", "65", "batch_size"]),
    ({"system": "full", "num_microbatches": 2}, ["num_microbatches", "full", "2"]),
    ({"system": "dgl", "num_microbatches": 4}, ["num_microbatches", "dgl", "4"]),
    ({"system": "pyg", "num_microbatches": 8}, ["num_microbatches", "pyg", "8"]),
    ({"hidden": 16.0}, ["hidden", "16.0", "integer"]),
    ({"batch_size": 64.0}, ["batch_size", "64.0", "integer"]),
    ({"num_microbatches": 2.0}, ["num_microbatches", "2.0"]),
    ({"fanouts": [5.0, 10.0]}, ["fanouts", "5.0"]),
    ({"budget_bytes": 1000.0}, ["budget_bytes", "1000.0"]),
    ({"layers": 2}, ["layers", "unexpected"]),  # the old names are gone, not aliases
    ({"microbatches": 2}, ["microbatches", "unexpected"]),
    ({"budget": 1000}, ["budget", "unexpected"]),
    ({"tag": "t"}, ["tag", "unexpected"]),
])
def test_bad_specs_give_one_line_naming_key_and_value(changes, words):
    message = _error(**changes)
    for word in words:
        assert word in message, (word, message)


def test_whole_batch_systems_take_auto_as_k_1():
    for name in ("full", "dgl", "pyg"):
        assert is_whole_batch(name)
        assert _spec(system=name).num_microbatches == 1
        assert _spec(system=name, num_microbatches=1).num_microbatches == 1
    assert not any(is_whole_batch(name) for name in ("cherry", "naive", "betty", "buffalo"))


def test_baseline_options_are_checked_against_their_own_entry_not_cherry_switches():
    """Each system's options come from its own entry: cherry's switches are not betty's."""
    message = _error(system="betty", num_microbatches=2, options={"ordering": "metis"})
    assert "options" in message and "ordering" in message and "betty" in message
    assert "resplit" in _error(system="betty", num_microbatches=2, options={"resplit": True})


def test_unknown_system_lists_the_known_ones():
    message = _error(system="nope")
    assert "nope" in message and all(name in message for name in system_names())
    with pytest.raises(ValueError, match="known systems: cherry, full"):
        get_system("nope")


def test_registry_returns_system_classes():
    cls = get_system("cherry")
    assert issubclass(cls, System) and cls.accepts_auto_microbatches
    assert system_names()[:1] == ("cherry",)
    for name in system_names()[1:]:
        try:
            other = get_system(name)
        except (SystemUnavailable, ImportError):
            continue  # a baseline whose package is absent here
        assert issubclass(other, System)


def test_run_id_is_readable_stable_ignores_root_and_sees_everything_else():
    a = _spec()
    assert run_id(a) == run_id(_spec())
    assert re.fullmatch(r"run-cherry-synth-tiny-b64-kauto-r0-[0-9a-f]{6}", run_id(a)), run_id(a)
    assert run_id(a) == run_id(_spec(root="/elsewhere"))
    assert run_id(a) != run_id(_spec(repeat=1))
    assert run_id(a) != run_id(_spec(options={"ordering": "none"}))
    assert run_id(a) != run_id(_spec(seed=1))
    named = _spec(experiment="sensitivity", axis="hidden", num_microbatches=4, repeat=1)
    assert re.fullmatch(r"sensitivity\.hidden-cherry-synth-tiny-b64-k4-r1-[0-9a-f]{6}", run_id(named))
    with pytest.raises(TypeError):
        run_id(a.to_dict())


def test_load_spec_reports_unreadable_and_invalid_json(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_spec(bad)
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(BASE))
    assert load_spec(good) == _spec()


def test_replace_validates_again():
    spec = _spec()
    assert spec.replace(hidden=32).hidden == 32
    with pytest.raises(SpecError, match="hidden"):
        spec.replace(hidden=0)


def test_runner_exits_2_with_one_line_and_no_record_for_a_bad_spec(tmp_path, capsys):
    path = tmp_path / "spec.json"
    out = tmp_path / "record.json"
    for bad in ({**BASE, "colour": "red"}, {**BASE, "system": "nope"}):
        path.write_text(json.dumps(bad))
        assert main(["--spec", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and ("colour" in err or "nope" in err)
        assert not out.exists()
