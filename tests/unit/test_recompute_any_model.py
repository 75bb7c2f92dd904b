"""Recomputation for models without ``forward_layer``: DGL and PyG models through the adapters and whole
models on Cherry's blocks checkpoint the modules called with one layer's graph, exactly (same gradient
as without recomputation, dropout inside a unit included); a model with no such module is refused in
one line; a probe-priced model's recomputation is priced from measured recomputed peaks."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.execution.exactness import guard_model
from cherry.execution.memory_probe import probe_costs, with_probed_costs
from cherry.execution.recompute import can_recompute, recomputed
from cherry.execution.recompute_probe import recomputed_peaks, with_probed_recompute
from cherry.models import ModelSpec, build_model
from cherry.models.dropout import set_dropout_step
from cherry.ops import aggregate_block
from cherry.planning import MemoryModel
from cherry.sampling import NeighborSampler, sampling_generator
from cherry.spec import make_spec
from tests.unit.graphs import random_dataset
from tests.unit.library_models import DGLNet, PyGNet, dgl_nn, pyg_nn


@pytest.fixture(scope="module")
def graph():
    ds = random_dataset(num_nodes=300, avg_degree=6)
    blocks = NeighborSampler(ds.graph, [4, 5]).sample(ds.train_idx[:24], sampling_generator(4))
    return ds, blocks


def _dgl_gat(in_dim, num_classes):
    dglnn = dgl_nn()
    from cherry.interop.dgl import DGLModel

    # feat_drop: a dropout inside each unit; the net's dropout: one between units
    return DGLModel(DGLNet(dglnn.GATConv(in_dim, 8, 4, feat_drop=0.3, allow_zero_in_degree=True),
                           dglnn.GATConv(32, num_classes, 1, feat_drop=0.3, allow_zero_in_degree=True), 0.5))


def _pyg_gat(in_dim, num_classes):
    pygnn = pyg_nn()
    from cherry.interop.pyg import PyGModel

    return PyGModel(PyGNet([pygnn.GATConv(in_dim, 8, heads=4), pygnn.GATConv(32, num_classes)], 0.5))


class _Layer(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.lin, self.drop = nn.Linear(in_dim, out_dim), nn.Dropout(0.4)

    def forward(self, block, h):
        return self.lin(self.drop(h)[: block.num_dst] + aggregate_block(block, h, "mean"))


class _WholeModel(nn.Module):
    """A whole model on Cherry's blocks that loops its own layers (no forward_layer)."""

    def __init__(self, in_dim, num_classes):
        super().__init__()
        self.layers = nn.ModuleList([_Layer(in_dim, 16), _Layer(16, num_classes)])

    def forward(self, blocks, x):
        for i, (layer, block) in enumerate(zip(self.layers, blocks.layers)):
            x = layer(block, x)
            x = x.relu() if i == 0 else x
        return x


class _NoUnits(nn.Module):
    """Reads the seeds' rows only: no module is ever called with a layer's block."""

    def __init__(self, in_dim, num_classes):
        super().__init__()
        self.lin = nn.Linear(in_dim, num_classes)

    def forward(self, blocks, x):
        return self.lin(x[: blocks.num_seeds])


def _gradients(model, ds, blocks, k, recompute):
    options = ExecutorOptions(num_microbatches=k, budget_bytes=None, stage_features=False, pipeline=False,
                              balance="count", safety=0.0, recover_oom=False, dropout_seed=11, recompute=recompute)
    spec = ModelSpec("sage", ds.feature_dim, 16, ds.num_classes, 2)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec), options)
    try:
        stats = ex.accumulate(blocks, ds.features, ds.labels)
        assert stats.recompute == (recompute == "on")
        return [g.clone() for g in ex.gradients()]
    finally:
        ex.close()


