"""Parity on a real graph: Amazon-Photo (Shchur et al.'s split, 20/30 per class), GCN and GAT.

Cherry at K = 1 and at automatic K under a tight emulated capacity (half the K = 1 step's estimated
peak) record the same loss at every step (to rounding for 20 steps, within 2% to the 60th), the
micro-batched run stays within its capacity, and both test accuracies are within 2 points of stock
DGL (its own NeighborSampler and ``dgl.nn`` layers, `baselines.dgl`) trained the same way: the same model, batches, steps, learning rate and evaluator.
Stock DGL samples on one OpenMP thread here: seeded, its draws are then the same run to run (with
several threads they race), so the comparison is a fixed number, not a draw.
All three run in this process through the benchmark runner (`cherry.bench.runner.execute`), the code
every workflow run goes through. About 30 s of CPU (90 s of wall time on a loaded 2-core machine).
"""
from __future__ import annotations

import contextlib
import json

import pytest

from tests.real_graphs import GRAPHS, needs_graph

# Both converge in 60 single-batch steps at this rate (hidden 32 GAT does not: 5 points from DGL). Sampled fanouts,
# so DGL's draws differ from Cherry's: accuracy agrees within noise, not to the bit.
RUNS = {"gcn": {"hidden": 64, "steps": 60}, "gat": {"hidden": 64, "steps": 60}}
COMMON = {"fanouts": [10, 10], "batch_size": 160, "epochs": 0, "warmup": 0, "evaluate": True, "lr": 0.005,
          "timeout_s": 240}


def _record(tmp_path, name: str, **settings) -> dict:
    from cherry.bench.runner import execute
    from cherry.spec import make_spec

    spec = make_spec(dataset=str(GRAPHS / "amazon_photo.npz"), root=str(tmp_path / "data"), **COMMON, **settings)
    out = tmp_path / f"{name}.json"
    assert execute(spec, str(out), lambda line: None) == 0
    record = json.loads(out.read_text())
    assert record["status"] == "ok", (name, record["reason"])
    return record


@contextlib.contextmanager
def _one_dgl_thread():
    """DGL's sampler on one OpenMP thread (reproducible when seeded), restored afterwards."""
    from cherry.compat.dgl import import_dgl

    dgl = import_dgl()
    before = dgl.utils.get_num_threads()
    dgl.utils.set_num_threads(1)
    try:
        yield
    finally:
        dgl.utils.set_num_threads(before)


@pytest.mark.slow
@needs_graph("amazon_photo.npz")
@pytest.mark.parametrize("model", sorted(RUNS))
def test_amazon_photo_auto_k_under_a_cap_equals_k1_and_matches_stock_dgl(tmp_path, model):
    from cherry.compat import dgl_available

    settings = {"model": model, **RUNS[model]}
    k1 = _record(tmp_path, "k1", system="cherry", num_microbatches=1, **settings)
    capacity_bytes = k1["estimated_peak_bytes"] // 2
    auto = _record(tmp_path, "auto", system="cherry", num_microbatches="auto", device_memory_bytes=capacity_bytes,
                   **settings)
    # the cap binds: the batch is split, or (GCN: its first layer narrows 745 features) streamed
    assert auto["num_microbatches_max"] >= 2 or auto["streamed_steps"] > 0, auto["num_microbatches_max"]
    assert auto["peak_tracked_bytes"] <= capacity_bytes
    # the same gradient up to float rounding: equal losses while the weights agree to rounding, and
    # within 2% to the end (GAT: 1.5% at step 60), where Adam has compounded 60 steps of rounding differences
    assert auto["step_losses"][:20] == pytest.approx(k1["step_losses"][:20], rel=1e-4)
    assert auto["step_losses"] == pytest.approx(k1["step_losses"], rel=2e-2)
    assert abs(auto["test_acc"] - k1["test_acc"]) <= 0.005, (auto["test_acc"], k1["test_acc"])
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(f"stock DGL is not importable here: {reason}")
    with _one_dgl_thread():
        stock = _record(tmp_path, "dgl", system="dgl", **settings)
    assert stock["test_acc"] > 0.8, stock["test_acc"]  # it learned: 8 classes, the largest a quarter
    # seeds 0, 1, 2 on one thread: DGL 0.908/0.903/0.908 (GCN), 0.885/0.884/0.877 (GAT); Cherry at K = 1
    # 0.901/0.896/0.908, 0.884/0.875/0.872: at most 0.9 points apart, each DGL run the same twice
    for record in (k1, auto):
        assert abs(record["test_acc"] - stock["test_acc"]) <= 0.02, (record["test_acc"], stock["test_acc"])
