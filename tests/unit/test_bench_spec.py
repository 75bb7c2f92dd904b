"""Run specs: schema validation with one-line errors, defaults, cross-field checks, stable ids, registry."""
from __future__ import annotations

import json

import pytest

from cherry.bench.run import main
from cherry.bench.spec import RunSpec, SpecError, load_spec, spec_from_dict, spec_id
from cherry.bench.system import System, SystemUnavailable
from cherry.bench.systems import SYSTEM_NAMES, get_system

BASE = {"system": "cherry", "dataset": "synth-tiny", "fanouts": [5, 10], "batch_size": 64}


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
    assert spec.model == "sage" and spec.layers == 2 and spec.microbatches == 1 and spec.num_microbatches == 1
    assert spec.device == "cpu" and spec.steps == 10 and spec.warmup == 2 and spec.epochs == 0
    assert spec.fanouts == (5, 10) and dict(spec.options) == {} and spec.timeout_s == 3600.0
    assert spec_from_dict(spec.to_dict()) == spec
    with pytest.raises(TypeError):
        spec.options["ordering"] = "none"  # read-only


def test_sizes_accept_strings_and_auto_means_none():
    spec = _spec(microbatches="auto", device_memory="1MiB", budget=1000)
    assert spec.device_memory == 1 << 20 and spec.budget == 1000 and spec.num_microbatches is None


@pytest.mark.parametrize("changes, words", [
    ({"batchsize": 3}, ["batchsize", "unexpected"]),
    ({"fanouts": [5, 0]}, ["fanouts/1", "0"]),
    ({"microbatches": "many"}, ["microbatches", "many"]),
    ({"device": "tpu"}, ["device", "tpu"]),
    ({"dropout": 1.5}, ["dropout", "1.5"]),
    ({"options": {"ordering": "bfs"}}, ["options/ordering", "bfs"]),
    ({"options": {"turbo": True}}, ["options", "turbo"]),
    ({"device_memory": "12 parsecs"}, ["device_memory", "parsecs"]),
    ({"fanouts": [5]}, ["fanouts", "layers=2"]),
    ({"model": "gcn", "aggr": "lstm"}, ["aggr", "lstm"]),
    ({"microbatches": "auto"}, ["microbatches", "budget"]),
    ({"budget": "2MiB", "device_memory": "1MiB"}, ["budget", "device_memory"]),
    ({"dataset": "ogbn-nothing"}, ["dataset", "ogbn-nothing", "synth-tiny"]),
])
def test_bad_specs_give_one_line_naming_key_and_value(changes, words):
    message = _error(**changes)
    for word in words:
        assert word in message, (word, message)


def test_baseline_options_are_not_checked_against_cherry_switches():
    assert dict(_spec(system="betty", options={"resplit": True}).options) == {"resplit": True}


def test_unknown_system_lists_the_known_ones():
    message = _error(system="nope")
    assert "nope" in message and all(name in message for name in SYSTEM_NAMES)
    with pytest.raises(ValueError, match="known systems: cherry, full"):
        get_system("nope")


def test_registry_returns_system_classes():
    cls = get_system("cherry")
    assert issubclass(cls, System) and cls.accepts_auto_microbatches
    for name in SYSTEM_NAMES[1:]:
        try:
            other = get_system(name)
        except (SystemUnavailable, ImportError):
            continue  # a baseline whose package is absent here
        assert issubclass(other, System)


def test_spec_id_is_stable_ignores_root_and_sees_everything_else():
    a = _spec()
    assert spec_id(a) == spec_id(_spec()) and len(spec_id(a)) == 12
    assert spec_id(a) == spec_id(_spec(root="/elsewhere"))
    assert spec_id(a) != spec_id(_spec(repeat=1))
    assert spec_id(a) != spec_id(_spec(options={"ordering": "none"}))


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


def test_runner_exits_2_with_one_line_and_no_record_for_a_bad_spec(tmp_path, capsys):
    path = tmp_path / "spec.json"
    out = tmp_path / "record.json"
    for bad in ({**BASE, "colour": "red"}, {**BASE, "system": "nope"}):
        path.write_text(json.dumps(bad))
        assert main(["--spec", str(path), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and ("colour" in err or "nope" in err)
        assert not out.exists()
