"""The largest setting that fits (cherry.bench.fit_setting), its use by a run, and the accuracy-under-a-cap
plan (cherry.bench.experiments.plan_fits); searches run on a fake probe, no training."""
from __future__ import annotations

import json

import pytest

from cherry.bench.experiments import ConfigError, expand_experiments, plan_fits
from cherry.bench.fit_setting import apply_fit, check_knob, clip_fanouts, fit_search_spec, fit_setting


def _spec(**changes):
    from cherry.spec import make_spec

    fields = {"system": "dgl", "dataset": "synth-tiny", "batch_size": 512, "num_microbatches": 1,
              "fanouts": [5, 10], "device_memory_bytes": 2**20, "steps": 2, "warmup": 0,
              "experiment": "accuracy_cap", "axis": "largest_batch", **changes}
    return make_spec(**fields)


def probe_by_size(largest_size: int):
    """A probe runner: ok while batch x (sum of fanouts) is at most ``largest_size``."""
    def probe(spec, path):
        size = spec.batch_size * sum(spec.fanouts)
        status = "ok" if size <= largest_size else "oom"
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"status": status, "reason": None, "num_microbatches_max": 1, "peak_tracked_bytes": size,
                       "git_sha": "abc", "device_name": "cpu"}, f)
    return probe


def test_batch_search_finds_the_largest_batch_below_the_runs():
    record = fit_setting(_spec(), "batch_size", limit=1200, probe_run=probe_by_size(15 * 300))
    assert record["status"] == "ok" and record["knob"] == "batch_size"
    assert record["settings"]["batch_size"] <= 300 < record["smallest_oom_value"]
    assert [p["batch_size"] for p in record["probes"]][:2] == [512, 256]


def test_fanout_search_is_exact_and_clips_every_layer():
    record = fit_setting(_spec(axis="largest_fanouts"), "fanouts", probe_run=probe_by_size(512 * 12))
    assert record["settings"] == {"fanouts": [5, 7]}  # 512 x (5 + 7) fits, 512 x (5 + 8) does not
    assert record["largest_fit_value"] == 7 and record["smallest_oom_value"] == 8


def test_nothing_fits_leaves_the_runs_settings():
    record = fit_setting(_spec(axis="largest_fanouts"), "fanouts", probe_run=probe_by_size(10))
    assert record["largest_fit_value"] is None and record["settings"] == {}
    assert apply_fit({"batch_size": 512, "fanouts": [5, 10]}, record) == {"batch_size": 512, "fanouts": [5, 10]}


def test_apply_fit_replaces_only_the_knob():
    assert apply_fit({"batch_size": 512, "seed": 2}, {"knob": "batch_size", "settings": {"batch_size": 96}}) == \
        {"batch_size": 96, "seed": 2}
    with pytest.raises(ValueError, match="expected only the knob's key"):
        apply_fit({"batch_size": 512}, {"knob": "batch_size", "settings": {"fanouts": [1]}})


def test_knob_and_probe_spec_checks():
    assert clip_fanouts([5, 10, 25], 8) == [5, 8, 8]
    with pytest.raises(ValueError, match="knob 'hidden'"):
        check_knob("hidden")
    with pytest.raises(ValueError, match="need positive fanouts"):
        check_knob("fanouts", [-1, 10])
    probe = fit_search_spec({"epochs": 8, "evaluate": True, "seed": 3, "repeat": 1, "steps": 0}, 4)
    assert probe == {"epochs": 0, "evaluate": False, "seed": 0, "repeat": 0, "steps": 4, "warmup": 0}


def _config(**case):
    return {"run": {"fanouts": [5, 10], "batch_size": 512, "epochs": 2, "evaluate": True},
            "experiments": {"accuracy_cap": [{"dataset": "synth-tiny", "device_memory_bytes": "1MiB",
                                              "seeds": [0, 1], "systems": {"dgl": [1], "cherry": ["auto"]},
                                              **case}]}}


def test_plan_fits_one_search_per_axis_serves_every_seed():
    fits, fitted = plan_fits(_config())
    assert sorted(f["knob"] for f in fits.values()) == ["batch_size", "fanouts"]
    assert len(fitted) == 4 and {run["fit"] for run in fitted.values()} == set(fits)
    assert all(f["spec"]["epochs"] == 0 and f["spec"]["steps"] == 2 for f in fits.values())
    runs = expand_experiments(_config())  # the fitted runs are planned apart: cherry at its own K only
    assert [(r["system"], r["axis"], r["seed"]) for r in runs] == [("cherry", "own_k", 0), ("cherry", "own_k", 1)]


def test_plan_fits_refuses_all_neighbour_fanouts():
    with pytest.raises(ConfigError, match="dgl: fanouts \\[-1, 10\\]"):
        plan_fits(_config(run={"fanouts": [-1, 10]}))
