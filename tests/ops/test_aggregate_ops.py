"""Native `csr_aggregate` / `edge_softmax` against the pure-PyTorch reference, on every available device.

Native tests need the extension; they are skipped only when CHERRY_NO_EXT=1 asks for the reference,
and fail (not skip) when the extension does not build. Validation tests run either way.
"""
from __future__ import annotations

import os

import pytest
import torch

from cherry.ops import aggregate, reference
from cherry.ops.aggregate import csr_aggregate, edge_softmax
from cherry.ops.extension import extension_available, extension_status

REDUCTIONS = ("sum", "mean", "max")
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA")]),
]


@pytest.fixture(scope="module")
def native():
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        pytest.skip("CHERRY_NO_EXT set: the native ops are disabled on purpose")
    assert extension_available(), f"native extension unavailable: {extension_status()}"


def random_graph(num_dst, num_src, max_deg, seed, device="cpu"):
    """CSC with empty segments (degree 0 drawn), isolated sources (num_src > sources used) and repeats."""
    gen = torch.Generator().manual_seed(seed)
    deg = torch.randint(0, max_deg + 1, (num_dst,), generator=gen)
    if num_dst > 2:
        deg[1] = 0
        deg[-1] = 0
    indptr = torch.zeros(num_dst + 1, dtype=torch.int64)
    indptr[1:] = torch.cumsum(deg, 0)
    used = max(1, num_src - 5)  # the last sources never appear: their gradient must be exactly 0
    indices = torch.randint(0, used, (int(indptr[-1]),), generator=gen)
    return indptr.to(device), indices.to(device)


GRAPHS = {
    "random": (40, 70, 8),
    "single_dst": (1, 30, 25),
    "all_isolated_sources": (5, 9, 0),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_csr_aggregate_matches_reference(native, device, graph, reduce):
    indptr, indices = random_graph(*GRAPHS[graph], seed=1, device=device)
    num_src = GRAPHS[graph][1]
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(num_src, 13, generator=gen).to(device).requires_grad_(True)
    out = csr_aggregate(indptr, indices, x, reduce)
    grad_out = torch.randn(out.shape, generator=gen).to(device)
    (grad_x,) = torch.autograd.grad(out, x, grad_out)
    ref = reference.csr_aggregate(indptr, indices, x, reduce)
    (ref_grad,) = torch.autograd.grad(ref, x, grad_out)
    assert out.shape == ref.shape == (indptr.numel() - 1, 13)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad_x, ref_grad, rtol=1e-6, atol=1e-6)
    assert torch.all(grad_x[-5:] == 0)  # isolated sources


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", ["E", "EH"])
def test_edge_softmax_matches_reference(native, device, shape):
    indptr, _ = random_graph(60, 10, 9, seed=3, device=device)
    num_edges = int(indptr[-1])
    dims = (num_edges,) if shape == "E" else (num_edges, 4)
    gen = torch.Generator().manual_seed(4)
    scores = (3 * torch.randn(dims, generator=gen)).to(device).requires_grad_(True)
    out = edge_softmax(indptr, scores)
    grad_out = torch.randn(dims, generator=gen).to(device)
    (grad_s,) = torch.autograd.grad(out, scores, grad_out)
    ref = reference.edge_softmax(indptr, scores)
    (ref_grad,) = torch.autograd.grad(ref, scores, grad_out)
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad_s, ref_grad, rtol=1e-6, atol=1e-6)
    deg = (indptr[1:] - indptr[:-1]).cpu()
    seg_sums = reference.csr_aggregate(indptr, torch.arange(num_edges, device=device), out.detach().reshape(num_edges, -1), "sum")
    torch.testing.assert_close(seg_sums[deg > 0].cpu(), torch.ones_like(seg_sums[deg > 0].cpu()))


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_csr_aggregate_gradcheck(native, reduce):
    indptr, indices = random_graph(6, 9, 4, seed=5)
    x = torch.randn(9, 3, dtype=torch.float64, requires_grad=True)
    assert aggregate._native_ok("csr_aggregate_forward", x)
    assert torch.autograd.gradcheck(lambda t: csr_aggregate(indptr, indices, t, reduce), (x,))


@pytest.mark.parametrize("shape", [(None,), (None, 3)])
def test_edge_softmax_gradcheck(native, shape):
    indptr, _ = random_graph(6, 5, 4, seed=6)
    dims = tuple(int(indptr[-1]) if d is None else d for d in shape)
    scores = torch.randn(dims, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda s: edge_softmax(indptr, s), (scores,))


def test_max_routes_gradient_to_first_maximum(native):
    indptr = torch.tensor([0, 3])
    indices = torch.tensor([2, 0, 1])
    x = torch.tensor([[5.0], [1.0], [5.0]], requires_grad=True)  # sources 2 and 0 tie
    out = csr_aggregate(indptr, indices, x, "max")
    out.sum().backward()
    assert out.item() == 5.0
    assert x.grad.flatten().tolist() == [0.0, 0.0, 1.0]


def test_max_keeps_the_first_maximum_in_segment_order(native):
    # what a strict '>' scan in edge order keeps: ties go to the first, a NaN first wins, -0.0 == 0.0
    nan = float("nan")
    indptr, indices = torch.tensor([0, 2, 5, 7]), torch.arange(7)
    x = torch.tensor([[nan, 0.0], [1.0, -0.0], [1.0, 2.0], [nan, 2.0], [3.0, 1.0], [-0.0, 5.0], [0.0, 5.0]])
    out, argmax = torch.ops.cherry.csr_aggregate_forward(indptr, indices, x, "max")
    assert argmax.tolist() == [[0, 0], [4, 2], [5, 5]]
    assert torch.isnan(out[0, 0]) and out[1:].tolist() == [[3.0, 2.0], [0.0, 5.0]]
    assert torch.signbit(out[2, 0]) and not torch.signbit(out[0, 1])


