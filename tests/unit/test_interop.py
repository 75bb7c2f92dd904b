"""cherry.interop: DGL and PyG models on Cherry's blocks, exact under micro-batching."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from cherry.compat import dgl_available
from cherry.execution import ExactnessError, check_exact
from cherry.sampling import NeighborSampler, sampling_generator
from tests.unit.library_models import DGLNet, PyGNet, dgl_nn, pyg_nn


@pytest.fixture(scope="module")
def blocks(synth_tiny):
    return NeighborSampler(synth_tiny.graph, [4, 6]).sample(synth_tiny.train_idx[:50], sampling_generator(2))


def test_dgl_blocks_have_cherrys_adjacency(blocks):
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(reason)
    from cherry.interop import to_dgl_blocks

    for ours, theirs in zip(blocks.layers, to_dgl_blocks(blocks)):
        assert (theirs.num_src_nodes(), theirs.num_dst_nodes()) == (ours.num_src, ours.num_dst)
        assert torch.equal(theirs.in_degrees(), ours.in_degrees())
        src, dst = theirs.edges(order="eid")
        assert torch.equal(src, ours.indices)  # same edges, in Cherry's CSC order
        assert torch.equal(dst, torch.repeat_interleave(torch.arange(ours.num_dst), ours.in_degrees()))


def test_pyg_adjs_are_the_per_hop_bipartite_form(blocks):
    from cherry.interop import to_pyg_adjs

    adjs = to_pyg_adjs(blocks)
    assert [a.size for a in adjs] == [(b.num_src, b.num_dst) for b in blocks.layers]
    for a, b in zip(adjs, blocks.layers):
        assert torch.equal(a.edge_index[0], b.indices)
        assert torch.equal(torch.bincount(a.edge_index[1], minlength=b.num_dst), b.in_degrees())


def test_dgl_gat_with_dropout_is_exact_and_batchnorm_is_refused(synth_tiny):
    dglnn = dgl_nn()
    from cherry.interop import from_dgl

    def gat(norm=None):
        return DGLNet(dglnn.GATConv(synth_tiny.feature_dim, 8, 2, allow_zero_in_degree=True),
                      dglnn.GATConv(16, synth_tiny.num_classes, 1, allow_zero_in_degree=True), 0.4, norm=norm)

    torch.manual_seed(0)
    report = check_exact(from_dgl(gat()), synth_tiny, num_microbatches=5, batch_size=150)
    assert report.ok and report.max_rel_diff < 1e-5
    with pytest.raises(ExactnessError, match=r"inner\.norm \(BatchNorm1d\)"):
        from_dgl(gat(norm=nn.BatchNorm1d(16)))


def test_pyg_gcn_is_exact(synth_tiny):
    pygnn = pyg_nn()
    from cherry.interop import from_pyg

    convs = [pygnn.GraphConv(synth_tiny.feature_dim, 16, aggr="max"), pygnn.GraphConv(16, synth_tiny.num_classes)]
    torch.manual_seed(0)
    assert check_exact(from_pyg(PyGNet(convs, 0.5)), synth_tiny, num_microbatches=4, batch_size=150).ok


def test_interop_benchmark_runs_and_reports_a_ratio(synth_tiny, data_root, tmp_path):
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(reason)
    import json

    from cherry.cli import main

    out = tmp_path / "interop.json"
    assert main(["bench", "interop", "--dataset", "synth-tiny", "--root", str(data_root), "--batch-size", "128",
                 "--fanouts", "3,3", "--hidden", "8", "--steps", "4", "--warmup", "1", "--round", "2",
                 "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    low, high = result["ratio_interval"]
    assert low <= result["ratio_dgl_over_cherry"] <= high and result["K"] == 4
