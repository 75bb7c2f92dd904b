"""The one-pass design of the CUDA ``slice_layer_many`` (csrc/cuda/slice_blocks.cu), checked on a CPU.

No GPU is needed to check the index arithmetic the kernels rely on: `onepass_slice_many` below runs
the same steps with the same formulas (degree + cumulative sum, per-group first-appearance map by
minimum, one read of the per-group sizes, flags + prefix sum, local indices), vectorised over
destinations and edges instead of threads. It must equal the reference for every case the GPU tests
use (empty groups, overlapping groups, K = 1 and K = number of destinations); the CUDA kernels
themselves are compared with the reference on a GPU by tests/ops/test_sampling_ops.py.
"""
from __future__ import annotations

import pytest
import torch

from cherry.ops import reference_sampling as ref
from tests.ops.test_sampling_ops import assert_many_equal, random_cases, random_graph, random_groups

EMPTY = torch.iinfo(torch.int64).max


def onepass_slice_many(indptr, indices, dst, go_list, nodes):
    k, n = len(go_list) - 1, dst.numel()
    go = torch.tensor(go_list)
    if k == 0:
        e = torch.empty(0, dtype=torch.int64)
        return e, e, e, e, [0], [0]
    if n == 0:
        e = torch.empty(0, dtype=torch.int64)
        return torch.zeros(k, dtype=torch.int64), e, e, e, [0] * (k + 1), [0] * (k + 1)
    P = nodes.numel()
    i = torch.arange(n)
    # degree_kernel: degree and group (the last g with go[g] <= i)
    deg = indptr[dst + 1] - indptr[dst]
    grp = torch.searchsorted(go[:k], i, right=True) - 1
    cum = torch.cumsum(deg, 0)
    # group_kernel: edges before each group, the leading 0 of each group's indptr
    eo = torch.where(go == 0, 0, cum[(go - 1).clamp(min=0)])
    sub_ip = torch.full((n + k,), -1, dtype=torch.int64)
    sub_ip[go[:k] + torch.arange(k)] = 0
    # view_of: per destination
    gs, ng = go[grp], go[grp + 1] - go[grp]
    out_edge = cum - deg
    # per edge (lane j of destination i's warp)
    ei = torch.repeat_interleave(i, deg)
    j = torch.arange(ei.numel()) - out_edge[ei]
    src = indices[indptr[dst[ei]] + j]
    # mark_kernel: keys, minimum per (group, source), distinct counts per group
    sub_ip[i + grp + 1] = out_edge + deg - eo[grp]
    dst_key = i - gs
    edge_key = ng[ei] + (out_edge[ei] - eo[grp[ei]]) + j
    cells = torch.cat([grp * P + dst, grp[ei] * P + src])
    keys = torch.cat([dst_key, edge_key])
    table = torch.full((k * P,), EMPTY, dtype=torch.int64).scatter_reduce(0, cells, keys, reduce="amin")
    counts = torch.bincount(torch.unique(cells) // P, minlength=k)
    # the read-back
    edge_offsets = eo.tolist()
    src_offsets = [0, *torch.cumsum(counts, 0).tolist()]
    num_edges = edge_offsets[-1]
    # flag_kernel: positions in the sequence of all groups
    pos = torch.cat([i + eo[grp], go[grp[ei] + 1] + out_edge[ei] + j])
    flags = torch.zeros(n + num_edges, dtype=torch.uint8)
    flags[pos] = (table[cells] == keys).to(torch.uint8)
    assert int(flags.sum()) == src_offsets[-1]
    scan = torch.cumsum(flags, 0, dtype=torch.int64)
    # assign_kernel
    nodes_of = torch.cat([dst, src])
    first = flags[pos].bool()
    slot = scan[pos[first]] - 1
    group_pos = gs + eo[grp]  # per destination, as each warp computes it
    so = torch.where(group_pos == 0, 0, scan[(group_pos - 1).clamp(min=0)])
    cell_dst = torch.cat([i, ei])
    src_positions = torch.empty(src_offsets[-1], dtype=torch.int64)
    src_positions[slot] = nodes_of[first]
    table[cells[first]] = slot - so[cell_dst[first]]
    # edge_kernel
    sub_indices = torch.empty(num_edges, dtype=torch.int64)
    sub_indices[out_edge[ei] + j] = table[grp[ei] * P + src]
    assert bool((sub_ip >= 0).all())
    return sub_ip, sub_indices, src_positions, nodes[src_positions], src_offsets, edge_offsets


def test_onepass_equals_reference_on_random_groups():
    gen = torch.Generator().manual_seed(21)
    for g, seeds, random_seed in random_cases(seed=8, count=25):
        indptr, indices, src = ref.sample_neighbors(g.indptr, g.indices, seeds, 3, random_seed)
        n = seeds.numel()
        nodes = src * 7 + 3
        for k in sorted({1, n, int(torch.randint(1, n + 1, (1,), generator=gen))}):
            dst, offsets = random_groups(gen, n, k)
            assert_many_equal(onepass_slice_many(indptr, indices, dst, offsets, nodes),
                              ref.slice_layer_many(indptr, indices, dst, offsets, nodes))


def test_onepass_equals_reference_on_overlapping_groups_and_empty_ones():
    gen = torch.Generator().manual_seed(22)
    g = random_graph(gen, 300, 3000)
    seeds = torch.randperm(300, generator=gen)[:60]
    top = ref.sample_neighbors(g.indptr, g.indices, seeds, 5, 1)
    bottom = ref.sample_neighbors(g.indptr, g.indices, top[2], 40, 2)  # degrees above a warp's 32 lanes
    for k in (1, 2, 7, 60):
        dst, offsets = random_groups(gen, 60, k)
        upper = ref.slice_layer_many(top[0], top[1], dst, offsets, top[2])
        lower_dst, lower_offsets = upper[2], upper[4]
        assert_many_equal(onepass_slice_many(bottom[0], bottom[1], lower_dst, lower_offsets, bottom[2]),
                          ref.slice_layer_many(bottom[0], bottom[1], lower_dst, lower_offsets, bottom[2]))
    indptr, indices, nodes = torch.tensor([0, 2, 3, 3]), torch.tensor([2, 3, 0]), torch.tensor([10, 11, 12, 13])
    for dst, offsets in [(torch.tensor([1, 0]), [0, 0, 2, 2]), (torch.tensor([], dtype=torch.int64), [0]),
                         (torch.tensor([], dtype=torch.int64), [0, 0, 0]), (torch.tensor([2]), [0, 1])]:
        assert_many_equal(onepass_slice_many(indptr, indices, dst, offsets, nodes),
                          ref.slice_layer_many(indptr, indices, dst, offsets, nodes))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_slice_many_in_passes_equals_reference():
    # K x sources above the kernel's map limit (2**25 entries): groups are sliced in several passes,
    # and degrees above 32 make every lane of a warp loop.
    from cherry.ops import extension_available, extension_status

    assert extension_available(), extension_status()
    gen = torch.Generator().manual_seed(23)
    num_dst, deg, num_src = 3000, 40, 50000
    indptr = torch.arange(0, (num_dst + 1) * deg, deg)
    indices = torch.randint(0, num_src, (num_dst * deg,), generator=gen)
    nodes = torch.randperm(num_src, generator=gen)
    for k in (1, 8, 700):
        dst, offsets = random_groups(gen, num_dst, k)
        got = torch.ops.cherry.slice_layer_many(indptr.cuda(), indices.cuda(), dst.cuda(), offsets, nodes.cuda())
        assert_many_equal(got, ref.slice_layer_many(indptr, indices, dst, offsets, nodes))
        one = torch.ops.cherry.slice_layer(indptr.cuda(), indices.cuda(), dst[: offsets[1]].cuda(), num_src)
        for a, b in zip(one, ref.slice_layer(indptr, indices, dst[: offsets[1]], num_src)):
            assert torch.equal(a.cpu(), b)
