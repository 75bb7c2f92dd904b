"""Adding a system is one registration: a toy system registered through `cherry.systems.register_system`
gets its options validated and defaulted by the spec, runs one record through the runner, and, named in
a workflow config, reaches the figures and the summary beside the systems its role compares it with,
with no other edit."""
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


def _run_config(config: dict, root, tmp_path):
    """Every run of ``config`` through the runner, then the run table the report reads."""
    from cherry.bench.aggregate import collect_records, to_csv_bytes
    from cherry.bench.experiments import plan_runs
    from cherry.report.tables import load_table
    from cherry.spec import spec_from_dict

    paths = []
    for run, data in plan_runs(config).items():
        out = tmp_path / f"{run}.json"
        assert execute(spec_from_dict({**data, "root": str(root)}), str(out), lambda line: None) == 0
        paths.append(out)
    table = tmp_path / "runs.csv"
    table.write_bytes(to_csv_bytes(collect_records(paths)))
    return load_table(table)


def _legend(fig) -> dict[str, str]:
    """Legend label -> colour (hex) of the figure's first panel."""
    from matplotlib.colors import to_hex

    ax = fig.axes[0]
    handles, labels = ax.get_legend_handles_labels()
    colours = {}
    for handle, label in zip(handles, labels):
        line = handle.lines[0] if hasattr(handle, "lines") else handle  # an errorbar container
        colours[label] = to_hex(line.get_color())
    return colours


@pytest.mark.parametrize("role, k", [("micro_batcher", 2), ("whole_batch", 1)])
def test_a_registered_system_reaches_the_figure_and_the_summary_by_its_role(role, k, synth_tiny, data_root,
                                                                            tmp_path):
    """From the config (the toy named beside cherry and full in microbatch_cost) to the micro-batching
    cost figure (its label and colour) and the summary (compared with cherry as its role says)."""
    from cherry.report import figures, summary

    entry = SystemEntry("toy", "tests.unit.toy_system", role=role, colour="#8e44ad", marker="x", label="Toy",
                        options=OPTIONS)
    register_system(entry)
    try:
        config = {"run": {"hidden": 8, "fanouts": [3, 4], "batch_size": 128, "epochs": 0, "steps": 2, "warmup": 1,
                          "evaluate": False, "timeout_s": 120},
                  "experiments": {"microbatch_cost": [{"dataset": "synth-tiny",
                                                       "systems": {"full": [1], "cherry": [2], "toy": [k]}}]}}
        frame = _run_config(config, data_root, tmp_path)
        assert set(frame["system"]) == {"full", "cherry", "toy"} and set(frame["status"]) == {"ok"}
        assert int(frame[frame["system"] == "toy"]["num_microbatches_max"].iloc[0]) == k
        legend = _legend(figures.FIGURES["microbatch_cost"](frame, None, {}))
        toy_label = "Toy" if role == "micro_batcher" else "Toy (K=1)"  # a whole-batch system: a reference line
        assert legend[toy_label] == "#8e44ad" and legend["Cherry"] == system_entry("cherry").colour
        assert "full batch (K=1)" in legend
        text = summary.render_summary(frame, [])
        step = text[text.index("## Step time"):text.index("## ", text.index("## Step time") + 3)]
        memory = text[text.index("## Peak memory"):text.index("## ", text.index("## Peak memory") + 3)]
        if role == "micro_batcher":  # compared step for step with cherry, absent from the plain references
            assert "## Step time: cherry vs the other micro-batchers (Toy; same batch, same K)" in step and "| toy/cherry | verdict |" in step
            assert "toy MiB" not in memory
        else:  # a plain mini-batch reference of the memory table, not a micro-batcher
            assert "toy/cherry" not in step
            assert "## Peak memory: plain mini-batch (full batch and Toy) vs cherry" in memory
            assert "| full MiB | toy MiB | cherry MiB | full/cherry | toy/cherry |" in memory
    finally:
        systems.table._TABLE.pop("toy", None)