@pytest.mark.parametrize("build", [_dgl_gat, _pyg_gat, _WholeModel], ids=["dgl_gat", "pyg_gat", "whole_model"])
def test_recomputed_units_give_the_whole_batch_gradient_with_dropout_inside_them(graph, build):
    ds, blocks = graph
    torch.manual_seed(0)
    model = guard_model(build(ds.feature_dim, ds.num_classes))
    assert can_recompute(model)
    reference = _gradients(model, ds, blocks, 1, "off")
    for k in (1, 5):
        got = _gradients(model, ds, blocks, k, "on")
        for r, g in zip(reference, got, strict=True):
            assert torch.allclose(r, g, rtol=1e-5, atol=1e-6), (k, (r - g).abs().max())
    assert can_recompute(model)  # the units ran: the model is not marked


def test_a_dropout_drawing_from_torchs_generator_draws_the_same_mask_when_recomputed(graph):
    """A unit's recomputation restores the RNG state its forward saw (preserve_rng_state): an unguarded
    ``nn.Dropout`` and an ``F.dropout`` inside a unit give the same gradient recomputed or not."""
    ds, blocks = graph

    class Layer(_Layer):
        def forward(self, block, h):
            return F.dropout(super().forward(block, h), 0.5, True)

    class Model(_WholeModel):
        def __init__(self):
            super().__init__(ds.feature_dim, ds.num_classes)
            self.layers = nn.ModuleList([Layer(ds.feature_dim, 16), Layer(16, ds.num_classes)])

    torch.manual_seed(0)
    model = Model()  # not guarded: every dropout draws from torch's generator
    x, y = ds.features[blocks.input_nodes], ds.labels[blocks.seeds]

    def grads(recompute):
        torch.manual_seed(7)
        with recomputed(model) if recompute else torch.enable_grad():
            loss = F.cross_entropy(model(blocks, x), y)
        return torch.autograd.grad(loss, list(model.parameters()))

    for a, b in zip(grads(False), grads(True), strict=True):
        assert torch.equal(a, b)


def test_recompute_on_without_layer_units_is_one_line_naming_the_model(graph):
    ds, blocks = graph
    mlp = build_model(ModelSpec("mlp", ds.feature_dim, 16, ds.num_classes, 2))
    assert not can_recompute(mlp)
    with pytest.raises(ValueError, match=r"^model MLP has no layer unit") as err:
        _gradients(mlp, ds, blocks, 2, "on")
    assert "\n" not in str(err.value)
    model = _NoUnits(ds.feature_dim, ds.num_classes)
    assert can_recompute(model)  # unknown until a forward ran it
    with pytest.raises(ValueError, match=r"^model _NoUnits has no layer unit"):
        with recomputed(model):
            model(blocks, ds.features[blocks.input_nodes])
    assert not can_recompute(model)  # found out once, refused before any work from then on
    with pytest.raises(ValueError, match=r"^model _NoUnits has no layer unit"):
        _gradients(model, ds, blocks, 2, "on")


def test_a_probe_priced_models_recomputation_is_priced_from_measured_peaks(graph):
    ds, _ = graph
    torch.manual_seed(0)
    model = guard_model(_WholeModel(ds.feature_dim, ds.num_classes))
    spec = make_spec(dataset="synth-tiny", model="sage", hidden=16, fanouts=(4, 5), batch_size=64, seed=0)
    analytic = MemoryModel.for_model(ModelSpec("sage", ds.feature_dim, 16, ds.num_classes, 2))
    probed = with_probed_costs(analytic, probe_costs(model, ds, spec.fanouts, spec.batch_size))
    priced = with_probed_recompute(probed, model, ds, spec)
    assert priced.recompute_factor != probed.recompute_factor and priced.costs == probed.costs
    # the fit through the origin: the larger recomputed probe (which weighs most) is priced within 5%
    peaks = recomputed_peaks(model, ds, spec.fanouts, spec.batch_size, seed=spec.seed)
    shape, peak = max(peaks, key=lambda p: probed.activation_bytes(p[0], recompute=True))
    assert priced.estimate_bytes(shape, recompute=True) == pytest.approx(peak, rel=0.05)
    # no layer unit: the price stays, the model is marked, the planner never chooses recomputation
    none = guard_model(_NoUnits(ds.feature_dim, ds.num_classes))
    assert with_probed_recompute(probed, none, ds, spec) is probed and not can_recompute(none)


