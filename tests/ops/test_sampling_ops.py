"""The sampling ops: native kernels equal their pure-PyTorch reference bit for bit, the reference does
what the contract says (uniform, without replacement, order-preserving), and bad input is refused."""
from __future__ import annotations

import itertools
import os

import pytest
import torch

from cherry.data.graph import Graph
from cherry.ops import extension_available, extension_status, sample_neighbors, slice_layer
from cherry.ops.sampling import slice_layer_many
from cherry.ops import reference_sampling as ref

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")],
    ),
]
FANOUTS = [-1, 1, 2, 3, 7, 1000]


@pytest.fixture(scope="module")
def native():
    """The native ops; building the extension is required unless CHERRY_NO_EXT disables it."""
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        pytest.skip("native extension disabled by CHERRY_NO_EXT")
    assert extension_available(), extension_status()
    return torch.ops.cherry


def random_graph(gen: torch.Generator, num_nodes: int, num_edges: int) -> Graph:
    """Random multigraph where about a quarter of the nodes are isolated (no in- or out-edges)."""
    active = torch.randperm(num_nodes, generator=gen)[: max(1, (3 * num_nodes) // 4)]
    src = active[torch.randint(0, active.numel(), (num_edges,), generator=gen)]
    dst = active[torch.randint(0, active.numel(), (num_edges,), generator=gen)]
    return Graph.from_edges(src, dst, num_nodes)


def random_cases(seed: int, count: int):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        n = int(torch.randint(1, 80, (1,), generator=gen))
        g = random_graph(gen, n, int(torch.randint(0, 8 * n, (1,), generator=gen)))
        num_seeds = int(torch.randint(1, n + 1, (1,), generator=gen))
        seeds = torch.randperm(n, generator=gen)[:num_seeds]
        random_seed = int(torch.randint(-(2**63), 2**63 - 1, (1,), generator=gen))
        yield g, seeds, random_seed


def to(device, *tensors):
    return [t.to(device) for t in tensors]


def assert_same(native_out, ref_out):
    for got, want in zip(native_out, ref_out):
        assert torch.equal(got.cpu(), want.cpu()), (got, want)


def test_mix32_tensor_matches_scalar():
    gen = torch.Generator().manual_seed(1)
    words = torch.cat([torch.randint(0, 2**32, (2000,), generator=gen), torch.tensor([0, 1, 2**31, 2**32 - 1])])
    got = ref.mix32(words)
    assert got.tolist() == [ref.mix32_int(int(w)) for w in words]
    assert int(got.max()) < 2**32 and int(got.min()) >= 0
    assert torch.unique(got).numel() == torch.unique(words).numel()  # a bijection


def test_scale_draw_is_exact_multiply_shift():
    gen = torch.Generator().manual_seed(2)
    words = torch.cat([torch.randint(0, 2**32, (500,), generator=gen), torch.tensor([0, 2**32 - 1, 2**32 - 1])])
    m = torch.cat([torch.randint(1, 2**62, (250,), generator=gen), torch.randint(1, 2**20, (250,), generator=gen),
                   torch.tensor([1, 2**63 - 1, 2**32])])
    got = ref.scale_draw(words, m)
    assert got.tolist() == [(int(w) * int(k)) >> 32 for w, k in zip(words, m)]
    assert bool((got >= 0).all()) and bool((got < m).all())


def test_floyd_picks_are_distinct_sorted_and_in_range():
    gen = torch.Generator().manual_seed(4)
    deg = torch.randint(31, 5000, (400,), generator=gen)
    picks = ref.floyd_offsets(torch.randint(0, 2**32, (400,), generator=gen), deg, 30)
    assert bool((picks[:, 1:] > picks[:, :-1]).all())  # ascending, hence distinct
    assert bool((picks[:, 0] >= 0).all()) and bool((picks[:, -1] < deg).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fanout", FANOUTS)
def test_sample_native_equals_reference(native, device, fanout):
    for g, seeds, random_seed in random_cases(seed=fanout + 10, count=25):
        indptr, indices, seeds_d = to(device, g.indptr, g.indices, seeds)
        got = native.sample_neighbors(indptr, indices, seeds_d, fanout, random_seed)
        assert_same(got, ref.sample_neighbors(g.indptr, g.indices, seeds, fanout, random_seed))


@pytest.mark.parametrize("device", DEVICES)
def test_sample_native_equals_reference_edge_cases(native, device):
    # Node 0 and 4 have no in-edges; node 3 has a multi-edge; node 5 is isolated.
    g = Graph.from_edges(torch.tensor([1, 2, 2, 0, 4, 4, 1, 2]), torch.tensor([1, 1, 3, 3, 3, 3, 2, 2]), 6)
    cases = [torch.tensor([0]), torch.tensor([5]), torch.tensor([3]), torch.tensor([0, 4, 5]), torch.tensor([3, 0, 1, 2])]
    for seeds in cases:
        for fanout in (-1, 1, 2, 10):
            for random_seed in (0, 1, -1, 2**63 - 1):
                indptr, indices, seeds_d = to(device, g.indptr, g.indices, seeds)
                got = native.sample_neighbors(indptr, indices, seeds_d, fanout, random_seed)
                assert_same(got, ref.sample_neighbors(g.indptr, g.indices, seeds, fanout, random_seed))


@pytest.mark.parametrize("device", DEVICES)
def test_sample_native_equals_reference_high_degree(native, device):
    gen = torch.Generator().manual_seed(3)
    n = 3000
    src = torch.randint(0, n, (60000,), generator=gen)
    dst = torch.where(torch.rand(60000, generator=gen) < 0.5, torch.zeros(60000, dtype=torch.int64), torch.randint(0, n, (60000,), generator=gen))
    g = Graph.from_edges(src, dst, n)
    seeds = torch.randperm(n, generator=gen)[:500]
    seeds[0] = 0  # a hub with ~30k in-neighbours
    for fanout in (5, 25, 100):  # 100 picks: past the native kernel's linear scan, its binary search
        indptr, indices, seeds_d = to(device, g.indptr, g.indices, seeds)
        got = native.sample_neighbors(indptr, indices, seeds_d, fanout, 12345)
        assert_same(got, ref.sample_neighbors(g.indptr, g.indices, seeds, fanout, 12345))


@pytest.mark.parametrize("fanout", FANOUTS)
def test_sample_reference_contract(fanout):
    for g, seeds, random_seed in random_cases(seed=fanout + 100, count=25):
        block_indptr, block_indices, src_nodes = sample_neighbors(g.indptr, g.indices, seeds, fanout, random_seed)
        deg = g.in_degrees()[seeds]
        want = deg if fanout < 0 else deg.clamp(max=fanout)
        assert torch.equal(block_indptr[1:] - block_indptr[:-1], want)
        assert int(block_indptr[0]) == 0 and int(block_indptr[-1]) == block_indices.numel()
        assert torch.equal(src_nodes[: seeds.numel()], seeds)
        assert torch.unique(src_nodes).numel() == src_nodes.numel()
        # New sources appear in first-appearance order over the edge list.
        new_positions = block_indices[block_indices >= seeds.numel()]
        firsts = [int(p) for i, p in enumerate(new_positions) if int(p) not in set(new_positions[:i].tolist())]
        assert firsts == list(range(seeds.numel(), src_nodes.numel()))
        for i, v in enumerate(seeds.tolist()):
            picked = src_nodes[block_indices[block_indptr[i] : block_indptr[i + 1]]].tolist()
            adjacency = g.indices[g.indptr[v] : g.indptr[v + 1]].tolist()
            it = iter(adjacency)  # sampled in-neighbours are a subsequence of the adjacency list
            assert all(any(a == p for a in it) for p in picked), (picked, adjacency)


def test_sample_is_uniform_without_replacement():
    # Node 0 has 10 distinct in-neighbours; with fanout 3 each is kept with probability 0.3.
    g = Graph.from_edges(torch.arange(1, 11), torch.zeros(10, dtype=torch.int64), 11)
    trials = 3000
    hits = torch.zeros(11, dtype=torch.int64)
    for r in range(trials):
        _, block_indices, src_nodes = sample_neighbors(g.indptr, g.indices, torch.tensor([0]), 3, r * 7919 + 17)
        picked = src_nodes[block_indices]
        assert torch.unique(picked).numel() == 3
        hits[picked] += 1
    expected, sigma = 0.3 * trials, (trials * 0.3 * 0.7) ** 0.5
    assert bool(((hits[1:] - expected).abs() < 5 * sigma).all()), hits


def test_sample_picks_every_subset_equally_often():
    # 4000 seeds share the same 6 in-neighbours; fanout 3 gives 20 subsets of probability 0.05 each.
    # A sampler with the right per-neighbour rates can still favour some subsets; this catches it.
    num_seeds, deg = 4000, 6
    dst = torch.arange(num_seeds).repeat_interleave(deg)
    g = Graph.from_edges(torch.arange(num_seeds, num_seeds + deg).repeat(num_seeds), dst, num_seeds + deg)
    block_indptr, block_indices, src_nodes = sample_neighbors(g.indptr, g.indices, torch.arange(num_seeds), 3, 99)
    picked = (src_nodes[block_indices] - num_seeds).view(num_seeds, 3)
    assert bool((picked[:, 1:] > picked[:, :-1]).all())  # distinct, in adjacency order
    codes = (1 << picked).sum(1)
    hits = torch.bincount(codes, minlength=1 << deg)[codes.unique()]
    expected, sigma = num_seeds / 20, (num_seeds * 0.05 * 0.95) ** 0.5
    assert hits.numel() == 20 and bool(((hits - expected).abs() < 5 * sigma).all()), hits


def test_sample_depends_on_random_seed():
    gen = torch.Generator().manual_seed(5)
    g = random_graph(gen, 200, 4000)
    seeds = torch.arange(50)
    a = sample_neighbors(g.indptr, g.indices, seeds, 2, 1)
    b = sample_neighbors(g.indptr, g.indices, seeds, 2, 2)
    assert not torch.equal(a[1], b[1]) or not torch.equal(a[2], b[2])
    assert all(torch.equal(x, y) for x, y in zip(a, sample_neighbors(g.indptr, g.indices, seeds, 2, 1)))


@pytest.mark.parametrize("device", DEVICES)
def test_slice_layer_native_equals_reference(native, device):
    gen = torch.Generator().manual_seed(9)
    for g, seeds, random_seed in random_cases(seed=7, count=40):
        indptr, indices, src_nodes = ref.sample_neighbors(g.indptr, g.indices, seeds, 3, random_seed)
        k = int(torch.randint(1, seeds.numel() + 1, (1,), generator=gen))
        dst = torch.randperm(seeds.numel(), generator=gen)[:k]
        want = ref.slice_layer(indptr, indices, dst, src_nodes.numel())
        assert_same(native.slice_layer(*to(device, indptr, indices, dst), src_nodes.numel()), want)
        # The contract: each kept destination has exactly its parent edges, in order.
        sub_indptr, sub_indices, src_positions = want
        assert torch.equal(src_positions[:k], dst)
        for i, d in enumerate(dst.tolist()):
            assert torch.equal(src_positions[sub_indices[sub_indptr[i] : sub_indptr[i + 1]]], indices[indptr[d] : indptr[d + 1]])


def test_sample_neighbors_rejects_bad_input():
    g = Graph.from_edges(torch.tensor([1, 2]), torch.tensor([0, 0]), 3)
    ip, ix = g.indptr, g.indices
    with pytest.raises(ValueError, match="seeds must have dtype torch.int64"):
        sample_neighbors(ip, ix, torch.tensor([0], dtype=torch.int32), 2, 0)
    with pytest.raises(ValueError, match="seeds must be one-dimensional"):
        sample_neighbors(ip, ix, torch.tensor([[0]]), 2, 0)
    with pytest.raises(ValueError, match="seeds must be on device"):
        sample_neighbors(ip, ix, torch.tensor([0], device="meta"), 2, 0)
    with pytest.raises(ValueError, match=r"seeds must lie in \[0, 3\)"):
        sample_neighbors(ip, ix, torch.tensor([3]), 2, 0)
    with pytest.raises(ValueError, match="duplicates"):
        sample_neighbors(ip, ix, torch.tensor([1, 1]), 2, 0)
    with pytest.raises(ValueError, match="must not be empty"):
        sample_neighbors(ip, ix, torch.tensor([], dtype=torch.int64), 2, 0)
    with pytest.raises(ValueError, match="fanout must be positive or -1"):
        sample_neighbors(ip, ix, torch.tensor([0]), 0, 0)
    with pytest.raises(TypeError, match="fanout must be an int"):
        sample_neighbors(ip, ix, torch.tensor([0]), 2.0, 0)
    with pytest.raises(ValueError, match="random_seed must fit"):
        sample_neighbors(ip, ix, torch.tensor([0]), 2, 2**63)
    with pytest.raises(TypeError, match="seeds must be a torch.Tensor"):
        sample_neighbors(ip, ix, [0], 2, 0)


def test_slice_layer_rejects_bad_input():
    indptr, indices = torch.tensor([0, 2, 3]), torch.tensor([2, 3, 0])
    with pytest.raises(ValueError, match=r"dst_positions must lie in \[0, 2\)"):
        slice_layer(indptr, indices, torch.tensor([2]), 4)
    with pytest.raises(ValueError, match="duplicates"):
        slice_layer(indptr, indices, torch.tensor([1, 1]), 4)
    with pytest.raises(ValueError, match="num_parent_src must be >="):
        slice_layer(indptr, indices, torch.tensor([1]), 1)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 3\)"):
        slice_layer(indptr, indices, torch.tensor([1]), 3)
    with pytest.raises(ValueError, match="dst_positions must have dtype"):
        slice_layer(indptr, indices, torch.tensor([1.0]), 4)
    got = slice_layer(indptr, indices, torch.tensor([1, 0]), 4)
    assert [t.tolist() for t in got] == [[0, 1, 3], [1, 2, 3], [1, 0, 2, 3]]


def random_groups(gen: torch.Generator, n: int, k: int) -> tuple[torch.Tensor, list[int]]:
    """A random order of ``range(n)`` cut into ``k`` non-empty groups: (positions, K + 1 offsets)."""
    order = torch.randperm(n, generator=gen)
    cuts = sorted(torch.randperm(n - 1, generator=gen)[: k - 1].add(1).tolist()) if k > 1 else []
    return order, [0, *cuts, n]


def assert_many_equal(got, want):
    assert len(got) == len(want) == 6
    for a, b in zip(got[:4], want[:4]):
        assert torch.equal(a.cpu(), b.cpu()), (a, b)
    assert list(got[4]) == list(want[4]) and list(got[5]) == list(want[5])


def check_many_contract(indptr, indices, dst, offsets, src_nodes, out):
    """slice_layer_many is each group's slice_layer, concatenated, plus the gather of global ids."""
    sub_indptr, sub_indices, src_positions, got_nodes, src_offsets, edge_offsets = out
    assert torch.equal(got_nodes, src_nodes[src_positions])
    for g in range(len(offsets) - 1):
        one = ref.slice_layer(indptr, indices, dst[offsets[g] : offsets[g + 1]], src_nodes.numel())
        assert torch.equal(sub_indptr[offsets[g] + g : offsets[g + 1] + g + 1], one[0])
        assert torch.equal(sub_indices[edge_offsets[g] : edge_offsets[g + 1]], one[1])
        assert torch.equal(src_positions[src_offsets[g] : src_offsets[g + 1]], one[2])


@pytest.mark.parametrize("device", DEVICES)
def test_slice_layer_many_native_equals_reference(native, device):
    gen = torch.Generator().manual_seed(11)
    for g, seeds, random_seed in random_cases(seed=8, count=40):
        indptr, indices, src = ref.sample_neighbors(g.indptr, g.indices, seeds, 3, random_seed)
        n = seeds.numel()
        nodes = src * 7 + 3  # global ids distinct from positions, so the gather is checked
        for k in sorted({1, n, int(torch.randint(1, n + 1, (1,), generator=gen))}):  # K = n: one seed each
            dst, offsets = random_groups(gen, n, k)
            want = ref.slice_layer_many(indptr, indices, dst, offsets, nodes)
            check_many_contract(indptr, indices, dst, offsets, nodes, want)
            got = native.slice_layer_many(*to(device, indptr, indices, dst), offsets, nodes.to(device))
            assert_many_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_slice_layer_many_overlapping_groups_and_two_layers(native, device):
    # Two sampled layers; the lower layer's groups are the upper layer's per-group sources, which
    # overlap across groups (shared neighbours) exactly as in slice_blocks_many.
    gen = torch.Generator().manual_seed(12)
    g = random_graph(gen, 300, 3000)
    seeds = torch.randperm(300, generator=gen)[:60]
    top = ref.sample_neighbors(g.indptr, g.indices, seeds, 5, 1)
    bottom = ref.sample_neighbors(g.indptr, g.indices, top[2], 4, 2)
    for k in (1, 2, 7, 60):
        dst, offsets = random_groups(gen, 60, k)
        upper = ref.slice_layer_many(top[0], top[1], dst, offsets, top[2])
        lower_dst, lower_offsets = upper[2], upper[4]
        assert torch.unique(lower_dst).numel() < lower_dst.numel() or k == 1  # shared sources
        want = ref.slice_layer_many(bottom[0], bottom[1], lower_dst, lower_offsets, bottom[2])
        check_many_contract(bottom[0], bottom[1], lower_dst, lower_offsets, bottom[2], want)
        got = native.slice_layer_many(*to(device, bottom[0], bottom[1], lower_dst), lower_offsets, bottom[2].to(device))
        assert_many_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
def test_slice_layer_many_empty_groups_in_the_raw_op(native, device):
    # The public wrapper refuses empty groups; the raw op still handles them (K = 0 included).
    indptr, indices, nodes = torch.tensor([0, 2, 3, 3]), torch.tensor([2, 3, 0]), torch.tensor([10, 11, 12, 13])
    for dst, offsets in [(torch.tensor([1, 0]), [0, 0, 2, 2]), (torch.tensor([], dtype=torch.int64), [0]),
                         (torch.tensor([2]), [0, 1])]:
        want = ref.slice_layer_many(indptr, indices, dst, offsets, nodes)
        got = native.slice_layer_many(*to(device, indptr, indices, dst), offsets, nodes.to(device))
        assert_many_equal(got, want)


def test_slice_layer_many_parallel_path_equals_reference(native):
    # Enough edges (>= 2**20) for the CPU kernel to run groups on threads, then compact their sources.
    gen = torch.Generator().manual_seed(13)
    num_dst, deg, num_src = 3000, 400, 50000
    indptr = torch.arange(0, (num_dst + 1) * deg, deg)
    indices = torch.randint(0, num_src, (num_dst * deg,), generator=gen)
    indices[:num_dst] = torch.arange(num_dst)  # destinations are also sources
    nodes = torch.randperm(num_src, generator=gen)
    dst, offsets = random_groups(gen, num_dst, 5)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        got = native.slice_layer_many(indptr, indices, dst, offsets, nodes)
    finally:
        torch.set_num_threads(threads)
    assert_many_equal(got, ref.slice_layer_many(indptr, indices, dst, offsets, nodes))


@pytest.mark.parametrize("sizes", [(3500, 5000), (12000, 300), (300, 40000, 300)])
def test_slice_layer_many_groups_around_the_narrow_map_limit(native, sizes):
    # The CPU kernel slices a group with a 16-bit map first and again with the wide map when its
    # sources pass 2**15 - 1 (then the rest of the call goes straight to the wide map): groups just
    # below and far above the limit, an overflow in the first group or only in a later one, and a
    # group with more destinations than the narrow map numbers must all equal the reference.
    gen = torch.Generator().manual_seed(31)
    num_dst, deg, num_src = sum(sizes), 8, 200_000
    indptr = torch.arange(0, (num_dst + 1) * deg, deg)
    indices = torch.randint(0, num_src, (num_dst * deg,), generator=gen)
    nodes = torch.randperm(num_src, generator=gen)
    dst = torch.randperm(num_dst, generator=gen)
    offsets = [0, *itertools.accumulate(sizes)]
    got = native.slice_layer_many(indptr, indices, dst, offsets, nodes)
    want = ref.slice_layer_many(indptr, indices, dst, offsets, nodes)
    assert_many_equal(got, want)
    counts = [b - a for a, b in zip(want[4], want[4][1:])]
    assert min(counts) < 2**15 - 1 < max(counts)  # both sides of the limit are exercised


def test_slice_layer_many_map_is_clean_after_an_error(native):
    # A bad parent index aborts mid-group; the reused scratch map must not remember that group.
    indptr, indices, nodes = torch.tensor([0, 2, 4]), torch.tensor([1, 2, 0, 9]), torch.arange(4)
    with pytest.raises(RuntimeError, match="out of range"):
        native.slice_layer_many(indptr, indices, torch.tensor([0, 1]), [0, 2], nodes)
    good = torch.tensor([0, 2, 3, 1])
    for dst in (torch.tensor([0]), torch.tensor([1, 0])):
        got = native.slice_layer_many(indptr, good, dst, [0, dst.numel()], nodes)
        assert_many_equal(got, ref.slice_layer_many(indptr, good, dst, [0, dst.numel()], nodes))
    with pytest.raises(RuntimeError, match="distinct within a group"):
        native.slice_layer_many(indptr, good, torch.tensor([1, 1]), [0, 2], nodes)
    got = native.slice_layer_many(indptr, good, torch.tensor([1, 0]), [0, 1, 2], nodes)
    assert_many_equal(got, ref.slice_layer_many(indptr, good, torch.tensor([1, 0]), [0, 1, 2], nodes))


def test_slice_layer_many_rejects_bad_input():
    indptr, indices, nodes = torch.tensor([0, 2, 3]), torch.tensor([2, 3, 0]), torch.arange(4)
    with pytest.raises(ValueError, match="every group non-empty"):
        slice_layer_many(indptr, indices, torch.tensor([1, 0]), [0, 0, 2], nodes)
    with pytest.raises(ValueError, match="every group non-empty"):
        slice_layer_many(indptr, indices, torch.tensor([1, 0]), [0, 1], nodes)
    with pytest.raises(ValueError, match="K \\+ 1 >= 2 entries"):
        slice_layer_many(indptr, indices, torch.tensor([1]), [0], nodes)
    with pytest.raises(ValueError, match=r"dst_positions must lie in \[0, 2\)"):
        slice_layer_many(indptr, indices, torch.tensor([2]), [0, 1], nodes)
    with pytest.raises(ValueError, match="duplicates within a group"):
        slice_layer_many(indptr, indices, torch.tensor([1, 1]), [0, 2], nodes)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 3\)"):
        slice_layer_many(indptr, indices, torch.tensor([1]), [0, 1], nodes[:3])
    with pytest.raises(TypeError, match="group_offsets must be a list of ints"):
        slice_layer_many(indptr, indices, torch.tensor([1]), torch.tensor([0, 1]), nodes)
    with pytest.raises(ValueError, match="parent_src_nodes must have dtype"):
        slice_layer_many(indptr, indices, torch.tensor([1]), [0, 1], nodes.float())
    # The same position in two groups is allowed (a lower layer's groups share sources).
    got = slice_layer_many(indptr, indices, torch.tensor([1, 0, 1]), [0, 2, 3], nodes)
    assert [t.tolist() for t in got[:4]] == [[0, 1, 3, 0, 1], [1, 2, 3, 1], [1, 0, 2, 3, 1, 0], [1, 0, 2, 3, 1, 0]]
    assert got[4] == [0, 4, 6] and got[5] == [0, 3, 4]
