"""The DGL and PyG baselines: they train and evaluate, compute Cherry's model semantics, and refuse
what they cannot do. PyG's training path runs stock NeighborLoader on the sampling backend `make
install` provides (torch-sparse); it is also exercised with PyG's own NeighborLoader whose native
sampling kernel is replaced by a pure-Python emulation of pyg-lib's, which runs everywhere."""
from __future__ import annotations

import math

import pytest
import torch

from baselines.library import LIBRARY_MODELS
from cherry.systems.contract import SystemUnavailable
from cherry.compat import dgl_available, pyg_sampling_available
from cherry.models.gcn import GCNConv
from cherry.probe import NullProbe
from cherry.sampling import LoadedBatch, NeighborSampler
from cherry.spec import RunSpec, make_spec
from tests.unit.graphs import random_dataset

DGL_OK, DGL_REASON = dgl_available()
needs_dgl = pytest.mark.skipif(not DGL_OK, reason=DGL_REASON)
PYG_SAMPLING_OK, PYG_SAMPLING_REASON = pyg_sampling_available()
needs_pyg_sampling = pytest.mark.skipif(not PYG_SAMPLING_OK, reason=PYG_SAMPLING_REASON)
MODELS = [("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None)]


def config(model="sage", aggr="mean", system="dgl", **overrides) -> RunSpec:
    """A run spec of a library baseline (the dataset name only has to be valid: systems train the
    dataset object they are given)."""
    base = dict(system=system, dataset="synth-tiny", model=model, aggr=aggr, num_layers=2, hidden=8, heads=2,
                dropout=0.5, fanouts=(3, 5), batch_size=32, lr=0.01, num_microbatches=None, budget_bytes=None,
                seed=0, options={})
    base.update(overrides)
    return make_spec(**base)


@pytest.fixture(scope="module")
def dataset():
    return random_dataset(num_nodes=200, avg_degree=6, feature_dim=10)


def run_two_steps(system_cls, dataset, cfg):
    system = system_cls(dataset, cfg, torch.device("cpu"), None, NullProbe())
    gen = torch.Generator().manual_seed(1)
    outcomes = [system.step(LoadedBatch(i, dataset.train_idx[i * 32:(i + 1) * 32], gen)) for i in range(2)]
    return system, outcomes


def check_accuracies(acc):
    assert set(acc) == {"train", "valid", "test"}
    assert all(0.0 <= v <= 1.0 for v in acc.values())


# ------------------------------------------------------------------------------------------- DGL
@needs_dgl
@pytest.mark.parametrize("model,aggr", MODELS)
def test_dgl_trains_two_steps_and_evaluates(dataset, model, aggr):
    from baselines.dgl import SYSTEM

    system, outcomes = run_two_steps(SYSTEM, dataset, config(model, aggr))
    assert all(o.num_microbatches == 1 and math.isfinite(o.loss) for o in outcomes)
    check_accuracies(system.evaluate())


@needs_dgl
def test_dgl_training_lowers_the_loss_on_a_batch(dataset):
    from baselines.dgl import SYSTEM

    system = SYSTEM(dataset, config(dropout=0.0, lr=0.02), torch.device("cpu"), None, NullProbe())
    gen = torch.Generator().manual_seed(1)
    losses = [system.step(LoadedBatch(i, dataset.train_idx[:32], gen)).loss for i in range(8)]
    assert losses[-1] < 0.7 * losses[0], losses


@needs_dgl
def test_dgl_gcn_equals_cherry_gcn(dataset):
    """GraphConv(norm='right') on a block with self edges is Cherry's (h_dst + sum h_u) / (deg + 1)."""
    from baselines.dgl.model import DglModel, with_self_edges
    from cherry.compat.dgl import dgl_graph
    from cherry.compat import import_dgl
    from cherry.models.spec import ModelSpec

    dgl = import_dgl()
    seeds = dataset.train_idx[:40]
    _, _, blocks = dgl.dataloading.MultiLayerFullNeighborSampler(1).sample_blocks(dgl_graph(dgl, dataset.graph), seeds)
    ours = NeighborSampler(dataset.graph, [-1]).sample(seeds).layers[0]
    model = DglModel(dgl, ModelSpec("gcn", dataset.feature_dim, 8, 6, 1))
    conv = model.layers[0]
    torch.nn.init.normal_(conv.bias)
    ref = GCNConv(dataset.feature_dim, 6)
    with torch.no_grad():
        ref.fc.weight.copy_(conv.weight.t())
        ref.bias.copy_(conv.bias)
        got = model.forward_layer(0, with_self_edges(dgl, blocks[0]), dataset.features[blocks[0].srcdata[dgl.NID]])
        want = ref(ours, dataset.features[ours.src_nodes])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------- PyG
def test_pyg_without_sampling_backend_is_unavailable(dataset):
    ok, _ = pyg_sampling_available()
    if ok:
        pytest.skip("a PyG sampling backend is installed here")
    from baselines.pyg import SYSTEM

    with pytest.raises(SystemUnavailable, match="NeighborLoader needs pyg-lib or torch-sparse"):
        SYSTEM(dataset, config(system="pyg"), torch.device("cpu"), None, NullProbe())


def emulated_pyg_lib_sample(self, seed, seed_time=None, **kwargs):
    """pyg-lib's homogeneous directional neighbour sampling (no replacement), in Python: nodes in hop
    order, seeds first; edges (row = sampled neighbour, col = node sampled for) hop by hop; per-hop counts."""
    from torch_geometric.sampler import SamplerOutput

    colptr, row = self.colptr, self.row
    nodes = seed.tolist()
    position = {n: i for i, n in enumerate(nodes)}
    rows, cols, edges, hop_nodes, hop_edges = [], [], [], [len(nodes)], []
    frontier = range(len(nodes))
    for fanout in self.num_neighbors.get_mapped_values():
        begin, count = len(nodes), 0
        for local in frontier:
            lo, hi = int(colptr[nodes[local]]), int(colptr[nodes[local] + 1])
            picks = range(lo, hi) if fanout < 0 or hi - lo <= fanout else (lo + torch.randperm(hi - lo)[:fanout]).tolist()
            for e in picks:
                u = int(row[e])
                if u not in position:
                    position[u] = len(nodes)
                    nodes.append(u)
                rows.append(position[u]), cols.append(local), edges.append(e)
                count += 1
        hop_nodes.append(len(nodes) - begin)
        hop_edges.append(count)
        frontier = range(begin, len(nodes))
    t = lambda v: torch.tensor(v, dtype=torch.int64)  # noqa: E731
    return SamplerOutput(node=t(nodes), row=t(rows), col=t(cols), edge=t(edges), batch=None,
                         num_sampled_nodes=hop_nodes, num_sampled_edges=hop_edges)


@pytest.fixture
def emulated_pyg_sampling(monkeypatch):
    import baselines.pyg.system as pyg_system
    from torch_geometric.sampler import NeighborSampler as PygNeighborSampler

    monkeypatch.setattr(pyg_system, "pyg_sampling_available", lambda: (True, "emulated pyg-lib"))
    monkeypatch.setattr(PygNeighborSampler, "_sample", emulated_pyg_lib_sample)


@pytest.mark.parametrize("model,aggr", MODELS)
def test_pyg_trains_two_steps_and_evaluates(dataset, emulated_pyg_sampling, model, aggr):
    from baselines.pyg import SYSTEM

    system, outcomes = run_two_steps(SYSTEM, dataset, config(model, aggr, system="pyg"))
    assert all(o.num_microbatches == 1 and math.isfinite(o.loss) for o in outcomes)
    check_accuracies(system.evaluate())


@needs_pyg_sampling
@pytest.mark.parametrize("model,aggr", MODELS)
def test_pyg_trains_two_steps_on_its_real_sampling_backend(dataset, model, aggr):
    from baselines.pyg import SYSTEM

    system, outcomes = run_two_steps(SYSTEM, dataset, config(model, aggr))
    assert all(o.num_microbatches == 1 and math.isfinite(o.loss) for o in outcomes)
    check_accuracies(system.evaluate())


@needs_pyg_sampling
@pytest.mark.parametrize("model,aggr", [("sage", "mean"), ("sage", "pool"), ("gat", None)])
def test_pyg_neighbor_loader_with_all_neighbours_gives_the_full_neighbourhood_logits(dataset, model, aggr):
    """Stock NeighborLoader at fanout -1 samples each seed's whole 2-hop in-neighbourhood, so PyG's
    subgraph forward equals the shared full-neighbour layer-wise inference on those seeds."""
    from baselines.pyg import SYSTEM
    from cherry.models.inference import layerwise_inference

    system = SYSTEM(dataset, config(model, aggr, dropout=0.0, fanouts=(-1, -1)), torch.device("cpu"), None,
                    NullProbe())
    seeds = dataset.train_idx[:32]
    batch = system._sample(seeds)
    assert torch.equal(batch.n_id[:32], seeds)
    system.model.eval()
    with torch.no_grad():
        got = system.model.forward_subgraph(dataset.features[batch.n_id], batch.edge_index, 32,
                                            getattr(batch, "num_sampled_nodes", None),
                                            getattr(batch, "num_sampled_edges", None))
        want = layerwise_inference(system.model, dataset.graph, dataset.features, torch.device("cpu"))[seeds]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_pyg_gcn_layer_equals_cherry_gcn(dataset):
    from baselines.pyg.model import PygModel
    from cherry.models.spec import ModelSpec

    block = NeighborSampler(dataset.graph, [-1]).sample(dataset.train_idx[:40]).layers[0]
    model = PygModel(ModelSpec("gcn", dataset.feature_dim, 8, 6, 1)).eval()
    conv = model.layers[0]
    torch.nn.init.normal_(conv.bias)
    ref = GCNConv(dataset.feature_dim, 6)
    with torch.no_grad():
        ref.fc.weight.copy_(conv.lin.weight)
        ref.bias.copy_(conv.bias)
        h = dataset.features[block.src_nodes]
        torch.testing.assert_close(model.forward_layer(0, block, h), ref(block, h), rtol=1e-5, atol=1e-5)


def test_pyg_lstm_inference_is_the_lstm_over_exactly_the_neighbours(dataset, monkeypatch):
    """Degree groups (any size) give Cherry's LSTM aggregate: no padding leaks into the result."""
    import baselines.pyg.model as pyg_model
    from cherry.models.sage import lstm_aggregate
    from cherry.models.spec import ModelSpec

    seeds = torch.cat([dataset.train_idx[:60], torch.tensor([dataset.graph.num_nodes - 1])])  # + an isolated node
    block = NeighborSampler(dataset.graph, [-1]).sample(seeds).layers[0]
    model = pyg_model.PygModel(ModelSpec("sage", dataset.feature_dim, 8, 6, 1, aggr="lstm")).eval()
    conv = model.layers[0]
    h = dataset.features[block.src_nodes]
    with torch.no_grad():
        whole = model.forward_layer(0, block, h)
        monkeypatch.setattr(pyg_model, "LSTM_PADDED_ELEMENTS", 4 * dataset.feature_dim)  # tiny groups
        grouped = model.forward_layer(0, block, h)
        agg = lstm_aggregate(conv.aggr_module.lstm, block, h)
        want = conv.lin_l(agg) + conv.lin_r(h[: block.num_dst])
    torch.testing.assert_close(grouped, whole, rtol=1e-5, atol=1e-6)
    has_edges = block.in_degrees() > 0
    assert not bool(has_edges.all())
    torch.testing.assert_close(whole[has_edges], want[has_edges], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("system_name", ["dgl", "pyg"])
@pytest.mark.parametrize("overrides,match", [
    # all but the model are now checked by the spec (a SpecError is a ValueError), before any system
    (dict(num_microbatches=4), "num_microbatches: system {system} trains the whole batch: K must be 1"),
    (dict(model="mlp", aggr=None), "{system} runs models"),
    (dict(fanouts=(3,)), "fanouts: .* give one per layer"),
    (dict(options={"overlap": True}), "options.*overlap.*options of {system}: none"),
    (dict(aggr="max"), "aggr.*max"),
    (dict(lr=0.0), "lr.*0.0"),
])
def test_bad_config_is_a_value_error(dataset, system_name, overrides, match):
    import importlib

    system_cls = importlib.import_module(f"baselines.{system_name}").SYSTEM
    with pytest.raises(ValueError, match=match.format(system=system_name)):
        system_cls(dataset, config(system=system_name, **overrides), torch.device("cpu"), None, NullProbe())


@pytest.mark.parametrize("system_name", ["dgl", "pyg"])
def test_library_baselines_take_a_run_spec_and_auto_as_k_1(dataset, system_name):
    import importlib

    assert config(system=system_name).num_microbatches == 1  # "auto" for a whole-batch system
    assert config(system=system_name, num_microbatches=1).num_microbatches == 1
    system_cls = importlib.import_module(f"baselines.{system_name}").SYSTEM
    with pytest.raises(TypeError, match="RunSpec"):
        system_cls(dataset, config(system=system_name).to_dict(), torch.device("cpu"), None, NullProbe())


def test_library_models_are_the_graph_models():
    assert LIBRARY_MODELS == ("sage", "gcn", "gat")
