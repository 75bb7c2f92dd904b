"""Measurement: exclusive phase timing, statistics without warm-up, run-level peaks, records, timeouts."""
from __future__ import annotations

import time

import pytest

from cherry.bench.measure import RunPeakMemory, StepTiming, TimingProbe, summarize
from cherry.bench.record import RunMeasurements, build_record, record_columns, validate_record
from cherry.bench.runner import RunTimeout, _Deadline
from cherry.systems.contract import StepOutcome
from cherry.probe import OTHER, PHASES, TIMED_PHASES
from cherry.sampling.loader import epoch_seed_batches, step_seed_batches
from cherry.spec import resolve_budget_bytes, spec_from_dict

SPEC = spec_from_dict({"system": "cherry", "dataset": "synth-tiny", "fanouts": [5, 10], "batch_size": 64,
                       "warmup": 2, "steps": 3, "num_microbatches": 1})
PROVENANCE = {"git_sha": None, "git_dirty": None, "python_version": "3", "torch_version": "2", "cuda_version": None,
              "dgl_version": None, "pyg_version": None, "ogb_version": None, "device_name": "cpu",
              "device_total_bytes": 1, "native_ext_status": None, "native_ext_used": None, "allocator_conf": None,
              "torch_num_threads": 1, "hostname": "h", "timestamp_utc": "2025-01-01T00:00:00+00:00"}


def test_summarize_excludes_warmup_and_interpolates():
    stats = summarize([100.0, 50.0, 1.0, 2.0, 3.0, 4.0, 5.0], warmup=2)
    assert stats == {"median": 3.0, "p10": 1.4, "p90": 4.6, "mean": 3.0}
    assert summarize([1.0], warmup=1) == {"median": None, "p10": None, "p90": None, "mean": None}
    with pytest.raises(ValueError, match="warmup"):
        summarize([1.0], warmup=-1)


def test_phases_are_exclusive_and_bounded_by_the_step():
    probe = TimingProbe("cpu")
    with probe.phase("sample"):  # outside a step: not timed, not an error
        pass
    probe.start_step()
    with probe.phase("plan"):
        time.sleep(0.02)
        with probe.phase("slice"):
            time.sleep(0.03)
        time.sleep(0.01)
    timing = probe.end_step()
    phases = timing.phases_s
    assert set(phases) == set(PHASES) | {OTHER} == set(TIMED_PHASES)
    assert "slice" in PHASES and OTHER not in PHASES
    assert 0.025 <= phases["slice"] < 0.045
    assert 0.025 <= phases["plan"] < 0.045  # its own 0.03 s, not the nested slice
    assert abs(sum(phases.values()) - timing.total_s) < 1e-6
    with pytest.raises(ValueError, match="phase 'bogus'"):
        with probe.phase("bogus"):
            pass
    with pytest.raises(RuntimeError):
        probe.end_step()


class _FakeMemory:
    capacity_bytes = None

    def __init__(self):
        self.peak = 0

    def peak_bytes(self):
        return self.peak

    def peak_reserved_bytes(self):
        return None

    def reset_peak(self):
        self.peak = 0


def test_run_peak_survives_the_engines_resets():
    raw = _FakeMemory()
    memory = RunPeakMemory(raw)
    raw.peak = 500
    memory.reset_peak()  # what an executor does before each micro-batch
    raw.peak = 200
    assert raw.peak_bytes() == 200 and memory.run_peak_bytes() == 500
    assert memory.capacity_bytes is None and memory.run_peak_reserved_bytes() is None


def _measurements(**changes) -> RunMeasurements:
    timings = tuple(StepTiming(t, {**{p: 0.0 for p in PHASES}, "forward_backward": t / 2, OTHER: t / 2})
                    for t in (9.0, 8.0, 1.0, 2.0, 3.0))
    # the warm-up steps' estimates are far off (an uncalibrated model): the record leaves them out
    outcomes = tuple(StepOutcome(loss=float(i), num_microbatches=k, redundancy=(1.0 + k / 10, 1.0),
                                 estimated_peak_bytes=100 * k, measured_peak_bytes=measured)
                     for i, (k, measured) in enumerate(zip((8, 8, 2, 4, 2), (50, 50, 250, 500, 200))))
    values = dict(status="ok", warmup_steps=2, step_timings=timings, step_outcomes=outcomes,
                  estimator_errors=(0.3, 0.1, 0.2), final_accuracy={"train": 0.5, "valid": 0.4, "test": float("nan")})
    values.update(changes)
    return RunMeasurements(**values)


