"""Models on Blocks: shapes, layer semantics, exactness under slicing, gradients, specs, errors."""
from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from cherry.models import MLP, ModelSpec, build_model, count_parameters
from cherry.models.gat import GATConv
from cherry.models.gcn import GCNConv
from cherry.models.sage import SAGEConv
from cherry.sampling.blocks import Block, Blocks

CONFIGS = [("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None), ("mlp", None)]
GRAPH_CONFIGS = [c for c in CONFIGS if c[0] != "mlp"]
IDS = [f"{m}-{a}" if a else m for m, a in CONFIGS]
GRAPH_IDS = [i for i in IDS if i != "mlp"]
ATOL = 1e-5


def random_blocks(gen: torch.Generator, num_seeds: int, fanouts: list[int], new_per_dst: int = 2) -> Blocks:
    """Random Blocks built top-down: degrees in [0, fanout] (zero-degree destinations included),
    sources drawn with replacement (duplicates and self-edges included)."""
    layers, num_dst = [], num_seeds
    for fanout in reversed(fanouts):
        deg = torch.randint(0, fanout + 1, (num_dst,), generator=gen)
        num_src = num_dst + int(torch.randint(1, new_per_dst * num_dst + 2, (1,), generator=gen))
        indptr = torch.cat([torch.zeros(1, dtype=torch.int64), deg.cumsum(0)])
        indices = torch.randint(0, num_src, (int(deg.sum()),), generator=gen)
        layers.append((num_src, num_dst, indptr, indices))
        num_dst = num_src
    ids = torch.randperm(10 * num_dst, generator=gen)[:num_dst]
    return Blocks(
        layers=tuple(Block(ids[:s], d, ip, ix) for s, d, ip, ix in reversed(layers))
    )


def slice_blocks(blocks: Blocks, seed_positions: list[int]) -> Blocks:
    """Top-down slicing of ``blocks`` to the given seeds (positions among the seeds): each destination
    keeps all of its in-edges in order; sources are the destinations first, then new ones by first use."""
    dst_pos = list(seed_positions)
    sub_layers = []
    for block in reversed(blocks.layers):
        ptr, idx = block.indptr.tolist(), block.indices.tolist()
        local = {p: i for i, p in enumerate(dst_pos)}
        src_pos = list(dst_pos)
        sub_indptr, sub_indices = [0], []
        for d in dst_pos:
            for p in idx[ptr[d] : ptr[d + 1]]:
                if p not in local:
                    local[p] = len(src_pos)
                    src_pos.append(p)
                sub_indices.append(local[p])
            sub_indptr.append(len(sub_indices))
        pos = torch.tensor(src_pos, dtype=torch.int64)
        sub_layers.append(
            Block(block.src_nodes[pos], len(dst_pos), torch.tensor(sub_indptr), torch.tensor(sub_indices, dtype=torch.int64))
        )
        dst_pos = src_pos
    return Blocks(layers=tuple(reversed(sub_layers)), input_positions=torch.tensor(dst_pos, dtype=torch.int64))


def make(model, aggr, num_layers=2, in_dim=6, hidden=8, num_classes=3, seed=0, **kw):
    torch.manual_seed(seed)
    spec = ModelSpec(model=model, aggr=aggr, in_dim=in_dim, hidden=hidden, num_classes=num_classes, num_layers=num_layers, **kw)
    return spec, build_model(spec)


def features(blocks: Blocks, in_dim: int, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(blocks.layers[0].num_src, in_dim, generator=gen)


@pytest.mark.parametrize("num_layers", [1, 2, 3])
@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_output_shape(model, aggr, num_layers):
    blocks = random_blocks(torch.Generator().manual_seed(3), 7, [4] * num_layers)
    spec, net = make(model, aggr, num_layers=num_layers)
    out = net(blocks, features(blocks, spec.in_dim))
    assert out.shape == (7, 3) and out.dtype == torch.float32 and torch.isfinite(out).all()


@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_subset_logits_equal_full_rows(model, aggr):
    gen = torch.Generator().manual_seed(11)
    blocks = random_blocks(gen, 24, [5, 4, 3])
    spec, net = make(model, aggr, num_layers=3)
    x = features(blocks, spec.in_dim)
    with torch.no_grad():
        full = net(blocks, x)
        parts = [list(range(0, 24, 3)), list(range(1, 24, 3)), list(range(2, 24, 3))]
        parts.append(torch.randperm(24, generator=gen)[:5].tolist())
        parts.append([23])
        for part in parts:
            sub = slice_blocks(blocks, part)
            assert sub.num_seeds == len(part)
            out = net(sub, x[sub.input_positions])
            torch.testing.assert_close(out, full[part], atol=ATOL, rtol=0)


@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_accumulated_gradients_equal_full_batch(model, aggr):
    gen = torch.Generator().manual_seed(5)
    blocks = random_blocks(gen, 18, [4, 3])
    spec, net = make(model, aggr)
    x = features(blocks, spec.in_dim)
    labels = torch.randint(0, spec.num_classes, (18,), generator=gen)
    F.cross_entropy(net(blocks, x), labels).backward()
    full = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    parts = ([0, 5, 9, 17], [1, 2, 3, 4, 6], [7, 8] + list(range(10, 17)))  # a partition of the 18 seeds
    assert sorted(sum(parts, [])) == list(range(18))
    for part in parts:
        sub = slice_blocks(blocks, part)
        loss = F.cross_entropy(net(sub, x[sub.input_positions]), labels[part], reduction="sum") / 18
        loss.backward()
    for p, g in zip(net.parameters(), full):
        torch.testing.assert_close(p.grad, g, atol=ATOL, rtol=1e-4)


@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_gradients_reach_every_parameter_and_input(model, aggr):
    blocks = random_blocks(torch.Generator().manual_seed(2), 10, [5, 5])
    spec, net = make(model, aggr)
    x = features(blocks, spec.in_dim).requires_grad_(True)
    net(blocks, x).square().sum().backward()
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, f"{name} got a zero gradient"
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_deterministic_under_manual_seed(model, aggr):
    blocks = random_blocks(torch.Generator().manual_seed(4), 9, [3, 3])
    spec, a = make(model, aggr, seed=123)
    _, b = make(model, aggr, seed=123)
    _, c = make(model, aggr, seed=124)
    x = features(blocks, spec.in_dim)
    assert torch.equal(a(blocks, x), b(blocks, x))
    assert not torch.equal(a(blocks, x), c(blocks, x))


def _permute_segments(block: Block, gen: torch.Generator) -> Block:
    ptr, idx = block.indptr.tolist(), block.indices.clone()
    for d in range(block.num_dst):
        seg = idx[ptr[d] : ptr[d + 1]]
        idx[ptr[d] : ptr[d + 1]] = seg.flip(0) if seg.numel() > 1 else seg
    return Block(block.src_nodes, block.num_dst, block.indptr, idx)


@pytest.mark.parametrize("model,aggr", GRAPH_CONFIGS, ids=GRAPH_IDS)
def test_only_lstm_depends_on_neighbour_order(model, aggr):
    gen = torch.Generator().manual_seed(8)
    blocks = random_blocks(gen, 12, [6])
    # Distinct neighbours per segment so that reversing a segment really changes the sequence.
    block = blocks.layers[0]
    indices = torch.cat([torch.randperm(block.num_src, generator=gen)[: int(d)] for d in block.in_degrees()])
    blocks = Blocks(layers=(Block(block.src_nodes, block.num_dst, block.indptr, indices),))
    permuted = Blocks(layers=(_permute_segments(blocks.layers[0], gen),))
    spec, net = make(model, aggr, num_layers=1)
    x = features(blocks, spec.in_dim)
    with torch.no_grad():
        a, b = net(blocks, x), net(permuted, x)
    if aggr == "lstm":
        assert (a - b).abs().max() > 1e-3
    else:
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


def _reference_layer(conv, block: Block, h: torch.Tensor) -> torch.Tensor:
    """Per-destination loop over the layer's definition, the oracle of the vectorised layers."""
    ptr, rows = block.indptr.tolist(), []
    for d in range(block.num_dst):
        nb = h[block.indices[ptr[d] : ptr[d + 1]]]
        if isinstance(conv, SAGEConv):
            if nb.shape[0] == 0:
                agg = torch.zeros(conv.in_dim)
            elif conv.aggr == "mean":
                agg = nb.mean(0)
            elif conv.aggr == "pool":
                agg = torch.relu(conv.fc_pool(nb)).max(0).values
            else:
                agg = conv.lstm(nb.unsqueeze(0))[1][0][-1, 0]
            rows.append(conv.fc_self(h[d]) + conv.fc_neigh(agg) + conv.bias)
        elif isinstance(conv, GCNConv):
            rows.append(conv.fc((nb.sum(0) + h[d]) / (nb.shape[0] + 1)) + conv.bias)
        else:
            z_nb = conv.fc(nb).view(-1, conv.heads, conv.out_dim)
            z_d = conv.fc(h[d]).view(conv.heads, conv.out_dim)
            e = F.leaky_relu((z_nb * conv.attn_l[0]).sum(-1) + (z_d * conv.attn_r[0]).sum(-1), 0.2)
            out = (torch.softmax(e, 0).unsqueeze(-1) * z_nb).sum(0) + conv.bias
            rows.append(out.flatten() if conv.concat else out.mean(0))
    return torch.stack(rows)


@pytest.mark.parametrize(
    "conv",
    [SAGEConv(6, 4, "mean"), SAGEConv(3, 5, "mean"), SAGEConv(6, 4, "pool"), SAGEConv(6, 4, "lstm"),
     GCNConv(6, 4), GCNConv(3, 5), GATConv(6, 4, 3, concat=True), GATConv(6, 4, 3, concat=False)],
    ids=["sage-mean-narrow", "sage-mean-widen", "sage-pool", "sage-lstm", "gcn-narrow", "gcn-widen",
         "gat-concat", "gat-mean"],
)
def test_layer_matches_per_destination_definition(conv):
    block = random_blocks(torch.Generator().manual_seed(6), 15, [5]).layers[0]
    assert (block.in_degrees() == 0).any() and (block.in_degrees() > 1).any()
    h = torch.randn(block.num_src, conv.in_dim, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(conv(block, h), _reference_layer(conv, block, h), atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(model="no_such_model"), "model must be one of"),
        (dict(model="gcn", aggr="mean"), "aggr is only for model 'sage'"),
        (dict(model="gat", aggr="lstm"), "aggr is only for model 'sage'"),
        (dict(model="sage", aggr="max"), "aggr must be one of"),
        (dict(num_layers=0), "num_layers must be an int >= 1, got 0"),
        (dict(hidden=-4), "hidden must be an int >= 1, got -4"),
        (dict(in_dim=2.5), "in_dim must be an int >= 1"),
        (dict(num_classes=True), "num_classes must be an int >= 1"),
        (dict(model="gat", heads=0), "heads must be an int >= 1"),
        (dict(dropout=1.0), r"dropout must be a number in \[0, 1\)"),
        (dict(dropout=-0.1), r"dropout must be a number in \[0, 1\)"),
    ],
)
def test_bad_spec_raises_one_line_error(kwargs, match):
    base = dict(model="sage", in_dim=4, hidden=8, num_classes=2, num_layers=2)
    with pytest.raises(ValueError, match=match) as info:
        ModelSpec(**{**base, **kwargs})
    assert "\n" not in str(info.value)


def test_spec_defaults_and_layer_dims():
    spec = ModelSpec(model="sage", in_dim=100, hidden=16, num_classes=5, num_layers=3)
    assert spec.aggr == "mean" and spec.dropout == 0.0
    dims = spec.layer_dims()
    assert [(d.in_dim, d.out_dim, d.aggregate_dim) for d in dims] == [(100, 16, 16), (16, 16, 16), (16, 5, 5)]
    gat = ModelSpec(model="gat", in_dim=10, hidden=8, num_classes=4, num_layers=2, heads=3).layer_dims()
    assert [(d.in_dim, d.out_dim, d.heads, d.head_dim, d.is_last) for d in gat] == [
        (10, 24, 3, 8, False), (24, 4, 3, 4, True)]
    lstm = ModelSpec(model="sage", aggr="lstm", in_dim=10, hidden=8, num_classes=4, num_layers=2).layer_dims()
    assert [d.aggregate_dim for d in lstm] == [10, 8] and all(d.heads == 1 for d in lstm)
    with pytest.raises(Exception):
        spec.hidden = 3  # frozen


def test_parameter_count_matches_formula():
    spec, net = make("sage", "mean", in_dim=6, hidden=8, num_classes=3)
    assert count_parameters(net) == (2 * 6 * 8 + 8) + (2 * 8 * 3 + 3)
    spec, net = make("gat", None, in_dim=6, hidden=8, num_classes=3, heads=2)
    per_layer = [(6 * 16 + 3 * 16), (16 * 6 + 3 * 6)]  # W, attn_l, attn_r, bias per head
    assert count_parameters(net) == sum(per_layer)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        count_parameters("model")


def test_mlp_reads_only_seed_rows():
    gen = torch.Generator().manual_seed(9)
    blocks = random_blocks(gen, 6, [3, 3])
    spec, net = make("mlp", None)
    assert isinstance(net, MLP)
    x = features(blocks, spec.in_dim)
    out = net(blocks, x)
    torch.testing.assert_close(out, net.forward_rows(x[:6]))
    x2 = x.clone()
    x2[6:] = 0.0  # non-seed input rows are ignored
    torch.testing.assert_close(net(blocks, x2), out)


def test_forward_rejects_bad_inputs():
    blocks = random_blocks(torch.Generator().manual_seed(1), 5, [3, 3])
    spec, net = make("sage", "mean")
    x = features(blocks, spec.in_dim)
    with pytest.raises(ValueError, match=r"x must have shape \["):
        net(blocks, x[:-1])
    with pytest.raises(ValueError, match=r"x must have shape"):
        net(blocks, x[:, :-1])
    with pytest.raises(TypeError, match="floating-point"):
        net(blocks, x.long())
    with pytest.raises(ValueError, match="blocks has 1 layers but the model has 2"):
        net(Blocks(layers=blocks.layers[1:]), x)
    with pytest.raises(TypeError, match="Blocks"):
        net(blocks.layers, x)
    with pytest.raises(TypeError, match="ModelSpec"):
        build_model({"model": "sage"})


def test_dropout_only_in_training_and_zero_degree_outputs():
    blocks = random_blocks(torch.Generator().manual_seed(12), 20, [3, 3])
    spec, net = make("sage", "mean", dropout=0.5)
    x = features(blocks, spec.in_dim)
    net.eval()
    torch.testing.assert_close(net(blocks, x), net(blocks, x))
    net.train()
    assert not torch.equal(net(blocks, x), net(blocks, x))
    # A GAT destination with no in-edges outputs the (head-averaged) bias.
    conv = GATConv(4, 2, 3, concat=False)
    torch.nn.init.normal_(conv.bias)
    empty = Block(torch.arange(3), 2, torch.zeros(3, dtype=torch.int64), torch.zeros(0, dtype=torch.int64))
    out = conv(empty, torch.randn(3, 4))
    torch.testing.assert_close(out, conv.bias.mean(0).expand(2, 2))


@pytest.mark.parametrize("kind", ["sage-mean", "sage-pool", "sage-lstm", "gat-concat", "gat-mean"])
def test_layer_matches_pyg(kind):
    """Independent oracle: PyG's SAGEConv / GATConv (no self-loops) with the same weights.

    PyG's LSTM aggregation runs over zero-padded neighbour lists and reads the last padded step, so it
    agrees with DGL's (and ours: the last real neighbour's state) only when every degree is equal.
    """
    pyg = pytest.importorskip("torch_geometric.nn")
    block = random_blocks(torch.Generator().manual_seed(13), 15, [5]).layers[0]
    if kind == "sage-lstm":
        num_edges = 4 * block.num_dst
        indices = torch.randint(0, block.num_src, (num_edges,), generator=torch.Generator().manual_seed(15))
        block = Block(block.src_nodes, block.num_dst, torch.arange(0, num_edges + 1, 4), indices)
    h = torch.randn(block.num_src, 6, generator=torch.Generator().manual_seed(14))
    dst = torch.repeat_interleave(torch.arange(block.num_dst), block.in_degrees())
    edge_index, size = torch.stack([block.indices, dst]), (block.num_src, block.num_dst)
    model, _, variant = kind.partition("-")
    with torch.no_grad():
        if model == "sage":
            ours = SAGEConv(6, 4, variant)
            theirs = pyg.SAGEConv(6, 4, aggr="max" if variant == "pool" else variant, project=variant == "pool")
            theirs.lin_l.weight.copy_(ours.fc_neigh.weight)
            theirs.lin_l.bias.copy_(ours.bias)
            theirs.lin_r.weight.copy_(ours.fc_self.weight)
            if variant == "pool":
                theirs.lin.load_state_dict(ours.fc_pool.state_dict())
            if variant == "lstm":
                theirs.aggr_module.lstm.load_state_dict(ours.lstm.state_dict())
        else:
            ours = GATConv(6, 4, 3, concat=variant == "concat")
            torch.nn.init.normal_(ours.bias)
            theirs = pyg.GATConv(6, 4, heads=3, concat=ours.concat, add_self_loops=False)
            theirs.lin.weight.copy_(ours.fc.weight)
            theirs.att_src.copy_(ours.attn_l)
            theirs.att_dst.copy_(ours.attn_r)
            theirs.bias.copy_(ours.bias.flatten() if ours.concat else ours.bias.mean(0))
        expected = theirs((h, h[: block.num_dst]), edge_index, size=size)
        torch.testing.assert_close(ours(block, h), expected, atol=ATOL, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("model,aggr", CONFIGS, ids=IDS)
def test_cuda_matches_cpu(model, aggr):
    blocks = random_blocks(torch.Generator().manual_seed(16), 20, [4, 4])
    spec, net = make(model, aggr)
    x = features(blocks, spec.in_dim)
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False  # exact float32 math
    try:
        with torch.no_grad():
            expected = net(blocks, x)
            out = net.to("cuda")(blocks.to("cuda"), x.to("cuda"))
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    torch.testing.assert_close(out.cpu(), expected, atol=1e-4, rtol=1e-4)
