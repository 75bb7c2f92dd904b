"""Adding a system is one registration: a toy system registered through `cherry.systems.register_system`
gets its options validated and defaulted by the spec and runs one record through the runner."""
from __future__ import annotations

import json

import pytest

import cherry.systems as systems
from cherry.bench.record import validate_record
from cherry.bench.runner import execute
from cherry.spec import SpecError, make_spec
from cherry.systems import SystemEntry, get_system, register_system, system_entry, system_names
from tests.unit.toy_system import OPTIONS, ToySystem

ENTRY = SystemEntry("toy", "tests.unit.toy_system", role="micro_batcher", colour="#8e44ad", marker="x", label="Toy",
                    options=OPTIONS)


@pytest.fixture
def toy():
    assert "toy" not in system_names()
    register_system(ENTRY)
    try:
        yield ENTRY
    finally:
        systems.table._TABLE.pop("toy", None)


def test_a_registered_system_runs_one_record_through_the_runner(toy, synth_tiny, data_root, tmp_path):
    assert "toy" in system_names() and system_entry("toy") is toy and get_system("toy") is ToySystem
    assert register_system(ENTRY) is ENTRY  # registering the same entry again is a no-op
    spec = make_spec(system="toy", dataset="synth-tiny", root=str(data_root), num_microbatches=1, batch_size=256,
                     epochs=0, warmup=1, steps=2, timeout_s=120)
    assert dict(spec.options) == {"scale": 1.0}  # defaults from the table
    out = tmp_path / "toy.json"
    lines: list[str] = []
    assert execute(spec, str(out), lines.append) == 0
    record = json.loads(out.read_text())
    validate_record(record)
    assert record["status"] == "ok", record["reason"]
    assert record["system"] == "toy" and record["steps_completed"] == 3 and record["num_microbatches_max"] == 1
    assert record["run_id"].startswith("run-toy-synth-tiny-b256-k1-r0-")
    assert record["phase_forward_backward_median_s"] > 0 and 0.0 <= record["valid_acc"] <= 1.0
    assert any("ok" in line for line in lines)


def test_a_registered_systems_options_are_checked_by_its_entry(toy):
    assert make_spec(system="toy", dataset="synth-tiny", num_microbatches=1, options={"scale": 2.0}).options == \
        {"scale": 2.0}
    with pytest.raises(SpecError, match="options/scale"):
        make_spec(system="toy", dataset="synth-tiny", num_microbatches=1, options={"scale": 0})
    with pytest.raises(SpecError, match="ordering.*options of toy: scale"):
        make_spec(system="toy", dataset="synth-tiny", num_microbatches=1, options={"ordering": "metis"})


def test_registration_refuses_a_taken_name_and_bad_entries(toy):
    with pytest.raises(ValueError, match="already registered"):
        register_system(SystemEntry("toy", "elsewhere", "micro_batcher", "#000000", "o"))
    with pytest.raises(ValueError, match="already registered"):
        register_system(SystemEntry("cherry", "tests.unit.toy_system", "micro_batcher", "#000000", "o"))
    with pytest.raises(TypeError):
        register_system({"name": "other"})
    with pytest.raises(ValueError, match="lower-case identifier"):
        SystemEntry("Toy-2", "tests.unit.toy_system", "micro_batcher", "#000000", "o")


def test_an_unregistered_system_is_unknown_again():
    assert "toy" not in system_names()
    with pytest.raises(SpecError, match="unknown system 'toy'"):
        make_spec(system="toy", dataset="synth-tiny")
