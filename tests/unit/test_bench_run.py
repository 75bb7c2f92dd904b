"""The runner end to end on synth-tiny: ok / oom / timeout records written by `python -m cherry.bench.run`
in a fresh process each, records that validate and round-trip through the aggregate table."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from cherry.bench.aggregate import collect_records, main as aggregate_main, read_runs_csv
from cherry.bench.record import validate_record
from cherry.planning.ordering import resolve_ordering

REPO = Path(__file__).resolve().parents[2]
# epochs 0: a run of warmup + steps steps (the schema's default is now one epoch)
TINY = {"system": "cherry", "dataset": "synth-tiny", "hidden": 16, "fanouts": [5, 10], "batch_size": 256,
        "timeout_s": 120, "epochs": 0}


@pytest.fixture(scope="module")
def root(synth_tiny, data_root) -> str:
    return str(data_root)  # synth-tiny prepared there once; each run only reads it


def _run(tmp_path: Path, name: str, **spec) -> tuple[subprocess.CompletedProcess, dict | None]:
    spec_path, out = tmp_path / f"{name}.spec.json", tmp_path / f"{name}.record.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, OMP_NUM_THREADS="1")  # a shared 2-core machine: oversubscription costs 100x
    proc = subprocess.run([sys.executable, "-m", "cherry.bench.run", "--spec", str(spec_path), "--out", str(out)],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    record = json.loads(out.read_text()) if out.exists() else None
    return proc, record


@pytest.fixture(scope="module")
def records(root, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runs")
    ok = _run(tmp, "ok", **TINY, root=root, num_microbatches=2, warmup=2, steps=3, experiment="t", axis="a",
              repeat=1)
    # 256 KiB holds the model but not one 256-seed batch's activations; reference ops (native_ops off)
    oom = _run(tmp, "oom", **TINY, root=root, num_microbatches=1, device_memory_bytes="256KiB",
               options={"native_ops": False})
    timeout = _run(tmp, "timeout", **{**TINY, "timeout_s": 3}, root=root, steps=100000, evaluate=False,
                   options={"native_ops": False, "pipeline": False})
    return {"ok": ok, "oom": oom, "timeout": timeout, "dir": tmp}


def test_ok_run_writes_a_valid_record_with_warmup_excluded(records):
    proc, record = records["ok"]
    assert proc.returncode == 0, proc.stderr
    validate_record(record)
    assert record["status"] == "ok" and record["reason"] is None
    assert record["system"] == "cherry" and record["fanouts"] == "5,10" and record["experiment"] == "t"
    assert record["axis"] == "a" and record["run_id"].startswith("t.a-cherry-synth-tiny-b256-k2-r1-")
    assert record["num_layers"] == 2 and record["num_microbatches_requested"] == "2"
    assert record["steps_completed"] == 5 and record["warmup_steps"] == 2 and len(record["step_times_s"]) == 5
    assert record["step_time_median_s"] == pytest.approx(statistics.median(record["step_times_s"][2:]))
    assert record["phase_forward_backward_median_s"] > 0 and record["phase_sample_median_s"] > 0
    assert record["num_microbatches_max"] == 2 and len(record["redundancy_per_layer"]) == 2
    assert record["redundancy_input"] >= 1.0
    assert record["peak_tracked_bytes"] > 0 and record["process_peak_rss_bytes"] > 0
    assert record["nvml_peak_bytes"] is None  # no GPU here
    assert record["construction"] == "host"  # the CPU: blocks are built where they are used
    assert record["ordering"] == resolve_ordering("metis")  # K = 2 orders seeds (bfs without pymetis)
    # no capacity on the CPU: no cache, so every gathered row is moved (staged once per mini-batch)
    assert record["feature_cache_mode"] == "none" and record["feature_cache_hit_rate"] == 0.0
    moved = record["feature_h2d_bytes_steps"]
    assert len(moved) == 5 and all(b > 0 for b in moved)
    assert record["feature_h2d_bytes_per_step_mean"] == pytest.approx(statistics.fmean(moved[2:]))
    assert record["estimated_peak_bytes"] > 0 and record["estimator_median_rel_error"] is not None
    assert 0.0 <= record["valid_acc"] <= 1.0 and len(record["step_losses"]) == 5
    assert "step 5/5" in proc.stderr  # progress on stderr


def test_provenance_fields_are_present(records):
    record = records["ok"][1]
    for key in ("python_version", "torch_version", "device_name", "hostname", "timestamp_utc",
                "native_ext_status"):
        assert record[key], key
    assert record["device_total_bytes"] > 0 and record["torch_num_threads"] == 1
    if record["git_sha"] is not None:  # git present: a full sha and a dirty flag
        assert len(record["git_sha"]) == 40 and isinstance(record["git_dirty"], bool)


def test_too_small_emulated_capacity_is_an_oom_result(records):
    proc, record = records["oom"]
    assert proc.returncode == 0, proc.stderr
    validate_record(record)
    assert record["status"] == "oom" and "memory" in record["reason"].lower()
    assert record["device_memory_bytes"] == 256 * 1024 and record["budget_bytes"] == 256 * 1024 - 26214
    assert record["native_ext_status"] == "disabled by CHERRY_NO_EXT"  # native_ops: false took effect


def test_exceeding_timeout_is_a_timeout_result(records):
    proc, record = records["timeout"]
    assert proc.returncode == 0, proc.stderr
    validate_record(record)
    assert record["status"] == "timeout" and "timeout_s=3 s" in record["reason"]
    assert record["steps_completed"] < 100000 + 2
    assert record["wall_s"] < 30


def test_a_timed_out_run_completed_steps_before_the_timeout(records):
    assert 0 < records["timeout"][1]["steps_completed"] < 100000 + 2


def test_records_round_trip_through_the_aggregate_table(records, tmp_path):
    paths = [records["dir"] / f"{name}.record.json" for name in ("ok", "oom", "timeout")]
    frame = collect_records(paths)
    assert list(frame["status"]) == ["ok", "oom", "timeout"]
    csv, parquet = tmp_path / "runs.csv", tmp_path / "runs.parquet"
    assert aggregate_main(["--out-csv", str(csv), "--out-parquet", str(parquet), *map(str, paths)]) == 0
    for table in (read_runs_csv(csv), pd.read_parquet(parquet)):
        assert list(table.columns) == list(frame.columns)
        assert list(table["step_times_s"][0]) == pytest.approx(frame["step_times_s"][0])
        assert list(table["redundancy_per_layer"][0]) == pytest.approx(frame["redundancy_per_layer"][0])
        assert table["run_id"].tolist() == frame["run_id"].tolist()
        assert table["experiment"][0] == frame["experiment"][0] == "t" and table["axis"][0] == "a"
        assert table["peak_tracked_bytes"][0] == frame["peak_tracked_bytes"][0]


def test_aggregate_names_a_bad_record(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"status": "ok"}))
    assert aggregate_main(["--out-csv", str(tmp_path / "x.csv"), str(bad)]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_full_baseline_and_an_error_in_process(root, tmp_path, monkeypatch):
    """The `full` baseline (when present) through the same runner; an unknown option is now rejected
    by the spec (naming it, one line), and an error inside the run fails with exit 1 and one line."""
    import cherry.systems as systems
    from cherry.bench.runner import execute
    from cherry.systems.contract import System, SystemUnavailable
    from cherry.spec import SpecError, spec_from_dict

    try:
        systems.get_system("full")
    except (ImportError, SystemUnavailable) as exc:
        pytest.skip(f"baselines.full not available: {exc}")
    out = tmp_path / "full.json"
    spec = spec_from_dict({**TINY, "system": "full", "root": root, "warmup": 1, "steps": 2})
    assert execute(spec, str(out), lambda line: None) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "ok", record["reason"]
    assert record["num_microbatches_max"] == 1 and record["steps_completed"] == 3

    with pytest.raises(SpecError) as info:
        spec_from_dict({**TINY, "system": "full", "root": root, "options": {"bogus": 1}, "evaluate": False})
    assert "bogus" in str(info.value) and "\n" not in str(info.value)

    class Broken(System):
        name = "full"

        def __init__(self, *args):
            raise ValueError("bogus option\nsecond line")

        def step(self, batch):
            raise AssertionError("never built")

        evaluate = step

    monkeypatch.setattr(systems, "get_system", lambda name: Broken)
    spec = spec_from_dict({**TINY, "system": "full", "root": root, "evaluate": False})
    assert execute(spec, str(out), lambda line: None) == 1
    record = json.loads(out.read_text())
    validate_record(record)
    assert record["status"] == "error" and "bogus" in record["reason"] and "\n" not in record["reason"]


def test_runs_that_cannot_happen_here_are_skipped_with_a_reason(root, tmp_path, monkeypatch):
    import cherry.systems as systems
    from cherry.bench.runner import execute
    from cherry.systems.contract import System, SystemUnavailable
    from cherry.spec import spec_from_dict

    def run(**changes) -> dict:
        out = tmp_path / "skipped.json"
        assert execute(spec_from_dict({**TINY, "root": root, **changes}), str(out), lambda line: None) == 0
        record = json.loads(out.read_text())
        validate_record(record)
        assert record["status"] == "skipped" and record["steps_completed"] == 0
        return record

    # a micro-batching system that cannot choose K is skipped for "auto" (a whole-batch one takes it as K = 1)
    from baselines.naive import SYSTEM as naive

    monkeypatch.setattr(naive, "accepts_auto_microbatches", False)
    assert "cannot choose K" in run(system="naive", num_microbatches="auto", device_memory_bytes="1MiB")["reason"]
    monkeypatch.undo()
    if not torch.cuda.is_available():
        assert "CUDA is not available" in run(device="cuda")["reason"]

    class Unavailable(System):
        accepts_auto_microbatches = False

        def __init__(self, *args):
            raise SystemUnavailable("no sampling backend (pyg-lib or torch-sparse)")

        def step(self, batch):
            raise AssertionError("a system that is unavailable must never be asked to step")

        evaluate = step

    monkeypatch.setattr(systems, "get_system", lambda name: Unavailable)
    assert run(system="pyg")["reason"] == "no sampling backend (pyg-lib or torch-sparse)"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_run_reports_allocator_and_nvml_peaks(root, tmp_path):
    proc, record = _run(tmp_path, "cuda", **TINY, root=root, device="cuda", num_microbatches="auto",
                        device_memory_bytes="2GiB", warmup=1, steps=3)
    assert proc.returncode == 0, proc.stderr
    validate_record(record)
    assert record["status"] == "ok" and record["cuda_version"]
    assert 0 < record["peak_tracked_bytes"] <= record["peak_reserved_bytes"] <= 2 << 30
    assert record["device_total_bytes"] > 2 << 30
    if record["nvml_peak_bytes"] is not None:  # nvidia-ml-py installed
        assert record["nvml_peak_bytes"] >= record["nvml_baseline_bytes"] > 0