def test_record_statistics_exclude_warmup_and_keep_raw_steps():
    record = build_record(SPEC, _measurements(), PROVENANCE)
    validate_record(record)
    assert list(record) == list(record_columns())
    assert record["step_times_s"] == [9.0, 8.0, 1.0, 2.0, 3.0] and record["warmup_steps"] == 2
    assert record["step_time_median_s"] == 2.0 and record["step_time_mean_s"] == 2.0
    assert record["phase_forward_backward_median_s"] == 1.0 and record["phase_sample_median_s"] == 0.0
    assert record["num_microbatches_median"] == 2 and record["num_microbatches_max"] == 4
    assert record["redundancy_per_layer"] == pytest.approx([1.2 + 2 / 30, 1.0])
    assert record["redundancy_input"] == pytest.approx(1.2 + 2 / 30)
    assert record["estimated_peak_bytes"] == 400 and record["estimator_median_rel_error"] == 0.2
    assert record["estimator_step_rel_error"] == pytest.approx(0.2)  # median of 0.2, 0.2, 0
    assert record["final_loss"] == 4.0 and record["test_acc"] is None  # NaN is not JSON
    assert record["fanouts"] == "5,10" and record["num_microbatches_requested"] == "1"
    assert record["num_layers"] == 2 and record["experiment"] == "" and record["axis"] is None
    assert record["run_id"].startswith("run-cherry-synth-tiny-b64-k1-r0-")
    auto = build_record(SPEC.replace(num_microbatches="auto"), _measurements(), PROVENANCE)
    assert auto["num_microbatches_requested"] == "auto"


def test_the_record_counts_streamed_steps_of_the_measured_steps():
    outcomes = tuple(StepOutcome(loss=1.0, num_microbatches=1, streamed=s) for s in (True, False, True, True, False))
    record = build_record(SPEC, _measurements(step_outcomes=outcomes), PROVENANCE)
    validate_record(record)
    assert record["streamed_steps"] == 2  # of the measured three (two warm-up steps): True, True, False
    assert build_record(SPEC, _measurements(), PROVENANCE)["streamed_steps"] is None  # a system that cannot say


def test_records_of_failed_runs_validate_and_bad_records_are_named():
    empty = build_record(SPEC, RunMeasurements(status="oom", reason="out of memory"), PROVENANCE)
    validate_record(empty)
    assert empty["step_time_median_s"] is None and empty["steps_completed"] == 0
    with pytest.raises(ValueError, match="status"):
        RunMeasurements(status="crashed")
    with pytest.raises(ValueError, match="column status"):
        validate_record({**empty, "status": "crashed"})
    with pytest.raises(ValueError, match="extra"):
        validate_record({**empty, "extra": 1})


def test_deadline_interrupts_a_long_step_by_signal():
    deadline = _Deadline(0.05)
    deadline.arm()
    try:
        with pytest.raises(RunTimeout, match="timeout_s=0.05"):
            time.sleep(2)  # a step that never returns on its own
    finally:
        deadline.disarm()
    with pytest.raises(RunTimeout):
        deadline.check()


def test_batches_drop_a_partial_tail_in_steps_mode_only():
    import torch

    train = torch.arange(10)
    assert [b.numel() for b in epoch_seed_batches(train, 4, 0, 0, drop_last=True)] == [4, 4]
    assert [b.numel() for b in epoch_seed_batches(train, 4, 0, 0, drop_last=False)] == [4, 4, 2]
    assert [b.numel() for b in epoch_seed_batches(train, 32, 0, 0, drop_last=True)] == [10]
    # steps mode (epochs = 0) drops each epoch's tail; epochs mode keeps it
    assert [b.numel() for b in step_seed_batches(train, 4, 0, 5)] == [4, 4, 4, 4, 4]
    assert [b.numel() for b in step_seed_batches(train, 32, 0, 2)] == [10, 10]


def test_budget_defaults_to_ninety_percent_of_device_memory():
    assert resolve_budget_bytes(SPEC) is None
    spec = spec_from_dict({**SPEC.to_dict(), "device_memory_bytes": 1000})
    assert resolve_budget_bytes(spec) == 900
    spec = spec_from_dict({**SPEC.to_dict(), "device_memory_bytes": 1000, "budget_bytes": 500})
    assert resolve_budget_bytes(spec) == 500
