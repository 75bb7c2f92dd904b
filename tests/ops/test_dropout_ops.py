"""``cherry::node_dropout`` (exact dropout without a stored mask) against its reference and against the
mask formula of `cherry.models.dropout` as it was before the op existed, on every device: bit-identical
outputs and gradients, only the [R] states saved for backward, and O(output) memory."""
from __future__ import annotations

import pytest
import torch

from cherry.memory import TensorMemoryTracker
from cherry.models.dropout import apply_dropout, dropout_keep, dropout_states, layer_seed
from cherry.ops import dropout as dropout_op
from cherry.ops import extension_available, node_dropout
from cherry.ops import reference_dropout as ref
from cherry.ops.reference_sampling import mix32, node_states

HAS_OP = extension_available() and hasattr(torch.ops.cherry, "node_dropout")  # (a stale build lacks it)
needs_ext = pytest.mark.skipif(not HAS_OP, reason="the native extension with node_dropout is not in use")
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.gpu,
                                pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]),
]
# (rows, width, p, step seed, layer): widths not a multiple of anything, wider than a reference chunk,
# p at 0 and near the ends, seeds and layers as NodeDropout (-1: input) and ExactDropout (2**20 + ...) use them
CASES = [(1, 1, 0.5, 0, 0), (300, 37, 0.5, 7, -1), (4000, 37, 0.1, 2**63 + 5, 1), (129, 745, 0.9, 123, 0),
         (5, 70001, 0.3, 9, 2**20 + 65), (64, 3, 0.0, 1, 2), (77, 13, 2.0**-33, 4, 0), (50, 17, 0.999, 11, 0)]


def legacy_output(h, nodes, p, step_seed, layer):
    """The dropout of `cherry.models.dropout` before the op: a whole [R, F] int64 mask, then
    ``h * keep * (1 / (1 - p))`` (kept verbatim: the oracle of bit-identity)."""
    state = node_states(layer_seed(step_seed, layer), nodes)
    words = mix32(state.unsqueeze(1) ^ torch.arange(h.shape[1], dtype=torch.int64, device=nodes.device))
    keep = words >= int(round(p * (0xFFFFFFFF + 1)))
    return h * keep.to(h.dtype) * (1.0 / (1.0 - p))


