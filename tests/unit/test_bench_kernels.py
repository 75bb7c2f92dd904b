"""`cherry bench kernels` runs end to end at a tiny size: every model, all three systems, its verdicts."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks.kernels import MODELS, TARGET_RATIO, peak_allocated_bytes, verdict
from cherry.cli import main
from cherry.compat import dgl_available
from cherry.compat.pyg import pyg_available
from cherry.report.stats import Ratio

TINY = ["bench", "kernels", "--dataset", "synth-tiny", "--batch-size", "24", "--fanouts", "3,4", "--hidden", "8",
        "--heads", "2", "--repeats", "2", "--steps", "2", "--threads", "1"]
VERDICTS = {"met", "met (within noise)", "NOT met"}


@pytest.mark.skipif(not (dgl_available()[0] and pyg_available()[0]), reason="needs DGL and PyG")
def test_bench_kernels_measures_every_model_and_system(tmp_path, capsys):
    out_json = tmp_path / "kernels.json"
    assert main(TINY + ["--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    assert "K = 1" in printed and "synth-tiny" in printed
    rows = json.loads(out_json.read_text())["rows"]
    assert [r["model"] for r in rows] == list(MODELS)
    for row in rows:
        assert f"| {row['model']} |" in printed
        for system in ("cherry", "dgl", "pyg"):
            assert row[f"{system}_peak_bytes"] > 0 and row[f"{system}_median_fwd_bwd_s"] > 0
        lean = min(row["dgl_peak_bytes"], row["pyg_peak_bytes"])
        assert row["peak_ratio"] == pytest.approx(row["cherry_peak_bytes"] / lean)
        low, high = row["time_interval"]
        assert low <= row["time_ratio"] <= high
        assert row["peak_verdict"] in VERDICTS and row["time_verdict"] in VERDICTS


def test_verdicts_follow_the_target_and_the_interval():
    assert verdict(TARGET_RATIO) == "met" and verdict(TARGET_RATIO + 0.01) == "NOT met"
    assert verdict(Ratio(1.3, 1.05, 1.5, 6, 6, 2, 2)) == "met (within noise)"
    assert verdict(Ratio(1.3, 1.2, 1.5, 6, 6, 2, 2)) == "NOT met"


def test_peak_sees_allocations_and_frees():
    def make_and_drop():
        a = torch.empty(1 << 20, dtype=torch.uint8)
        del a
        torch.empty(1 << 19, dtype=torch.uint8)

    peak = peak_allocated_bytes(make_and_drop, torch.device("cpu"))
    assert (1 << 20) <= peak < (1 << 20) + (1 << 19)


@pytest.mark.parametrize("argv,message", [
    (TINY + ["--models", "sage-mean,gin"], "--models must be a comma-separated subset of"),
    (TINY[:4] + ["--batch-size", "100000"], "--batch-size 100000 exceeds"),
    (TINY + ["--json", "/"], "is a directory"),
])
def test_bench_kernels_bad_input_is_a_one_line_error(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(not pyg_available()[0], reason="needs PyG")
def test_a_library_that_does_not_import_is_left_out(monkeypatch, capsys):
    # as on the GPU machine, which has PyG but no DGL
    monkeypatch.setattr("cherry.compat.dgl_available", lambda: (False, "dgl cannot be imported"))
    assert main(TINY + ["--models", "gcn", "--profile"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| gcn |"))
    assert row.count("n/a") == 2 and "vs pyg" in row and "vs dgl" not in row
    assert "profile of cherry, one fwd+bwd" in out and "profile of pyg" in out and "profile of dgl" not in out
    assert "Self CPU" in out


def test_neither_library_is_a_one_line_error(monkeypatch, capsys):
    monkeypatch.setattr("cherry.compat.dgl_available", lambda: (False, "no"))
    monkeypatch.setattr("cherry.compat.pyg_available", lambda: (False, "no"))
    assert main(TINY) == 2
    assert "neither imports here" in capsys.readouterr().err
