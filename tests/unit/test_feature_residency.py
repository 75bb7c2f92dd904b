"""Feature residency: the planner's (cache, K) choice on toy cost tables, cached and uncached gathers
giving identical features and gradients, and the traffic counters against an independent count."""
from __future__ import annotations

import itertools

import pytest
import torch

from cherry.execution import Trainer
from cherry.execution.feature_cache import FeatureCache
from cherry.planning.residency import (ALL, CACHE, NONE, ResidencyCandidate, ResidencyCosts, ResidencyPlan,
                                       candidate_rows, choose_candidate, choose_residency, hot_order,
                                       price_candidates, rank_of, slot_map)
from cherry.sampling import NeighborSampler
from cherry.spec import make_spec
from tests.unit.graphs import random_dataset


def cand(rows, k, miss, row_bytes=100):
    return ResidencyCandidate(rows, rows * row_bytes, k, None if k is None else 1, miss)


# --- the choice ------------------------------------------------------------------------------------

def test_cheapest_fitting_pair_wins_on_toy_tables():
    table = [cand(0, 2, 10_000), cand(10, 3, 4_000), cand(50, 6, 0), cand(100, None, 0)]
    # transfer dominates: the full cache does not fit, so the 50-row cache (no misses, K=6) wins
    assert choose_candidate(table, ResidencyCosts(h2d_bytes_per_s=1e3, microbatch_overhead_s=1.0)).cache_rows == 50
    # micro-batches dominate: no cache at the smallest K wins
    assert choose_candidate(table, ResidencyCosts(h2d_bytes_per_s=1e6, microbatch_overhead_s=1.0)).cache_rows == 0
    # in between: 10 rows (4 s + 4.5 s) beats 0 (10 s + 3 s) and 50 (0 s + 9 s)
    assert choose_candidate(table, ResidencyCosts(h2d_bytes_per_s=1e3, microbatch_overhead_s=1.5)).cache_rows == 10


def test_choice_is_the_brute_force_minimum_over_random_tables():
    gen = torch.Generator().manual_seed(3)
    for _ in range(200):
        n = int(torch.randint(1, 7, (1,), generator=gen))
        table = []
        for i in range(n):
            k = int(torch.randint(0, 9, (1,), generator=gen))
            table.append(cand(10 * i, k or None, int(torch.randint(0, 50_000, (1,), generator=gen))))
        costs = ResidencyCosts(h2d_bytes_per_s=float(torch.randint(1, 10, (1,), generator=gen)) * 1e3,
                               microbatch_overhead_s=float(torch.rand(1, generator=gen)) * 5)
        best = choose_candidate(table, costs)
        fitting = [c for c in table if c.num_microbatches is not None]
        if not fitting:
            assert best is None
            continue
        cost = {c.cache_rows: c.miss_bytes / costs.h2d_bytes_per_s + c.num_microbatches * costs.microbatch_overhead_s
                for c in fitting}
        assert best.num_microbatches is not None
        assert cost[best.cache_rows] == min(cost.values())
        assert best.cache_rows == min(r for r, v in cost.items() if v == min(cost.values()))  # ties: smaller


def test_pricing_only_what_could_win_chooses_as_pricing_everything():
    """`price_candidates` with costs plans fewer sizes (fit is found by bisection; a size whose misses at
    no cache's K already cost more than the best priced is skipped) and chooses exactly what planning
    every size chooses, on 300 random tables monotone as real ones are (a larger cache: K no smaller,
    fit no easier, misses no more)."""
    gen = torch.Generator().manual_seed(7)
    rows = candidate_rows(640)
    saved = 0
    for _ in range(300):
        n_fit = int(torch.randint(0, len(rows) + 1, (1,), generator=gen))
        ks = sorted(int(k) for k in torch.randint(1, 6, (len(rows),), generator=gen))
        ranks = torch.randint(0, 640, (int(torch.randint(1, 400, (1,), generator=gen)),), generator=gen)
        table = {r * 4: (ks[i], 1) if i < n_fit else None for i, r in enumerate(rows)}
        costs = ResidencyCosts(h2d_bytes_per_s=float(torch.randint(1, 50, (1,), generator=gen)),
                               microbatch_overhead_s=float(torch.rand(1, generator=gen)) * 100)
        calls = []
        plan_k = lambda b: calls.append(b) or table[b]  # noqa: E731
        every = price_candidates(rows, 4, ranks, plan_k)
        n_every = len(calls)
        calls.clear()
        bounded = price_candidates(rows, 4, ranks, plan_k, costs)
        assert len(calls) == len(set(calls)) <= n_every == len(rows)
        saved += n_every - len(calls)
        chosen, reference = choose_candidate(bounded, costs), choose_candidate(every, costs)
        assert (chosen and chosen.cache_rows) == (reference and reference.cache_rows)
        assert [c.miss_bytes for c in bounded] == [c.miss_bytes for c in every]
        assert all(c == e for c, e in zip(bounded, every) if c.priced)
    assert saved > 300  # on average more than one plan saved per table


