"""The batch loader (`cherry.sampling.loader`): one rule for every run's batches, same seed -> same
batches, and `BatchLoader` preparing batch i + 1 in order on one background thread while batch i steps."""
from __future__ import annotations

import threading

import pytest
import torch

from cherry.sampling import (BatchLoader, LoadedBatch, NeighborSampler, derive_seed, epoch_seed_batches,
                             sampling_generator, spec_seed_batches, step_seed_batches)
from cherry.spec import make_spec
from tests.unit.graphs import random_dataset


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_derive_seed_is_deterministic_and_separates_purposes():
    assert derive_seed(0, "order", 1) == derive_seed(0, "order", 1)
    seeds = {derive_seed(0, "order", 0), derive_seed(0, "order", 1), derive_seed(0, "sample"), derive_seed(1, "sample")}
    assert len(seeds) == 4 and all(0 <= s < 2**63 for s in seeds)
    assert derive_seed(2**63 - 1, "sample") >= 0  # any int seed, no overflow
    for bad in (-1, 1.5, True, "0"):
        with pytest.raises(ValueError, match="seed"):
            derive_seed(bad, "order")


def test_epoch_batches_partition_the_training_seeds_and_depend_on_seed_and_epoch():
    train = torch.arange(100, 200)
    batches = epoch_seed_batches(train, 32, seed=0, epoch=0)
    assert [b.numel() for b in batches] == [32, 32, 32, 4]
    assert torch.equal(torch.sort(torch.cat(batches)).values, train)
    assert _same(batches, epoch_seed_batches(train, 32, seed=0, epoch=0))  # same seed, same batches
    assert not _same(batches, epoch_seed_batches(train, 32, seed=0, epoch=1))
    assert not _same(batches, epoch_seed_batches(train, 32, seed=1, epoch=0))
    with pytest.raises(ValueError, match="batch_size"):
        epoch_seed_batches(train, 0, seed=0, epoch=0)


def test_step_batches_take_epochs_in_turn_without_their_tails():
    train = torch.arange(10)
    steps = step_seed_batches(train, 4, seed=5, num_steps=5)
    expected = epoch_seed_batches(train, 4, 5, 0)[:2] + epoch_seed_batches(train, 4, 5, 1)[:2] + \
        epoch_seed_batches(train, 4, 5, 2)[:1]
    assert _same(steps, expected) and _same(steps, step_seed_batches(train, 4, seed=5, num_steps=5))
    with pytest.raises(ValueError, match="empty"):
        step_seed_batches(torch.arange(0), 4, seed=0, num_steps=1)


def test_spec_batches_follow_epochs_steps_and_the_cap():
    train = torch.arange(300)
    spec = make_spec(dataset="synth-tiny", batch_size=64, seed=2, epochs=0, warmup=1, steps=6)
    assert _same(spec_seed_batches(spec, train), step_seed_batches(train, 64, 2, 7))
    assert _same(spec_seed_batches(spec, train, epoch=3), epoch_seed_batches(train, 64, 2, 3))
    capped = spec.replace(epochs=1, max_steps_per_epoch=2)
    assert _same(spec_seed_batches(capped, train, epoch=0), epoch_seed_batches(train, 64, 2, 0)[:2])


def test_same_seed_same_sampled_batches_through_the_loader():
    ds = random_dataset(num_nodes=300)
    sampler = NeighborSampler(ds.graph, [3, 5])
    batches = epoch_seed_batches(ds.train_idx, 32, seed=7, epoch=0)

    def run(seed):
        with BatchLoader(batches, sampling_generator(seed), sampler.sample) as loader:
            return [(b.seeds, b.prepared) for b in loader]

    first, second, other = run(7), run(7), run(8)
    assert len(first) == len(batches)
    for (seeds_a, a), (seeds_b, b) in zip(first, second):
        assert torch.equal(seeds_a, seeds_b)
        assert all(torch.equal(x.src_nodes, y.src_nodes) and torch.equal(x.indices, y.indices)
                   for x, y in zip(a.layers, b.layers))
    # ... and the same as sampling in order on the caller's thread without a loader
    gen = sampling_generator(7)
    for (_, a), seeds in zip(first, batches):
        b = sampler.sample(seeds, gen)
        assert all(torch.equal(x.src_nodes, y.src_nodes) for x, y in zip(a.layers, b.layers))
    assert any(not torch.equal(a.layers[0].src_nodes, b.layers[0].src_nodes)
               for (_, a), (_, b) in zip(first, other))


def test_without_prepare_the_loader_yields_seeds_and_the_generator():
    batches = [torch.arange(4), torch.arange(4, 8)]
    gen = torch.Generator().manual_seed(0)
    loader = BatchLoader(batches, gen)
    got = list(loader)
    assert len(loader) == 2 and [b.index for b in got] == [0, 1]
    assert all(isinstance(b, LoadedBatch) and b.generator is gen and b.prepared is None for b in got)
    assert all(torch.equal(b.seeds, s) for b, s in zip(got, batches))
    loader.close()
    with pytest.raises(TypeError, match="generator"):
        BatchLoader(batches, 0)
    with pytest.raises(TypeError, match="prepare"):
        BatchLoader(batches, gen, prepare=42)


def test_prepare_runs_in_order_on_one_background_thread_and_overlaps_the_step():
    batches = [torch.tensor([i]) for i in range(5)]
    calls: list[tuple[int, int]] = []
    started = {i: threading.Event() for i in range(len(batches))}

    def prepare(seeds, generator):
        i = int(seeds[0])
        started[i].set()
        calls.append((i, threading.get_ident()))
        return i * 10

    main_thread = threading.get_ident()
    with BatchLoader(batches, torch.Generator(), prepare) as loader:
        for batch in loader:
            assert batch.prepared == batch.index * 10
            if batch.index + 1 < len(batches):
                # batch i + 1 is being prepared while the caller still "steps" batch i
                assert started[batch.index + 1].wait(timeout=30), f"batch {batch.index + 1} was not prepared ahead"
    assert [i for i, _ in calls] == list(range(len(batches)))  # in order, once each
    threads = {t for _, t in calls}
    assert len(threads) == 1 and main_thread not in threads


def test_an_exception_in_prepare_is_raised_by_the_next_that_would_return_its_batch():
    batches = [torch.tensor([i]) for i in range(4)]

    def prepare(seeds, generator):
        if int(seeds[0]) == 2:
            raise RuntimeError("sampling failed on batch 2")
        return int(seeds[0])

    with BatchLoader(batches, torch.Generator(), prepare) as loader:
        it = iter(loader)
        assert next(it).prepared == 0 and next(it).prepared == 1
        with pytest.raises(RuntimeError, match="sampling failed on batch 2"):
            next(it)
    assert loader._pool is None  # closed: the thread was waited for