class _WideLayer(nn.Module):
    """A layer whose own activations (a 32-fold widening) outweigh its input and its parameters."""

    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.gain, self.lin = nn.Parameter(torch.linspace(-1, 1, 32 * in_dim)), nn.Linear(in_dim, out_dim)

    def forward(self, block, h):
        a = h[: block.num_dst] + aggregate_block(block, h, "mean")
        wide = torch.relu(a.repeat(1, 32) * self.gain)
        return self.lin(wide.view(a.shape[0], 32, -1).mean(1))


LAYERS = 5


def test_the_planner_chooses_recomputation_for_a_whole_model_below_one_seed():
    """A whole model (probe-priced, no forward_layer) under a budget of 0.8 of its one-seed peak trains
    with recomputation chosen by the planner from the probes' price: within the budget, same losses."""
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory

    ds = random_dataset(num_nodes=300, avg_degree=20)  # one seed's 3 outer hops hold every node: alike layers

    class Model(_WholeModel):
        def __init__(self):
            super().__init__(ds.feature_dim, ds.num_classes)
            dims = [ds.feature_dim] + [16] * (LAYERS - 1) + [ds.num_classes]
            self.layers = nn.ModuleList([_WideLayer(dims[i], dims[i + 1]) for i in range(LAYERS)])

    def run(k, budget_bytes):
        spec = make_spec(dataset="synth-tiny", model="sage", hidden=16, num_layers=LAYERS, fanouts=(-1,) * LAYERS,
                         batch_size=4, epochs=1, max_steps_per_epoch=2, evaluate=False, num_microbatches=k,
                         budget_bytes=budget_bytes, options={"exactness_check": "off", "safety": 0.05}, seed=0)
        torch.manual_seed(0)
        with DeviceMemory("cpu", None) as memory:
            trainer = Trainer(ds, spec, memory=memory, model=Model())
            steps = []
            try:
                list(trainer.fit(on_step=steps.append))
            finally:
                trainer.close()
        return steps

    reference = run(1, None)
    one_seed_peak = max(s.measured_peak_bytes for s in run(4, None))
    budget = int(0.8 * one_seed_peak)
    steps = run(None, budget)
    assert all(s.recompute and s.num_oom_recoveries == 0 for s in steps), steps
    assert max(s.measured_peak_bytes for s in steps) <= budget
    for a, b in zip(reference, steps, strict=True):
        assert abs(a.loss - b.loss) <= 1e-5 * abs(a.loss)


@pytest.mark.parametrize("build", [_dgl_gat, _WholeModel, "block_model"], ids=["dgl_gat", "whole_model", "block_model"])
def test_a_ddp_wrapped_model_recomputes_its_modules_units(graph, build, tmp_path):
    """The distributed trainer runs ``DDP(model)``: recomputation finds the units of the wrapped model."""
    import torch.distributed as dist

    ds, blocks = graph
    torch.manual_seed(0)
    model = guard_model(build_model(ModelSpec("gcn", ds.feature_dim, 16, ds.num_classes, 2, dropout=0.5))
                        if build == "block_model" else build(ds.feature_dim, ds.num_classes))
    x, y = ds.features[blocks.input_nodes], ds.labels[blocks.seeds]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        assert can_recompute(ddp)
        set_dropout_step(model, 3)

        def grads(recompute):
            with recomputed(ddp) if recompute else torch.enable_grad(), ddp.no_sync():
                loss = F.cross_entropy(ddp(blocks, x), y)
            return torch.autograd.grad(loss, [p for p in model.parameters()])

        for a, b in zip(grads(False), grads(True), strict=True):
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
        assert can_recompute(ddp)  # units ran
    finally:
        set_dropout_step(model, None)
        dist.destroy_process_group()
