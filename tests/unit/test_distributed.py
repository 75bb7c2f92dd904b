"""Data-parallel micro-batching on 2 gloo ranks (CPU): exact gradients, equal parameters, per-rank
out-of-memory recovery, and no hang when a rank crashes or stalls.

"Equal gradient" here: the 2-rank job's first-step gradient (each rank micro-batched, then the scaled
all-reduce) against one process's K = 1 gradient of the same logical batch with the same neighbours
(`cherry.execution.distributed_check`), within 1e-5 relative per parameter.
"""
from __future__ import annotations

import json
import time

import pytest
import torch

from cherry.execution.distributed import split_batch_seeds
from cherry.execution.distributed_check import compare_distributed, rank_check
from cherry.launch import RankFailed, World, first_host, launch, world_from_env
from cherry.spec import SpecError, make_spec, run_id


def _spec(data_root, **changes):
    settings = dict(dataset="synth-tiny", root=str(data_root), aggr="mean", hidden=32, fanouts=(5, 10),
                    batch_size=256, nproc=2, num_microbatches=2, evaluate=False)
    settings.update(changes)
    return make_spec(**settings)


def test_split_batch_seeds_partitions_along_the_locality_order():
    seeds = torch.tensor([9, 2, 7, 4, 0, 5, 1], dtype=torch.int64)
    rank_of_node = torch.arange(10, dtype=torch.int64).flip(0)  # node v has rank 9 - v
    shares = [split_batch_seeds(seeds, rank_of_node, r, 3) for r in range(3)]
    assert [s.tolist() for s in shares] == [[9, 7, 5], [4, 2], [1, 0]]
    assert split_batch_seeds(seeds, None, 1, 2).tolist() == [0, 5, 1]  # no ordering: the batch's order
    with pytest.raises(ValueError, match="rank must be"):
        split_batch_seeds(seeds, None, 2, 2)


def test_world_from_env_reads_torchrun_and_srun_and_ignores_a_batch_shell():
    torchrun = {"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "h0", "MASTER_PORT": "1234"}
    assert world_from_env(torchrun) == World(1, 4, 1, "h0", 1234)
    srun = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_LOCALID": "1",
            "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "41"}
    assert world_from_env(srun) == World(3, 4, 1, "gpu07", 29541)
    assert world_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}) is None  # sbatch's shell, no srun step
    assert world_from_env({"RANK": "0", "WORLD_SIZE": "1"}) is None
    assert first_host("a1,b2") == "a1" and first_host("n[1,3-4]") == "n1"
    with pytest.raises(ValueError, match="WORLD_SIZE"):
        world_from_env({"RANK": "0", "WORLD_SIZE": "two"})


def test_nproc_is_a_spec_key_for_cherry_only():
    assert "-n2-" in run_id(make_spec(dataset="synth-tiny", nproc=2))
    assert "-n" not in run_id(make_spec(dataset="synth-tiny")).split("-b")[1].split("-k")[0]
    with pytest.raises(SpecError, match="nproc"):
        make_spec(system="full", dataset="synth-tiny", nproc=2, num_microbatches=1)
    with pytest.raises(SpecError, match="nproc"):
        make_spec(dataset="synth-tiny", nproc=8, batch_size=4)


@pytest.mark.parametrize("aggr", ["mean", "lstm"])
def test_two_ranks_give_the_single_process_gradient_and_equal_parameters(synth_tiny, data_root, aggr):
    check = compare_distributed(_spec(data_root, aggr=aggr), num_steps=3, timeout_s=120)
    assert check.max_rel_diff <= 1e-5, check.differences
    assert check.parameters_identical
    assert all(k == (2, 2, 2) for k in check.rank_microbatches)  # each rank micro-batched its share


def test_two_ranks_with_dropout_give_the_single_process_gradient(synth_tiny, data_root):
    # Masks are a function of (node, layer, step) (cherry.models.dropout), not of the rank: the ranks'
    # micro-batches apply the single process's mask to every node
    from cherry.data import load_dataset
    from cherry.execution.distributed_check import reference_gradients

    spec = _spec(data_root, dropout=0.5)
    check = compare_distributed(spec, num_steps=2, timeout_s=120)
    assert check.max_rel_diff <= 1e-5, check.differences
    assert check.parameters_identical
    dataset = load_dataset("synth-tiny", str(data_root))
    with_dropout, without = reference_gradients(spec, dataset), reference_gradients(spec.replace(dropout=0.0), dataset)
    assert max(float((a - b).abs().max()) for a, b in zip(with_dropout, without)) > 1e-3  # dropout acted