def _nodes(rows, seed, device="cpu"):
    """Random global ids, a third of them at or above 2**32 (their high word enters the state)."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 2**40, (rows,), generator=gen)
    ids[::3] = torch.randint(0, 2**20, (ids[::3].numel(),), generator=gen)
    return ids.to(device)


def _features(rows, width, seed, dtype=torch.float32, device="cpu"):
    gen = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(rows, width, generator=gen, dtype=torch.float64) * 3).to(dtype).to(device)


@pytest.mark.parametrize("case", CASES)
def test_reference_is_bit_identical_to_the_legacy_mask(case):
    rows, width, p, seed, layer = case
    nodes, h = _nodes(rows, seed), _features(rows, width, seed)
    states = dropout_states(nodes, seed, layer)
    out = ref.node_dropout(h, states, dropout_op.dropout_threshold(p), 1.0 / (1.0 - p))
    want = legacy_output(h, nodes, p, seed, layer)
    assert torch.equal(out.view(torch.int32), want.view(torch.int32))  # bits, signed zeros included
    assert torch.equal(dropout_keep(nodes, width, p, seed, layer), want != 0)  # (h has no zeros)


@needs_ext
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", CASES)
def test_native_forward_and_backward_are_bit_identical(device, dtype, case):
    rows, width, p, seed, layer = case
    nodes = _nodes(rows, seed, device)
    h = _features(rows, width, seed, dtype, device)
    h[0, 0] = float("nan")  # a dropped NaN stays NaN, as in x * 0
    mine, old = h.clone().requires_grad_(), h.clone().requires_grad_()
    out = apply_dropout(mine, nodes, p, seed, layer)
    want = legacy_output(old, nodes, p, seed, layer)
    grad = _features(rows, width, seed + 7, dtype, device)
    out.backward(grad)
    want.backward(grad)
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    assert torch.equal(out.detach().view(bits), want.detach().view(bits))
    assert torch.equal(mine.grad.view(bits), old.grad.view(bits))


@pytest.fixture(params=["reference", "native"])
def way(request, monkeypatch):
    """Which implementation `node_dropout` runs in the test: the reference or the native kernel."""
    if request.param == "native" and not HAS_OP:
        pytest.skip("the native extension with node_dropout is not in use")
    if request.param == "reference":
        monkeypatch.setattr(dropout_op, "_native_ok", lambda op, t: False)
    return request.param


def test_autograd_saves_only_the_states_and_differentiates_twice(way):
    rows, width = 200, 33
    h = _features(rows, width, 3, torch.float64).requires_grad_()
    states = dropout_states(_nodes(rows, 3), 5, 0)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(tuple(t.shape)) or t, lambda t: t):
        out = node_dropout(h, states, 0.4)
    assert saved and all(shape == (rows,) for shape in saved), saved  # never an [R, F] mask
    (grad,) = torch.autograd.grad(out.sum(), h, create_graph=True)
    assert torch.equal(grad, (out.detach() != 0).to(h.dtype) * (1 / (1 - 0.4)))  # keep * scale (h has no zeros)
    (second,) = torch.autograd.grad((grad * h).sum(), h)
    assert torch.equal(second, grad.detach())
    torch.autograd.gradcheck(lambda x: node_dropout(x, states[:20], 0.4), (h[:20, :5].detach().clone().requires_grad_(),))


def test_memory_is_the_output_only(way):
    """Forward holds the output and an O(chunk) transient; the legacy mask held several [R, F] int64."""
    rows, width = 3000, 745
    h = _features(rows, width, 1).requires_grad_()
    nodes = _nodes(rows, 1)
    out_bytes = h.numel() * h.element_size()
    with TensorMemoryTracker() as tracker:
        out = apply_dropout(h, nodes, 0.5, 9, -1)
        forward_peak, kept = tracker.peak_bytes, tracker.live_bytes
        out.sum().backward()
    states_bytes = 64 * rows  # the [R] states and node_states' [R] temporaries
    assert kept <= out_bytes + states_bytes
    assert forward_peak <= out_bytes + (0 if way == "native" else ref.transient_bytes(width)) + states_bytes
    with TensorMemoryTracker() as tracker:
        legacy_output(h.detach(), nodes, 0.5, 9, -1)
    assert tracker.peak_bytes > 4 * out_bytes  # what the op avoids (the check can fail: it measures)


def test_layers_use_the_op_and_fall_back_to_the_reference(monkeypatch):
    """NodeDropout and ExactDropout give the legacy bits through the op, with or without the extension."""
    from cherry.models import ExactDropout, NodeDropout, node_rows
    from cherry.sampling.blocks import Block

    rows, width = 90, 19
    nodes, h = _nodes(rows, 2), _features(rows, width, 2)
    block = Block(src_nodes=nodes, num_dst=40, indptr=torch.zeros(41, dtype=torch.int64),
                  indices=torch.zeros(0, dtype=torch.int64))
    calls = []
    real = dropout_op._ReferenceDropout.apply
    monkeypatch.setattr(dropout_op._ReferenceDropout, "apply", lambda *a: calls.append(1) or real(*a))
    for native in ([True, False] if HAS_OP else [False]):
        if not native:
            monkeypatch.setattr(dropout_op, "_native_ok", lambda op, t: False)
        node, exact = NodeDropout(0.3).train(), ExactDropout(0.3).train()
        node.step_seed = exact.step_seed = 17
        assert torch.equal(node(h, nodes, 2), legacy_output(h, nodes, 0.3, 17, 2))
        with node_rows(block, 1):
            got = exact(h[:40].reshape(40, 1, width))
        want = legacy_output(h[:40], nodes[:40], 0.3, 17, (1 << 20) + 64)
        assert torch.equal(got, want.reshape(40, 1, width))
        assert bool(calls) is not native  # the reference ran exactly when the native op could not
        calls.clear()


def test_bad_input_is_one_line_before_any_work():
    h, states = torch.ones(4, 3), torch.zeros(4, dtype=torch.int64)
    bad = [((h, states, 1.0), ValueError, r"dropout probability must be a number in \[0, 1\), got 1.0"),
           ((h, states, True), ValueError, "got True"),
           ((h.long(), states, 0.5), TypeError, "x must be a 2-D floating tensor"),
           ((h[0], states, 0.5), TypeError, "x must be a 2-D floating tensor"),
           ((h, states.int(), 0.5), TypeError, "states must be a 1-D int64 tensor"),
           ((h, states[:3], 0.5), ValueError, "3 states for 4 rows")]
    for args, exc, match in bad:
        with pytest.raises(exc, match=match):
            node_dropout(*args)