def test_trailing_dims_noncontiguous_and_empty(native):
    indptr, indices = random_graph(10, 20, 5, seed=7)
    x = torch.randn(4, 20, 3).permute(1, 0, 2)  # [20, 4, 3], not contiguous
    for reduce in REDUCTIONS:
        torch.testing.assert_close(csr_aggregate(indptr, indices, x, reduce), reference.csr_aggregate(indptr, indices, x, reduce))
    empty = csr_aggregate(torch.zeros(1, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.randn(3, 4))
    assert empty.shape == (0, 4)
    no_edges = csr_aggregate(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.randn(0, 2), "max")
    assert torch.equal(no_edges, torch.zeros(3, 2))
    assert edge_softmax(torch.zeros(3, dtype=torch.int64), torch.zeros(0, 2)).shape == (0, 2)


def test_unsupported_dtype_falls_back_to_reference(native):
    indptr, indices = random_graph(8, 12, 4, seed=8)
    x = torch.randn(12, 5, dtype=torch.bfloat16)
    assert not aggregate._native_ok("csr_aggregate_forward", x)
    assert torch.equal(csr_aggregate(indptr, indices, x, "sum"), reference.csr_aggregate(indptr, indices, x, "sum"))


def test_kernels_reject_bad_indices_themselves(native):
    # Called directly (no Python validation), the CPU kernels must not read out of bounds.
    with pytest.raises(RuntimeError, match="outside"):
        torch.ops.cherry.csr_aggregate_forward(torch.tensor([0, 2]), torch.tensor([0, 9]), torch.randn(3, 2), "sum")
    with pytest.raises(RuntimeError, match="indptr"):
        torch.ops.cherry.edge_softmax_forward(torch.tensor([0, 5]), torch.randn(3))
    with pytest.raises(RuntimeError, match="argmax"):  # max's backward follows argmax: checked too
        torch.ops.cherry.csr_aggregate_backward(torch.tensor([0, 2]), torch.tensor([0, 1]), torch.ones(1, 2),
                                                torch.tensor([[0, 7]]), 3, "max")


def _peak_allocated_bytes(fn) -> int:
    """Peak bytes of CPU allocations made while ``fn`` runs (inside native kernels too), from the
    profiler's allocator events; allocations alive before the call do not count."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    assert events, "profiler recorded no allocations"
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_native_forward_backward_never_allocates_edges_by_features(native, reduce):
    num_dst, num_src, deg, feat = 100, 400, 64, 64  # E = 6400 >> D
    indptr = torch.arange(num_dst + 1) * deg
    indices = torch.randint(0, num_src, (num_dst * deg,), generator=torch.Generator().manual_seed(9))
    x = torch.randn(num_src, feat, requires_grad=True)
    edge_feat_bytes = indices.numel() * feat * 4

    def native_step():
        csr_aggregate(indptr, indices, x, reduce).sum().backward()

    def reference_step():
        reference.csr_aggregate(indptr, indices, x, reduce).sum().backward()

    native_peak = _peak_allocated_bytes(native_step)
    reference_peak = _peak_allocated_bytes(reference_step)
    assert reference_peak >= edge_feat_bytes  # the measurement does see an [E, F] tensor when there is one
    assert native_peak < edge_feat_bytes / 2, (native_peak, edge_feat_bytes)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: csr_aggregate(torch.tensor([0, 2], dtype=torch.int32), torch.tensor([0, 1]), torch.randn(2, 3)), TypeError, "indptr"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([0.0, 1.0]), torch.randn(2, 3)), TypeError, "indices"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([0, 1]), torch.ones(2, 3, dtype=torch.int64)), TypeError, "x_src"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([0, 1]), torch.randn(2)), TypeError, "x_src"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([0, 1]), torch.randn(2, 3), "median"), ValueError, "median"),
        (lambda: csr_aggregate(torch.tensor([0, 3]), torch.tensor([0, 1]), torch.randn(2, 3)), ValueError, "end at len"),
        (lambda: csr_aggregate(torch.tensor([0, 2, 1, 2]), torch.tensor([0, 1]), torch.randn(2, 3)), ValueError, "non-decreasing"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([0, 2]), torch.randn(2, 3)), ValueError, r"\[0, 2\)"),
        (lambda: csr_aggregate(torch.tensor([0, 2]), torch.tensor([-1, 0]), torch.randn(2, 3)), ValueError, "indices"),
        (lambda: csr_aggregate(torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64), torch.randn(2, 3)), ValueError, "at least one"),
        (lambda: edge_softmax(torch.tensor([0, 2]), torch.randn(2, 2, 2)), TypeError, "scores"),
        (lambda: edge_softmax(torch.tensor([0, 2]), torch.tensor([1, 2])), TypeError, "scores"),
        (lambda: edge_softmax(torch.tensor([0, 2]), torch.randn(3)), ValueError, "len\\(scores\\) = 3"),
        (lambda: edge_softmax([0, 2], torch.randn(2)), TypeError, "indptr"),
    ],
)
def test_bad_input_gives_the_promised_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
