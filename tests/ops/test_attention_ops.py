"""`attention_aggregate`: native kernels against the pure-PyTorch reference on every available device,
both against the materialised-message formula GAT used before the fused op, its memory bound, the GAT
layer's output and gradients unchanged, and the promised errors.

Native tests need the extension; they are skipped only when CHERRY_NO_EXT=1 asks for the reference.
"""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from cherry.data.degree_laws import degree_law_graph
from cherry.models.gat import GATConv
from cherry.ops import aggregate, reference
from cherry.ops.attention import attention_aggregate, attention_aggregate_block
from cherry.sampling import NeighborSampler
from tests.ops.test_aggregate_ops import DEVICES, GRAPHS, _peak_allocated_bytes, native, random_graph  # noqa: F401

HEADS, FEAT = 3, 5


def materialised(indptr, indices, z, alpha):
    """The formula GAT computed before the fused op: [E, H, F] messages, then a segment sum."""
    messages = z.index_select(0, indices) * alpha.unsqueeze(-1)
    return reference.csr_aggregate(indptr, torch.arange(indices.numel(), device=indices.device),
                                   messages.reshape(indices.numel(), z.shape[1] * z.shape[2]), "sum").view(-1, *z.shape[1:])


def _inputs(graph, device, dtype=torch.float32, seed=2):
    indptr, indices = random_graph(*GRAPHS[graph], seed=1, device=device)
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(GRAPHS[graph][1], HEADS, FEAT, generator=gen, dtype=dtype).to(device).requires_grad_(True)
    alpha = torch.rand(indices.numel(), HEADS, generator=gen, dtype=dtype).to(device).requires_grad_(True)
    return indptr, indices, z, alpha


def _value_and_grads(fn, indptr, indices, z, alpha, grad_out):
    out = fn(indptr, indices, z, alpha)
    return (out, *torch.autograd.grad(out, (z, alpha), grad_out))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("graph", sorted(GRAPHS))
def test_native_matches_reference_and_materialised(native, device, graph):
    indptr, indices, z, alpha = _inputs(graph, device)
    assert aggregate._native_ok("attention_aggregate_forward", z)
    grad_out = torch.randn(indptr.numel() - 1, HEADS, FEAT, generator=torch.Generator().manual_seed(3)).to(device)
    ours = _value_and_grads(attention_aggregate, indptr, indices, z, alpha, grad_out)
    for oracle in (reference.attention_aggregate, materialised):
        for got, want in zip(ours, _value_and_grads(oracle, indptr, indices, z, alpha, grad_out)):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert torch.all(ours[1][-5:] == 0)  # isolated sources get no gradient


@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_reference_chunks_match_materialised(monkeypatch, chunk):
    monkeypatch.setattr(reference, "ATTENTION_EDGE_CHUNK", chunk)
    indptr, indices, z, alpha = _inputs("random", "cpu", torch.float64)
    grad_out = torch.randn(indptr.numel() - 1, HEADS, FEAT, dtype=torch.float64)
    got = _value_and_grads(reference.attention_aggregate, indptr, indices, z, alpha, grad_out)
    want = _value_and_grads(materialised, indptr, indices, z, alpha, grad_out)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12)


def test_native_gradcheck(native):
    indptr, indices = random_graph(6, 9, 4, seed=5)
    z = torch.randn(9, 2, 3, dtype=torch.float64, requires_grad=True)
    alpha = torch.rand(indices.numel(), 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: attention_aggregate(indptr, indices, a, b), (z, alpha))


def test_empty_graph_and_fallback_dtype(native):
    out = attention_aggregate(torch.zeros(4, dtype=torch.int64), torch.zeros(0, dtype=torch.int64),
                              torch.randn(2, 3, 4), torch.zeros(0, 3))
    assert torch.equal(out, torch.zeros(3, 3, 4))
    indptr, indices, z, alpha = _inputs("random", "cpu", torch.bfloat16)
    assert not aggregate._native_ok("attention_aggregate_forward", z)
    torch.testing.assert_close(attention_aggregate(indptr, indices, z, alpha),
                               reference.attention_aggregate(indptr, indices, z, alpha))


