"""cherry.compat: DGL imports and trains on this torch through the hook; PyG's sampling check is truthful."""
import sys
import textwrap

import pytest
import torch

from cherry.compat import dgl as compat_dgl
from cherry.compat import dgl_available, pyg_available, pyg_sampling_available


@pytest.fixture(scope="module")
def dgl():
    ok, reason = dgl_available()
    if not ok:
        pytest.skip(f"dgl cannot be made to import: {reason}")
    return compat_dgl.import_dgl()


# ------------------------------------------------------------------------- the hook itself
def _write_package(root, name, body):
    package = root / name
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(body))


def test_hook_swallows_only_a_failure_inside_the_named_loader(tmp_path, monkeypatch):
    _write_package(tmp_path, "fake_lib_ok", """
        VALUE = 1
        def load_fake():
            raise FileNotFoundError("Cannot find fake C++ library")
        load_fake()
    """)
    _write_package(tmp_path, "fake_lib_broken", """
        raise OSError("a genuine failure outside the loader")
    """)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(compat_dgl._GUARDED, "fake_lib_ok", "load_fake")
    monkeypatch.setitem(compat_dgl._GUARDED, "fake_lib_broken", "load_fake")
    compat_dgl.install_hook()
    try:
        import fake_lib_ok

        assert fake_lib_ok.VALUE == 1
        assert "Cannot find fake" in compat_dgl.skipped_libraries()["fake_lib_ok"]
        with pytest.raises(OSError, match="genuine failure"):
            import fake_lib_broken  # noqa: F401
    finally:
        for name in ("fake_lib_ok", "fake_lib_broken"):
            sys.modules.pop(name, None)
            compat_dgl._skipped.pop(name, None)


def test_hook_declines_every_other_module():
    finder = compat_dgl._DglLibraryFinder()
    for name in ("dgl", "dgl.nn", "torch", "torch_geometric", "json", "graphbolt"):
        assert finder.find_spec(name, None) is None


def test_hook_is_installed_once():
    compat_dgl.install_hook()
    compat_dgl.install_hook()
    assert sum(isinstance(f, compat_dgl._DglLibraryFinder) for f in sys.meta_path) == 1


# ------------------------------------------------------------------------- DGL on this torch
def test_dgl_imports_and_reports_what_it_skipped(dgl):
    ok, reason = dgl_available()
    assert ok and reason.startswith("dgl ")
    import dgl.graphbolt  # noqa: F401  (the subpackages exist as Python modules)
    import dgl.sparse  # noqa: F401

    skipped = compat_dgl.skipped_libraries()
    for name, why in skipped.items():
        assert name in ("dgl.graphbolt", "dgl.sparse") and torch.__version__.split("+")[0] in why


def test_other_libraries_ops_still_work_after_the_hook(dgl):
    assert torch.equal(torch.ops.aten.add(torch.ones(3), 1), torch.full((3,), 2.0))
    from torch_geometric.nn import SAGEConv

    out = SAGEConv(4, 3)(torch.randn(5, 4), torch.tensor([[0, 1, 2], [1, 2, 3]]))
    assert out.shape == (5, 3)
    assert torch.ops.aten.index_add(torch.zeros(2), 0, torch.tensor([1]), torch.ones(1))[1] == 1


