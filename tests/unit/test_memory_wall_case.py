"""The memory wall's case where K alone stops, at a tiny size: real searches.

A 4-layer all-neighbour GAT on synth-tiny (hidden 8, 2 heads): the hops reach most of the graph from
any seed, so a micro-batch of one seed is almost as large as the whole batch (with the fused attention
aggregation, naive's whole batch of 16 at K = 1 peaks at 2.52 MB, one seed alone at 1.50 MB). Under
1.9 MiB (measured with the fused GAT: naive's 8-seed step peaks at 1.95 MB at K = 6 and one of the
next 8 seeds alone does not fit; cherry recomputing peaks at 1.88 MB at K = 1) no K fits a batch of 16
for a system that only splits, while cherry with recomputation trains it. The same case at full size is
in config/config.yaml.
"""
from __future__ import annotations

import pytest

from cherry.bench.capacity_run import search_spec
from cherry.spec import make_spec

CAPACITY = "1.9MiB"
LIMIT = 16  # the search's training set: the first 16 seeds of the run's batch order


def _search(data_root, system: str, **options):
    spec = make_spec(system=system, dataset="synth-tiny", root=str(data_root), model="gat", num_layers=4,
                     fanouts=[-1, -1, -1, -1], hidden=8, heads=2, batch_size=LIMIT, num_microbatches="auto",
                     device_memory_bytes=CAPACITY, warmup=0, steps=1, epochs=0, evaluate=False, timeout_s=60,
                     experiment="memory_wall", options=options)
    return search_spec(spec, limit=LIMIT)


def test_k_alone_stops_at_one_seed_and_recomputation_goes_on(synth_tiny, data_root):
    naive = _search(data_root, "naive")
    assert naive["status"] == "ok" and naive["wall_reason"] == "single_seed"
    failed = [p for p in naive["probes"] if p["status"] == "oom"]
    assert failed and all(p["oom_single_seed"] for p in failed)  # auto K tried up to one seed each
    assert "one seed per micro-batch" in failed[0]["reason"]

    cherry = _search(data_root, "cherry")  # options.recompute: auto
    assert cherry["status"] == "ok" and cherry["largest_fit_batch"] == LIMIT
    assert cherry["wall_reason"] == "training_set" and cherry["recompute_at_largest"]
    assert naive["largest_fit_batch"] is None or naive["largest_fit_batch"] < cherry["largest_fit_batch"]

    # without recomputation cherry stops where the baseline does, for the same reason
    alone = _search(data_root, "cherry", recompute="off")
    assert alone["wall_reason"] == "single_seed" and not alone["recompute_at_largest"]
    assert alone["largest_fit_batch"] is None or alone["largest_fit_batch"] < LIMIT


@pytest.mark.parametrize("k, single", [(16, True), (2, False)])
def test_a_fixed_k_failure_is_of_one_seed_only_at_one_seed_per_microbatch(synth_tiny, data_root, tmp_path, k, single):
    from cherry.bench.runner import execute
    from cherry.io import read_json

    spec = make_spec(system="naive", dataset="synth-tiny", root=str(data_root), model="gat", num_layers=4,
                     fanouts=[-1, -1, -1, -1], hidden=8, heads=2, batch_size=16, num_microbatches=k,
                     device_memory_bytes="2MiB", warmup=0, steps=1, epochs=0, evaluate=False)
    execute(spec, str(tmp_path / "r.json"), lambda line: None)
    record = read_json(str(tmp_path / "r.json"), "record")
    assert record["status"] == "oom" and record["oom_single_seed"] is single