@pytest.mark.parametrize("path", ["native", "reference"])
def test_forward_backward_never_allocate_edges_by_heads_by_features(native, monkeypatch, path):
    num_dst, num_src, deg, heads, feat = 100, 400, 64, 4, 32  # E = 6400 >> D
    if path == "reference":  # chunks of 256 edges: a [256, H, F] transient, far below [E, H, F]
        monkeypatch.setattr(reference, "ATTENTION_EDGE_CHUNK", 256)
    indptr = torch.arange(num_dst + 1) * deg
    indices = torch.randint(0, num_src, (num_dst * deg,), generator=torch.Generator().manual_seed(9))
    z = torch.randn(num_src, heads, feat, requires_grad=True)
    alpha = torch.rand(indices.numel(), heads, requires_grad=True)
    fn = attention_aggregate if path == "native" else reference.attention_aggregate
    edge_feat_bytes = indices.numel() * heads * feat * 4
    assert _peak_allocated_bytes(lambda: materialised(indptr, indices, z, alpha).sum().backward()) >= edge_feat_bytes
    peak = _peak_allocated_bytes(lambda: fn(indptr, indices, z, alpha).sum().backward())
    assert peak < edge_feat_bytes / 2, (peak, edge_feat_bytes)


def _gat_before(conv: GATConv, block, h):
    """GATConv's forward as it was before the fused op (materialised messages), the same parameters."""
    z = conv.fc(h).view(-1, conv.heads, conv.out_dim)
    score_src, score_dst = (z * conv.attn_l).sum(-1), (z[:block.num_dst] * conv.attn_r).sum(-1)
    edge_dst = torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees())
    logits = F.leaky_relu(score_src[block.indices] + score_dst[edge_dst], conv.negative_slope)
    alpha = reference.edge_softmax(block.indptr, logits)
    out = materialised(block.indptr, block.indices, z, alpha) + conv.bias
    return out.flatten(1) if conv.concat else out.mean(1)


@pytest.mark.parametrize("concat", [True, False])
def test_gat_layer_unchanged(concat):
    graph = degree_law_graph("barabasi-albert", 600, seed=1)
    gen = torch.Generator().manual_seed(0)
    block = NeighborSampler(graph, [6]).sample(torch.randperm(600, generator=gen)[:64], gen).layers[0]
    torch.manual_seed(0)
    conv = GATConv(7, 4, 3, concat=concat)
    h = torch.randn(block.src_nodes.numel(), 7)
    grad_out = torch.randn(block.num_dst, 12 if concat else 4)
    results = []
    for forward in (conv, lambda b, x: _gat_before(conv, b, x)):
        out = forward(block, h)
        results.append((out, *torch.autograd.grad(out, list(conv.parameters()), grad_out)))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_kernel_rejects_bad_indices_itself(native):
    with pytest.raises(RuntimeError, match="outside"):
        torch.ops.cherry.attention_aggregate_forward(torch.tensor([0, 2]), torch.tensor([0, 9]), torch.randn(3, 1, 2),
                                                     torch.ones(2, 1))


_OK = dict(indptr=torch.tensor([0, 2]), indices=torch.tensor([0, 1]), z=torch.randn(2, 3, 4), alpha=torch.ones(2, 3))


def _call(**changes):
    args = {**_OK, **changes}
    return lambda: attention_aggregate(args["indptr"], args["indices"], args["z"], args["alpha"])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (_call(indptr=torch.tensor([0, 2], dtype=torch.int32)), TypeError, "indptr"),
        (_call(indices=torch.tensor([0.0, 1.0])), TypeError, "indices"),
        (_call(z=torch.randn(2, 12)), TypeError, r"z must be a floating tensor \[num_src, heads, features\]"),
        (_call(alpha=torch.ones(2, 3, dtype=torch.float64)), TypeError, "alpha must be"),
        (_call(alpha=torch.ones(2, 2)), ValueError, r"\[num_edges, heads\] = \[2, 3\], got \[2, 2\]"),
        (_call(indptr=torch.tensor([0, 3])), ValueError, "end at len"),
        (_call(indices=torch.tensor([0, 2])), ValueError, r"\[0, 2\)"),
        (lambda: attention_aggregate_block(object(), _OK["z"], _OK["alpha"]), TypeError, "Block"),
    ],
)
def test_bad_input_gives_the_promised_error(call, error, match):
    with pytest.raises(error, match=match):
        call()
