"""``cherry::cache_gather`` (the feature cache's row gather) against its reference, on every device:
hits from the cache, misses from the host table (on CUDA: pinned host memory read in place, UVA)."""
from __future__ import annotations

import pytest
import torch

from cherry.ops import extension_available
from cherry.ops import reference_cache as ref
from cherry.ops.feature_cache import cache_gather
from cherry.planning.residency import slot_map

needs_ext = pytest.mark.skipif(not extension_available(), reason="the native extension is not in use")


def _case(num_rows=300, width=7, cache_rows=80, num_nodes=500, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    host = (torch.randn(num_rows, width, generator=gen) * 100).to(dtype)
    order = torch.randperm(num_rows, generator=gen)
    slot_of = slot_map(order, cache_rows)
    cache = host.index_select(0, order[:cache_rows]).clone()
    nodes = torch.randint(0, num_rows, (num_nodes,), generator=gen)
    return slot_of, cache, host, nodes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("cache_rows", [0, 80, 300])
def test_reference_reads_hits_from_the_cache(dtype, cache_rows):
    slot_of, cache, host, nodes = _case(cache_rows=cache_rows, dtype=dtype)
    assert torch.equal(ref.cache_gather(slot_of, cache, host, nodes), host[nodes])
    # a hit really comes from the cache: poison the host rows that are cached
    poisoned = host.clone()
    poisoned[slot_of >= 0] = 0
    out = ref.cache_gather(slot_of, cache, poisoned, nodes)
    assert torch.equal(out, host[nodes])


@needs_ext
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [1, 7, 64])
def test_cpu_kernel_equals_reference(dtype, width):
    slot_of, cache, host, nodes = _case(width=width, dtype=dtype, seed=width)
    poisoned = host.clone()
    poisoned[slot_of >= 0] = -1
    native = torch.ops.cherry.cache_gather(slot_of, cache, poisoned, nodes)
    assert torch.equal(native, ref.cache_gather(slot_of, cache, poisoned, nodes))
    assert torch.equal(native, host[nodes])


@needs_ext
def test_cpu_kernel_empty_and_out_of_range():
    slot_of, cache, host, _ = _case()
    assert torch.ops.cherry.cache_gather(slot_of, cache, host, torch.empty(0, dtype=torch.int64)).shape == (0, 7)
    with pytest.raises(RuntimeError, match="outside"):
        torch.ops.cherry.cache_gather(slot_of, cache, host, torch.tensor([300]))


def test_public_op_checks_its_inputs():
    slot_of, cache, host, nodes = _case()
    assert torch.equal(cache_gather(slot_of, cache, host, nodes), host[nodes])
    with pytest.raises(ValueError, match="nodes must lie in"):
        cache_gather(slot_of, cache, host, torch.tensor([-1]))
    with pytest.raises(ValueError, match="slot_of must have one entry per host row"):
        cache_gather(slot_of[:-1], cache, host, nodes)
    with pytest.raises(ValueError, match="same width and dtype"):
        cache_gather(slot_of, cache.double(), host, nodes)
    with pytest.raises(ValueError, match="slot_of must lie in"):
        cache_gather(torch.full_like(slot_of, 99), cache, host, nodes)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("pinned", [True, False], ids=["pinned-host", "device-host"])
def test_cuda_kernel_reads_misses_in_place(dtype, pinned):
    if not extension_available():
        pytest.skip("the native extension is not in use")
    slot_of, cache, host, nodes = _case(width=33 if dtype == torch.float16 else 64, dtype=dtype)
    table = host.pin_memory() if pinned else host.cuda()
    out = torch.ops.cherry.cache_gather(slot_of.cuda(), cache.cuda(), table, nodes.cuda())
    assert out.is_cuda and torch.equal(out.cpu(), host[nodes])
    assert torch.equal(out, ref.cache_gather(slot_of.cuda(), cache.cuda(), table, nodes.cuda()))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("rows", [150, 600])
def test_cuda_feature_cache_in_a_step_is_exact(rows):
    """A CUDA trainer with a partial cache (misses through UVA) or all rows cached gives the uncached
    trainer's gradients."""
    from cherry.execution import Trainer
    from cherry.execution.feature_cache import FeatureCache
    from cherry.planning.residency import ALL, CACHE, ResidencyPlan, hot_order
    from cherry.sampling import NeighborSampler
    from cherry.spec import make_spec
    from tests.unit.graphs import random_dataset

    ds = random_dataset(600, avg_degree=6, seed=2)
    spec = make_spec(dataset="synth-tiny", batch_size=96, fanouts=[4, 4], hidden=16, num_microbatches=2,
                     evaluate=False, device="cuda", options={"ordering": "bfs", "feature_cache": "none"})
    base, cached = Trainer(ds, spec, construction="host"), Trainer(ds, spec, construction="host")
    n, f = ds.features.shape
    cache = FeatureCache(cached.data.features, ResidencyPlan(ALL if rows == n else CACHE, rows, n, f * 4, None, "test"),
                         hot_order(ds.graph.indptr), "cuda")
    cached.executor.set_feature_cache(cache)
    blocks = NeighborSampler(ds.graph, [4, 4]).sample(ds.train_idx[:96], torch.Generator().manual_seed(5))
    a = base.executor.accumulate(blocks, base.data.features, base.data.labels)
    b = cached.executor.accumulate(blocks, cached.data.features, cached.data.labels)
    assert a.loss == pytest.approx(b.loss, rel=1e-6)
    assert b.feature_rows_missed < b.feature_rows_read and (rows < n or b.feature_rows_missed == 0)
    for ga, gb in zip(base.executor.gradients(), cached.executor.gradients()):
        torch.testing.assert_close(ga, gb)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path of the gpu-check section")
def test_gpu_microbenchmark_says_it_measured_nothing_without_a_gpu(capsys):
    from benchmarks.cache_gather_gpu import main

    assert main(["--rows", "10", "--nodes", "5"]) == 0
    assert "no CUDA device" in capsys.readouterr().out
