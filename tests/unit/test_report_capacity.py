"""The report's reading of memory-wall searches and dataset sizes, and time per epoch."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from cherry.report import tables as t


def search_record(system: str, largest, oom, capped: bool, status: str = "ok") -> dict:
    spec = {"dataset": "synth-tiny", "model": "sage", "aggr": "lstm", "num_layers": 2, "hidden": 16,
            "fanouts": [5, 10], "batch_size": 128}
    probes = [{"batch_size": 128, "status": "ok", "num_microbatches_max": 2, "peak_tracked_bytes": 1000},
              {"batch_size": largest, "status": "ok", "num_microbatches_max": 5, "peak_tracked_bytes": 9000}]
    return {"search_id": f"memory_wall-{system}", "status": status, "reason": None, "spec": spec, "system": system,
            "num_microbatches_requested": "auto", "device_memory_bytes": 12 * 2**20, "training_set_size": 1200,
            "probes": probes, "largest_fit_batch": largest, "smallest_oom_batch": oom,
            "capped_at_training_set": capped, "search_wall_s": 3.0, "git_sha": "abc", "device_name": "cpu"}


def test_searches_become_rows_with_the_k_at_the_largest_batch(tmp_path):
    paths = []
    for system, largest, oom, capped in (("cherry", 1200, None, True), ("full", 300, 320, False)):
        path = tmp_path / f"{system}.json"
        path.write_text(json.dumps(search_record(system, largest, oom, capped)))
        paths.append(path)
    rows = t.load_searches(paths)
    assert list(rows["system"]) == ["cherry", "full"] and list(rows["k_at_largest"]) == [5, 5]
    assert rows.iloc[0]["case"] == "synth-tiny sage-lstm L2 H16 fanouts 5,10"
    assert bool(rows.iloc[0]["capped_at_training_set"]) and rows.iloc[1]["smallest_oom_batch"] == 320
    assert t.load_searches([]).columns.tolist() == t.SEARCH_COLUMNS


def test_bad_search_or_info_files_give_one_line_errors(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"status": "ok"}))
    with pytest.raises(ValueError, match="is not a search record") as info:
        t.load_searches([tmp_path / "run.json"])
    assert "\n" not in str(info.value)
    (tmp_path / "info.json").write_text(json.dumps({"name": "x"}))
    with pytest.raises(ValueError, match="split_sizes.train"):
        t.steps_per_epoch([tmp_path / "info.json"])
    (tmp_path / "good.json").write_text(json.dumps({"name": "synth-tiny", "split_sizes": {"train": 1200}}))
    assert t.steps_per_epoch([tmp_path / "good.json"]) == {"synth-tiny": 1200}


def test_time_per_epoch_is_the_median_step_times_the_steps_of_an_epoch():
    rows = pd.DataFrame([{"status": "ok", "warmup_steps": 1, "step_times_s": [9.0, 1.0, 2.0, 3.0], "batch_size": 500},
                         {"status": "oom", "warmup_steps": 0, "step_times_s": [], "batch_size": 500}])
    median, low, high = t.epoch_time_stats(rows, 1200)
    assert median == pytest.approx(2.0 * math.ceil(1200 / 500)) and low < median < high
    assert t.epoch_time_stats(rows[rows["status"] == "oom"], 1200) is None


def test_the_report_says_who_stopped_at_one_seed_and_who_recomputed(tmp_path):
    from cherry.report.summary import wall_section
    from cherry.report.wall_figures import draw_memory_wall

    paths = []
    for system, largest, oom in (("cherry", 1200, None), ("naive", 32, 64), ("full", 4, 8)):
        record = search_record(system, largest, oom, capped=largest == 1200)
        record["probes"] = [{"batch_size": 4, "status": "ok", "num_microbatches_max": 1, "peak_tracked_bytes": 10,
                             "recompute_steps": int(system == "cherry")},
                            {"batch_size": largest, "status": "ok", "num_microbatches_max": 1,
                             "peak_tracked_bytes": 20, "recompute_steps": int(system == "cherry")}]
        if oom is not None:  # naive failed at one seed per micro-batch; full (K=1) at a K of 1 for 8 seeds
            record["probes"].append({"batch_size": oom, "status": "oom", "num_microbatches_max": None,
                                     "peak_tracked_bytes": None, "oom_single_seed": system == "naive"})
        path = tmp_path / f"{system}.json"
        path.write_text(json.dumps(record))
        paths.append(path)
    rows = t.load_searches(paths)
    assert list(rows["wall_reason"]) == ["training_set", "single_seed", "capacity"]
    assert list(rows["recompute_at_largest"]) == [True, False, False]
    text = "\n".join(wall_section(rows))
    verdict = next(line for line in text.splitlines() if line.startswith("- synth-tiny"))
    assert "stopped because one seed did not fit: naive (K=auto) up to 32" in verdict
    assert "went on with recomputation: cherry (K=auto) up to 1,200" in verdict
    assert "ran out of memory at their own K: full up to 4" in verdict and "training set" not in verdict
    assert "one seed does not fit" in text and "reached the training set; with recomputation" in text
    fig = draw_memory_wall(rows)
    texts = [x.get_text() for ax in fig.axes for x in ax.texts]
    assert any("stopped: one seed does not fit" in s and s.strip().startswith("32") for s in texts)
    assert any("training set" in s and "recomputation" in s for s in texts)