def test_dgl_graphsage_training_step_with_neighbor_sampler(dgl):
    torch.manual_seed(0)
    dgl.seed(0)
    num_nodes, width, classes = 400, 16, 5
    graph = dgl.rand_graph(num_nodes, 4000)
    features = torch.randn(num_nodes, width)
    labels = torch.randint(0, classes, (num_nodes,))
    sampler = dgl.dataloading.NeighborSampler([5, 10])
    loader = dgl.dataloading.DataLoader(graph, torch.arange(128), sampler, batch_size=64, shuffle=True)
    layers = torch.nn.ModuleList([dgl.nn.SAGEConv(width, 32, "mean"), dgl.nn.SAGEConv(32, classes, "mean")])
    optimizer = torch.optim.Adam(layers.parameters(), lr=0.01)
    before = [p.detach().clone() for p in layers.parameters()]
    input_nodes, output_nodes, blocks = next(iter(loader))
    assert len(blocks) == 2 and blocks[-1].num_dst_nodes() == len(output_nodes) == 64
    h = features[input_nodes]
    for layer, block in zip(layers, blocks):
        h = torch.relu(layer(block, h)) if layer is layers[0] else layer(block, h)
    loss = torch.nn.functional.cross_entropy(h, labels[output_nodes])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    assert all(not torch.equal(b, p) for b, p in zip(before, layers.parameters()))


def test_dgl_layers_and_graph_functions(dgl):
    torch.manual_seed(1)
    graph = dgl.add_self_loop(dgl.rand_graph(200, 1500))
    x = torch.randn(200, 8)
    for aggregator in ("mean", "pool", "lstm"):
        out = dgl.nn.SAGEConv(8, 4, aggregator)(graph, x)
        out.sum().backward()
        assert out.shape == (200, 4)
    assert dgl.nn.GATConv(8, 4, num_heads=2)(graph, x).shape == (200, 2, 4)
    assert dgl.nn.GraphConv(8, 4)(graph, x).shape == (200, 4)
    seeds = torch.arange(10)
    sub = dgl.in_subgraph(graph, seeds)
    assert sub.num_edges() == int(graph.in_degrees(seeds).sum())
    block = dgl.to_block(sub, seeds)
    assert block.num_dst_nodes() == 10 and block.num_edges() == sub.num_edges()
    parts = dgl.metis_partition(graph, 4)
    owned = torch.cat([p.ndata["_ID"][p.ndata["inner_node"].bool()] for p in parts.values()])
    assert torch.equal(owned.sort().values, torch.arange(200))


def test_import_dgl_failure_is_one_import_error(monkeypatch):
    def broken(name):
        raise FileNotFoundError("Cannot find X\nsecond line")

    monkeypatch.setattr(compat_dgl.importlib, "import_module", broken)
    with pytest.raises(ImportError, match=r"^dgl cannot be imported: FileNotFoundError: Cannot find X$"):
        compat_dgl.import_dgl()
    ok, reason = compat_dgl.dgl_available()
    assert not ok and "Cannot find X" in reason


# ------------------------------------------------------------------------- PyG
def test_pyg_nn_layers_work_without_sampling_libraries():
    from torch_geometric.nn import GATConv, GCNConv, SAGEConv
    from torch_geometric.utils import sort_edge_index

    assert pyg_available()[0]
    torch.manual_seed(0)
    edge_index = sort_edge_index(torch.randint(0, 50, (2, 300)), sort_by_row=False)  # LSTM needs dst-sorted
    x = torch.randn(50, 8)
    for layer in (SAGEConv(8, 4, aggr="lstm"), SAGEConv(8, 4, aggr="mean"), GATConv(8, 4, heads=2), GCNConv(8, 4)):
        out = layer(x, edge_index)
        out.sum().backward()
        assert out.shape[0] == 50


def test_pyg_sampling_check_agrees_with_neighbor_loader():
    from torch_geometric.data import Data
    from torch_geometric.loader import NeighborLoader

    ok, reason = pyg_sampling_available()
    data = Data(x=torch.randn(30, 4), edge_index=torch.randint(0, 30, (2, 120)), num_nodes=30)
    loader = NeighborLoader(data, num_neighbors=[3, 3], batch_size=8, input_nodes=torch.arange(16))
    if ok:
        batch = next(iter(loader))
        assert batch.batch_size == 8 and reason in ("pyg-lib", "torch-sparse")
    else:
        assert "pyg-lib" in reason and "torch-sparse" in reason
        with pytest.raises(ImportError, match="pyg-lib|torch-sparse"):
            next(iter(loader))
