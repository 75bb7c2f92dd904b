"""`make gpu-check`'s Python paths with only the GPU machine's packages importable.

Each step runs in a subprocess under the allow-list of tests/hidden_packages (the standard library, the
project and the distributions of gpu_machine_packages.txt; no dgl, ogb, pymetis, jsonschema or
snakemake): the GPU tests are all collected, a generated dataset is prepared and loaded, and the engine
benchmark, the sync profile, the benchmark runner (cherry, and Betty reported as skipped) and
`cherry verify` run on the CPU, with the breadth-first ordering in place of METIS, said so in their
outputs. (tests/unit/test_gpu_check.py runs the whole check the same way.)
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "tests" / "hidden_packages"
GPU_MACHINE_PACKAGES = HOOK / "gpu_machine_packages.txt"  # its full package list (docs/gpu.md)


def run(args, tmp_path, hide=True, timeout_s=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(([str(HOOK)] if hide else []) + [str(REPO)]),
           "CHERRY_ONLY_PACKAGES": str(GPU_MACHINE_PACKAGES) if hide else "", "CHERRY_DATA": str(tmp_path / "data")}
    env.pop("CHERRY_HIDE_PACKAGES", None)
    proc = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


def collected(output: str) -> int:
    found = re.search(r"(\d+)(?:/\d+)? tests? collected", output)
    assert found, output[-2000:]
    return int(found.group(1))


DRIVER = """
import importlib, sys
for name in ("dgl", "ogb", "pymetis", "jsonschema", "referencing", "snakemake", "ogb.nodeproppred"):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        continue
    raise SystemExit(name + " imported: not refused")
from benchmarks import profile_syncs
from cherry.bench import run
from cherry.cli import main
from cherry.data import load_dataset

assert load_dataset("synth-tiny").graph.num_nodes > 0  # prepared from OGB's CSV layout without OGB
out, small = sys.argv[1], ["--dataset", "synth-tiny", "--device", "cpu", "--batch-size", "256", "--fanouts", "5,10"]
assert main(["bench", "engine", *small, "--aggrs", "mean", "--ks", "2", "--steps", "1", "--warmup", "0",
             "--json", out + "/engine.json"]) == 0
assert profile_syncs.main([*small, "--ks", "1,2", "--steps", "1", "--json", out + "/syncs.json"]) == 0
for system in ("cherry", "betty"):
    assert run.main(["--spec", out + "/" + system + ".spec.json", "--out", out + "/" + system + ".json"]) == 0
assert main(["verify", *small, "--aggr", "mean", "--hidden", "16", "--microbatches", "2"]) == 0
"""


@pytest.mark.slow
def test_every_gpu_test_is_collected_without_the_packages(tmp_path):
    args = ["-m", "pytest", "-m", "gpu", "--collect-only", "-q", "-p", "no:cacheprovider", str(REPO / "tests")]
    without = run(args, tmp_path)
    assert "error" not in without.lower().split("collected")[-1], without[-2000:]
    assert collected(without) == collected(run(args, tmp_path, hide=False)) > 0


@pytest.mark.slow
def test_the_checks_dataset_sections_run_without_the_packages(tmp_path):
    """The sections of workflow/scripts/gpu_check.sh after the build and the GPU tests, on the CPU and
    synth-tiny, in one process (the hidden imports fail the same way in each)."""
    out = tmp_path / "out"
    out.mkdir()
    for system in ("cherry", "betty"):
        spec = {"system": system, "dataset": "synth-tiny", "fanouts": [5, 10], "batch_size": 256,
                "num_microbatches": 2, "device": "cpu", "epochs": 0, "warmup": 0, "steps": 1, "evaluate": False}
        (out / f"{system}.spec.json").write_text(json.dumps(spec))
    text = run(["-c", DRIVER, str(out)], tmp_path)
    assert "ordering bfs" in text  # the engine benchmark says which ordering it used
    engine = json.loads((out / "engine.json").read_text())
    assert engine["ordering"] == "bfs" and [r["k"] for r in engine["rows"]] == [1, 2]
    assert json.loads((out / "syncs.json").read_text())
    cherry = json.loads((out / "cherry.json").read_text())
    assert cherry["status"] == "ok" and cherry["ordering"] == "bfs", cherry["reason"]
    betty = json.loads((out / "betty.json").read_text())
    assert betty["status"] == "skipped" and "pymetis" in betty["reason"]