def test_one_rank_out_of_memory_replans_there_without_deadlocking_the_other(synth_tiny, data_root):
    # K from a generous budget is 1 on both ranks; rank 1's emulated device is too small for that (1.5 MiB:
    # the CPU's step LSTM peaks at less than half the bucketed one's, and holds K = 1 in 3 MiB).
    spec = _spec(data_root, aggr="lstm", num_microbatches="auto", budget_bytes="1GiB")
    check = compare_distributed(spec, num_steps=2, rank_device_memory_bytes={1: 3 << 19}, timeout_s=120)
    assert check.rank_oom_recoveries[0] == (0, 0)
    assert check.rank_oom_recoveries[1][0] >= 1 and check.rank_microbatches[1][0] > 1
    assert check.rank_microbatches[0] == (1, 1)
    assert check.max_rel_diff <= 1e-5 and check.parameters_identical


def test_a_crashed_rank_ends_the_job_with_one_error(synth_tiny, data_root):
    started = time.monotonic()
    with pytest.raises(RankFailed, match=r"^rank 1 of 2 failed: RuntimeError: rank 1 crashed on purpose"):
        launch(rank_check, (_spec(data_root).to_dict(), 3, None, 1), 2, timeout_s=60)
    assert time.monotonic() - started < 60


def _stall_on_rank_one() -> int:
    import os

    if os.environ["RANK"] == "1":
        time.sleep(600)
    return 0


def test_a_stalled_rank_ends_the_job_at_the_timeout():
    started = time.monotonic()
    with pytest.raises(RankFailed, match="exceeded timeout_s=8"):
        launch(_stall_on_rank_one, (), 2, timeout_s=8)
    assert time.monotonic() - started < 30


def test_cherry_train_nproc_2_follows_the_single_process_loss_curve(synth_tiny, data_root, tmp_path):
    from cherry.cli import main

    args = ["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "32", "--fanouts", "5,10",
            "--batch-size", "256", "--aggr", "lstm", "--epochs", "1", "--max-steps", "4", "--no-eval", "--quiet"]
    summaries = []
    for extra in ([], ["--nproc", "2"]):
        out = tmp_path / f"summary{len(extra)}.json"
        assert main(args + extra + ["--json", str(out)]) == 0
        summaries.append(json.loads(out.read_text()))
    one, two = summaries
    assert two["nproc"] == 2 and len(two["rank_peak_bytes"]) == 2 and all(two["rank_peak_bytes"])
    assert len(one["step_losses"]) == len(two["step_losses"]) == 4
    assert two["step_losses"] == pytest.approx(one["step_losses"], rel=1e-5)


def test_an_unrecoverable_out_of_memory_on_one_rank_stops_every_rank_together(synth_tiny, data_root):
    spec = _spec(data_root, aggr="lstm", num_microbatches=1)  # a fixed K never re-plans
    with pytest.raises(RankFailed, match=r"MicrobatchOutOfMemoryError: rank 1: .*out of memory"):
        launch(rank_check, (spec.to_dict(), 2, {1: 1 << 20}), 2, timeout_s=60)


def test_rank_records_merge_into_one_with_the_cause_of_a_failure():
    from cherry.bench.ranks import merge_rank_records

    ok = {"status": "ok", "reason": None, "peak_tracked_bytes": 10, "peak_reserved_bytes": None,
          "process_peak_rss_bytes": 5}
    merged = merge_rank_records([ok, {**ok, "peak_tracked_bytes": 30}])
    assert merged["nproc"] == 2 and merged["status"] == "ok"
    assert merged["rank_peak_tracked_bytes"] == [10, 30] and merged["peak_tracked_bytes"] == 30
    assert merged["rank_peak_reserved_bytes"] == [None, None] and merged["peak_reserved_bytes"] is None
    peer = {**ok, "status": "error", "reason": "RuntimeError: Connection closed by peer"}
    cause = {**ok, "status": "oom", "reason": "out of memory"}
    assert merge_rank_records([peer, cause])["reason"] == "rank 1: out of memory"
    assert merge_rank_records([ok, None])["status"] == "error"


def test_a_benchmark_run_of_two_ranks_writes_one_record(synth_tiny, data_root, tmp_path):
    from cherry.bench.record import validate_record
    from cherry.bench.runner import execute

    spec = _spec(data_root, epochs=0, steps=2, warmup=1)
    out = tmp_path / "record.json"
    assert execute(spec, str(out), lambda line: None) == 0
    record = json.loads(out.read_text())
    validate_record(record)
    assert record["status"] == "ok" and record["nproc"] == 2 and record["steps_completed"] == 3
    assert len(record["rank_peak_tracked_bytes"]) == 2 and all(record["rank_peak_tracked_bytes"])
    assert record["num_microbatches_max"] == 2
    assert list(tmp_path.iterdir()) == [out]  # the rank records were merged and removed
