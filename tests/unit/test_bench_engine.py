"""`cherry bench engine` on synth-tiny: one row per (aggregator, K), ratios against K = 1, and on a CPU
the timed steps run without the tensor tracker (its per-op dispatch is an emulation cost that grows with
K) while the estimator's error still comes from a tracked pass."""
from __future__ import annotations

import json

import cherry.execution as execution
from cherry.cli import main


def test_bench_engine_rows_and_untracked_timing(tmp_path, synth_tiny, data_root, monkeypatch):
    trainers = []  # (timed: has a probe, tracked: has a memory) of every Trainer the benchmark builds
    real = execution.Trainer

    class RecordingTrainer(real):
        def __init__(self, dataset, spec, memory=None, probe=None, **kwargs):
            trainers.append((probe is not None, memory is not None))
            super().__init__(dataset, spec, memory=memory, probe=probe, **kwargs)

    monkeypatch.setattr(execution, "Trainer", RecordingTrainer)
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--dataset", "synth-tiny", "--root", str(data_root), "--aggrs", "mean",
                 "--ks", "2,4", "--steps", "2", "--warmup", "1", "--batch-size", "256", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["aggr"], r["k"]) for r in rows] == [("mean", 1), ("mean", 2), ("mean", 4)]
    assert rows[0]["ratio_to_k1"] == 1.0
    for r in rows:
        assert r["step_s"] > 0 and abs(r["ratio_to_k1"] - r["step_s"] / rows[0]["step_s"]) < 1e-12
        assert r["estimator_median_rel_error"] is not None  # from the tracked pass
        assert r["redundancy_input"] >= 1.0
    # per configuration: one timed pass without the tracker, then one tracked pass without a probe
    assert trainers == [(True, False), (False, True)] * 3
