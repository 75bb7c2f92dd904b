"""`cherry bench ops` runs end to end on a tiny graph and prints every comparison and target."""
from __future__ import annotations

import pytest
import torch

from benchmarks.ops import chung_lu_graph, message_passing_mean
from cherry.cli import main
from cherry.compat import dgl_available
from cherry.ops import csr_aggregate
from cherry.sampling import NeighborSampler

TINY = ["bench", "ops", "--synthetic-nodes", "600", "--batch-size", "48", "--fanouts", "3,5",
        "--repeats", "1", "--features", "16", "--threads", "1"]


def test_bench_ops_prints_all_sections_and_targets(capsys):
    assert main(TINY) == 0
    out = capsys.readouterr().out
    for text in ("(1) sampling", "cherry NeighborSampler (native)", "cherry reference sampler",
                 "(2) splitting", "cherry slice_blocks", "(3) mean aggregation", "cherry csr_aggregate",
                 "pyg-style index_select + scatter", "fused / message-passing peak"):
        assert text in out
    assert ("pyg NeighborLoader" in out) or ("pyg: skipped (" in out)
    if dgl_available()[0]:
        assert "dgl NeighborSampler.sample_blocks" in out and "sampler vs DGL" in out
        assert "same inputs" in out  # DGL's rebuilt micro-batches read the same input nodes as the slices


def test_message_passing_baseline_computes_the_same_mean():
    graph = chung_lu_graph(300, 5.0, torch.Generator().manual_seed(0))
    block = NeighborSampler(graph, [4]).sample(torch.arange(40), torch.Generator().manual_seed(0)).layers[0]
    x = torch.randn(block.num_src, 8)
    torch.testing.assert_close(message_passing_mean(block.indptr, block.indices, x),
                               csr_aggregate(block.indptr, block.indices, x, "mean"))


def test_chung_lu_graph_has_the_asked_size():
    graph = chung_lu_graph(1000, 4.0, torch.Generator().manual_seed(0))
    assert graph.num_nodes == 1000
    assert 3500 <= graph.num_edges <= 4000  # self-loops are dropped
    assert int(graph.in_degrees().max()) > 10 * 4  # heavy-tailed: hubs


@pytest.mark.parametrize("argv,message", [
    (TINY[:-2] + ["--microbatches", "100"], "--microbatches 100 exceeds --batch-size 48"),
    (["bench", "ops", "--synthetic-nodes", "30", "--batch-size", "64"], "--batch-size 64 exceeds"),
])
def test_bench_ops_bad_sizes_are_one_line_errors(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_bench_ops_rejects_a_bad_fanout():
    with pytest.raises(SystemExit) as exc:
        main(["bench", "ops", "--fanouts", "0,5"])
    assert exc.value.code == 2
