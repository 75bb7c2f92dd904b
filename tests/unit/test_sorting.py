"""`cherry.planning.sorting.stable_argsort` equals torch's stable argsort on every path it takes."""
from __future__ import annotations

import pytest
import torch

from cherry.planning.sorting import stable_argsort


@pytest.mark.parametrize("bound", [1, 2, 9, 2**16, 2**16 + 1, 169_343, 2**32, 2**32 + 1, 2**40])
def test_stable_argsort_equals_torch_stable_argsort(bound):
    gen = torch.Generator().manual_seed(bound % 1000)
    for n in (0, 1, 2, 1000):
        # many ties (a stable sort must keep them in position order) and both ends of the range
        keys = torch.randint(0, min(bound, 50) if n > 2 else bound, (n,), generator=gen)
        keys = torch.where(torch.rand(n, generator=gen) < 0.3, torch.randint(0, bound, (n,), generator=gen), keys)
        if n >= 2:
            keys[0], keys[-1] = bound - 1, 0
        got = stable_argsort(keys, bound)
        assert got.dtype == torch.int64
        assert torch.equal(got, torch.argsort(keys, stable=True))


def test_stable_argsort_of_a_permutation_slice_sorts_it():
    # the split's use: seeds' locality ranks, distinct values of a permutation of 169,343 nodes
    gen = torch.Generator().manual_seed(0)
    rank = torch.randperm(169_343, generator=gen)
    keys = rank[torch.randperm(169_343, generator=gen)[:8192]]
    order = stable_argsort(keys, rank.numel())
    assert bool((keys[order][1:] > keys[order][:-1]).all())