def test_plan_modes_and_no_fit():
    assert choose_residency([cand(0, None, 5), cand(10, None, 0)], 10, 100, 1000).mode == NONE
    plan = choose_residency([cand(0, 4, 5000), cand(10, 4, 0)], 10, 100, 4000, ResidencyCosts())
    assert (plan.mode, plan.cache_rows, plan.cache_bytes, plan.budget_share) == (ALL, 10, 1000, 0.25)
    plan = choose_residency([cand(0, 1, 5000), cand(5, 1, 10), cand(10, None, 0)], 10, 100, 4000)
    assert (plan.mode, plan.cache_rows, plan.num_microbatches) == (CACHE, 5, 1)
    with pytest.raises(ValueError, match="h2d_bytes_per_s"):
        ResidencyCosts(h2d_bytes_per_s=0)
    with pytest.raises(ValueError, match="microbatch_overhead_s"):
        ResidencyCosts(microbatch_overhead_s=-1.0)


def test_hot_rows_and_slots():
    indptr = torch.tensor([0, 1, 4, 4, 6, 9])  # in-degrees 1, 3, 0, 2, 3
    order = hot_order(indptr)
    assert order.tolist() == [1, 4, 3, 0, 2]
    assert rank_of(order).tolist() == [3, 0, 4, 2, 1]
    assert slot_map(order, 2).tolist() == [-1, 0, -1, -1, 1]
    assert candidate_rows(5, (0, 0.5, 1)) == (0, 2, 5)
    with pytest.raises(ValueError, match="cache_rows"):
        slot_map(order, 6)


# --- a run with a cache ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dataset():
    return random_dataset(600, avg_degree=6, seed=2)


def _trainer(dataset, **options):
    spec = make_spec(dataset="synth-tiny", batch_size=96, fanouts=[4, 4], hidden=16, num_microbatches=2,
                     evaluate=False, epochs=1, options={"ordering": "bfs", "pipeline": False, **options})
    return Trainer(dataset, spec)


def _with_cache(trainer, rows):
    order = hot_order(trainer.dataset.graph.indptr)
    n, f = trainer.dataset.features.shape
    mode = ALL if rows == n else CACHE
    plan = ResidencyPlan(mode, rows, n, f * 4, None, "test")
    cache = FeatureCache(trainer.data.features, plan, order, "cpu")
    trainer.executor.set_feature_cache(cache)
    return set(order[:rows].tolist())


def test_cache_gather_equals_the_table(dataset):
    trainer = _trainer(dataset, feature_cache="none")
    _with_cache(trainer, 150)
    nodes = torch.randperm(600, generator=torch.Generator().manual_seed(0))[:200]
    assert torch.equal(trainer.executor.staging.cache.gather(nodes), dataset.features[nodes])


@pytest.mark.parametrize("rows", [0, 150, 600])
def test_cached_and_uncached_gathers_give_identical_gradients(dataset, rows):
    gen = torch.Generator().manual_seed(5)
    seeds = dataset.train_idx[:96]
    base, cached = _trainer(dataset, feature_cache="none"), _trainer(dataset, feature_cache="none")
    _with_cache(cached, rows)
    blocks = NeighborSampler(dataset.graph, [4, 4]).sample(seeds, gen)
    a = base.executor.accumulate(blocks, dataset.features, dataset.labels)
    b = cached.executor.accumulate(blocks, dataset.features, dataset.labels)
    assert a.loss == b.loss
    for ga, gb in zip(base.executor.gradients(), cached.executor.gradients()):
        assert torch.equal(ga, gb)


