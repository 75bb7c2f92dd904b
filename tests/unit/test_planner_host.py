"""The greedy planner ops run on the host for a batch on a GPU: `to_host_once` packs a batch's CSC,
order and weights into one transfer; the candidates are the same wherever they are computed (the
GPU comparison and its planning time are in tests/unit/test_gpu_faults.py)."""
from __future__ import annotations

import pytest
import torch

from cherry.planning.split import to_host_once


def test_to_host_once_round_trips_int64_and_float64_exactly():
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randint(-2**62, 2**62, (7,), generator=g), torch.randn(5, dtype=torch.float64, generator=g),
               torch.arange(0, dtype=torch.int64), torch.tensor([float("inf"), -0.0, float("nan")], dtype=torch.float64),
               torch.arange(4, dtype=torch.int32)]
    out = to_host_once(tensors)
    assert len(out) == len(tensors)
    for a, b in zip(tensors, out):
        assert a.dtype == b.dtype and a.shape == b.shape and b.device.type == "cpu"
        assert torch.equal(a.view(torch.int64) if a.dtype == torch.float64 else a,
                           b.view(torch.int64) if b.dtype == torch.float64 else b)  # bit for bit (nan, -0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_to_host_once_makes_one_copy_of_device_tensors():
    from torch.profiler import ProfilerActivity, profile

    tensors = [torch.arange(10, device="cuda"), torch.ones(3, dtype=torch.float64, device="cuda"),
               torch.arange(4, device="cuda")]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = to_host_once(tensors)
    copies = [e for e in prof.events() if e.name == "aten::copy_"]
    assert len(copies) == 1, [e.name for e in prof.events()]
    assert all(torch.equal(a.cpu(), b) for a, b in zip(tensors, out))