@pytest.mark.parametrize("stage", [True, False])
def test_traffic_counters_equal_a_reference_count(dataset, stage):
    """Staged (the GPU rule without a budget): each mini-batch moves its distinct missed input rows once;
    not staged: each micro-batch moves its own missed input rows."""
    trainer = _trainer(dataset, feature_cache="none", stage_features=stage)
    cached = _with_cache(trainer, 100)
    row_bytes = dataset.features.shape[1] * dataset.features.element_size()
    gen = torch.Generator().manual_seed(9)
    sampler = NeighborSampler(dataset.graph, [4, 4])
    total = 0
    for seeds in (dataset.train_idx[:96], dataset.train_idx[96:192]):
        blocks = sampler.sample(seeds, gen)
        plan = trainer.executor.plan(blocks, num_microbatches=2)
        parts = [blocks] if stage else list(plan.microbatches)
        read = sum(p.input_nodes.numel() for p in parts)
        missed = sum(sum(int(v) not in cached for v in p.input_nodes.tolist()) for p in parts)
        stats = trainer.executor.accumulate(blocks, dataset.features, dataset.labels)
        assert (stats.feature_rows_read, stats.feature_rows_missed) == (read, missed)
        assert stats.feature_bytes_moved == missed * row_bytes
        total += stats.feature_bytes_moved
    assert total > 0


def test_a_run_records_its_traffic_and_all_rows_move_nothing(dataset):
    none = _trainer(dataset, feature_cache="none")
    every = _trainer(dataset, feature_cache="all")
    assert (none.residency.mode, every.residency.mode) == (NONE, ALL)
    a, b = none.run_epoch(0), every.run_epoch(0)
    assert a.feature_bytes_moved > 0 and a.feature_hit_rate == 0.0
    assert b.feature_bytes_moved == 0 and b.feature_hit_rate == 1.0
    assert a.loss == b.loss


def test_auto_chooses_a_size_that_fits_the_budget(dataset):
    spec = make_spec(dataset="synth-tiny", batch_size=96, fanouts=[4, 4], hidden=16, evaluate=False, epochs=1,
                     device_memory_bytes="3MiB", options={"ordering": "bfs", "pipeline": False, "feature_cache": "auto"})
    from cherry.memory import DeviceMemory

    with DeviceMemory("cpu", spec.device_memory_bytes) as memory:
        trainer = Trainer(dataset, spec, memory=memory)
        plan = trainer.residency
        assert plan.candidates and plan.mode in (ALL, CACHE, NONE)
        chosen = [c for c in plan.candidates if c.cache_rows == plan.cache_rows][0]
        assert chosen.fits and chosen.peak_bytes <= plan.budget_bytes
        assert all(itertools.starmap(lambda a, b: a.miss_bytes >= b.miss_bytes,
                                     zip(plan.candidates, plan.candidates[1:])))  # more cache, fewer misses
        result = trainer.run_epoch(0)
    assert result.measured_peak_bytes <= spec.device_memory_bytes


def test_cherry_train_reports_the_cache_and_its_traffic(synth_tiny, data_root, tmp_path, capsys):
    import json

    from cherry.cli import main

    out = tmp_path / "run.json"
    assert main(["train", "--dataset", "synth-tiny", "--root", str(data_root), "--hidden", "16", "--fanouts", "4,4",
                 "--batch-size", "256", "--max-steps-per-epoch", "2", "--no-eval", "--quiet",
                 "--feature-cache", "none", "--json", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["feature_cache"]["mode"] == NONE and summary["spec"]["options"]["feature_cache"] == NONE
    steps = summary["step_feature_bytes_moved"]
    assert len(steps) == 2 and all(b > 0 for b in steps)
    assert summary["epochs"][0]["feature_bytes_moved"] == sum(steps)
    assert summary["epochs"][0]["feature_hit_rate"] == 0.0
    assert "feature cache" not in capsys.readouterr().out  # none asked, none built: not a line of output


def test_bench_cache_capacities_and_figure(tmp_path):
    from benchmarks.feature_cache import capacities, plot

    caps = capacities(k1_bytes=40 << 20, feature_bytes=50 << 20, num_rows=100_000)
    assert caps["roomy"] * 0.9 * 0.9 >= (40 << 20) + (50 << 20) + 800_000  # all rows fit beside K = 1
    assert caps["roomy"] > caps["mid"] > caps["tight"]
    rows = [{"status": "ok", "cache_share": s, "bytes_per_epoch": b, "k_max": k}
            for s, b, k in ((0.0, 9 << 20, 2), (0.2, 4 << 20, 2), (0.5, 0, 3))] + \
           [{"status": "oom", "cache_share": 0.9, "bytes_per_epoch": None, "k_max": None}]
    plot(rows, str(tmp_path / "cache.png"), "toy")
    assert (tmp_path / "cache.png").stat().st_size > 1000
