"""The exactness matrix: every execution path is a dimension, and every pair of settings is covered.

Each case runs one mini-batch's gradient through `MicrobatchExecutor.accumulate` under its settings
and compares it with the plain reference of the same model and weights (K = 1, no recomputation,
no pipelining, no feature cache, native ops as built), dropout masks included (same step seed).
Cases come from a greedy pairwise covering array over `DIMENSIONS` (seeded, so the list is stable):
every value of every dimension meets every value of every other dimension in at least one case.

A new execution path (a new option) adds a dimension here; `test_every_executor_option_is_a_dimension`
fails until it does.
"""
from __future__ import annotations

import dataclasses
import itertools
import random
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from cherry.compat import dgl_available, pyg_available
from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.execution.exactness import guard_model
from cherry.execution.feature_cache import FeatureCache
from cherry.execution.partition_check import compare
from cherry.execution.stream import can_stream
from cherry.models import ModelSpec, build_model, register_model
from cherry.ops import aggregate_block
from cherry.planning import MemoryModel
from cherry.planning.residency import CACHE, ResidencyPlan
from cherry.sampling import NeighborSampler, sampling_generator
from tests.unit.graphs import random_dataset
from tests.unit.library_models import DGLNet, PyGNet, dgl_nn, pyg_nn

MODELS = ("sage_mean", "sage_pool", "sage_lstm", "gcn", "gat", "registered_layer", "from_dgl", "from_pyg")
DIMENSIONS = {
    "model": MODELS,
    "dropout": (0.0, 0.5),
    "input_dropout": (0.0, 0.5),
    "recompute": ("off", "on"),
    "stream_inputs": ("off", "on"),
    "pipeline": (False, True),
    "native_ops": (True, False),
    "feature_cache": ("none", "some_rows"),
    "k": (1, 3, 8, "one_seed"),
}
# ExecutorOptions fields and where the matrix covers them (a field not here fails the check below)
COVERED_OPTIONS = {
    "num_microbatches": "k", "recompute": "recompute", "stream_inputs": "stream_inputs", "pipeline": "pipeline", "dropout_seed": "dropout",
    # not paths of the forward: how K is chosen and recovered (recovery is exact by its own tests:
    # test_executor.py's forced under-estimates), staging (a GPU-only copy), the check itself
    "budget_bytes": None, "stage_features": None, "balance": None, "safety": None, "recover_oom": None,
    "max_oom_recoveries": None, "exactness_check": None,
}
BATCH_SEEDS = 24


def pairwise_cases(dimensions: dict, seed: int = 0) -> list[dict]:
    """A small list of cases in which every pair of values of two dimensions occurs (greedy)."""
    names = list(dimensions)
    uncovered = {(a, va, b, vb) for a, b in itertools.combinations(names, 2)
                 for va in dimensions[a] for vb in dimensions[b]}
    rng = random.Random(seed)
    cases = []
    while uncovered:
        best, best_gain = None, -1
        for _ in range(60):
            case = {n: rng.choice(dimensions[n]) for n in names}
            a, va, b, vb = next(iter(uncovered))  # always cover at least one missing pair
            case[a], case[b] = va, vb
            gain = sum((x, case[x], y, case[y]) in uncovered for x, y in itertools.combinations(names, 2))
            if gain > best_gain:
                best, best_gain = case, gain
        cases.append(best)
        uncovered -= {(x, best[x], y, best[y]) for x, y in itertools.combinations(names, 2)}
    return cases


CASES = pairwise_cases(DIMENSIONS)


class _GINLayer(nn.Module):
    """A user layer of the layer contract (registered), with a dropout of its own."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Dropout(0.3), nn.Linear(out_dim, out_dim))

    def forward(self, block, h):
        return self.mlp(h[: block.num_dst] + aggregate_block(block, h, "sum"))


def _dgl_model(in_dim, num_classes, dropout):
    dglnn = dgl_nn()
    from cherry.interop import from_dgl

    return from_dgl(DGLNet(dglnn.SAGEConv(in_dim, 16, "mean"), dglnn.SAGEConv(16, num_classes, "mean"), dropout))


def _pyg_model(in_dim, num_classes, dropout):
    pygnn = pyg_nn()
    from cherry.interop import from_pyg

    # a GATConv first: its lin narrows the input rows, so stream_inputs 'on' streams it
    return from_pyg(PyGNet([pygnn.GATConv(in_dim, 8, heads=2), pygnn.SAGEConv(16, num_classes)], dropout))


def _model(case: dict, ds) -> nn.Module:
    name = case["model"]
    if name in ("from_dgl", "from_pyg"):
        ok, reason = (dgl_available() if name == "from_dgl" else pyg_available())
        if not ok:
            pytest.skip(reason)
        build = _dgl_model if name == "from_dgl" else _pyg_model
        return build(ds.feature_dim, ds.num_classes, case["dropout"])
    kind, _, aggr = name.partition("_")
    if name == "registered_layer":
        register_model("matrix_gin", layer=lambda dims: _GINLayer(dims.in_dim, dims.out_dim), replace=True)
        kind, aggr = "matrix_gin", "mean"
    spec = ModelSpec(kind, ds.feature_dim, 16, ds.num_classes, 2, aggr=(aggr or "mean") if kind == "sage" else None,
                     heads=2, dropout=case["dropout"], input_dropout=case["input_dropout"])
    return build_model(spec)


@contextmanager
def _native_ops(enabled: bool):
    """The pure-PyTorch reference ops for the duration (as ``native_ops: false`` gives a run)."""
    from cherry.ops import extension

    extension.extension_available()
    saved = extension._state["loaded"]
    extension._state["loaded"] = saved and enabled
    try:
        yield
    finally:
        extension._state["loaded"] = saved


def _cache(ds, device="cpu"):
    """A feature cache holding every other row (hits and misses in every micro-batch)."""
    num_nodes = ds.graph.num_nodes
    order = torch.cat([torch.arange(0, num_nodes, 2), torch.arange(1, num_nodes, 2)])  # hottest first
    plan = ResidencyPlan(CACHE, num_nodes // 2, num_nodes, ds.feature_dim * 4, None, "the matrix test's cache")
    return FeatureCache(ds.features, plan, order, device)


def _gradients(model, case, ds, blocks, reference: bool) -> list[torch.Tensor]:
    k = case["k"]
    k = 1 if reference else (blocks.num_seeds if k == "one_seed" else k)
    # a model whose first layer does not narrow its rows has nothing to stream ("on" would refuse)
    stream = "off" if reference else case["stream_inputs"]
    stream = stream if stream == "off" or can_stream(model) else "auto"
    options = ExecutorOptions(num_microbatches=k, budget_bytes=None, stage_features=False,
                              pipeline=False if reference else case["pipeline"], balance="count", safety=0.0,
                              recover_oom=False, dropout_seed=11, recompute="off" if reference else case["recompute"],
                              stream_inputs=stream)
    spec = ModelSpec("sage", ds.feature_dim, 16, ds.num_classes, 2)
    ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec), options)
    if not reference and case["feature_cache"] == "some_rows":
        ex.set_feature_cache(_cache(ds))
    try:
        with _native_ops(True if reference else case["native_ops"]):
            stats = ex.accumulate(blocks, ds.features, ds.labels)
        if not reference and case["recompute"] == "on":  # every model of the matrix has layer units
            assert stats.recompute, "recomputation was asked for and not run"
        assert stats.streamed == (stream == "on"), "the streamed input layer was asked for and not run"
        return [g.clone() for g in ex.gradients()]
    finally:
        ex.close()


@pytest.fixture(scope="module")
def graph():
    ds = random_dataset(num_nodes=300, avg_degree=6, feature_dim=40)  # wider than the first layers: they stream
    blocks = NeighborSampler(ds.graph, [4, 5]).sample(ds.train_idx[:BATCH_SEEDS], sampling_generator(4))
    return ds, blocks


def test_the_cases_cover_every_pair():
    for a, b in itertools.combinations(DIMENSIONS, 2):
        seen = {(c[a], c[b]) for c in CASES}
        assert seen == set(itertools.product(DIMENSIONS[a], DIMENSIONS[b])), (a, b)
    assert len(CASES) <= 48


def test_every_executor_option_is_a_dimension():
    fields = {f.name for f in dataclasses.fields(ExecutorOptions)}
    assert fields == set(COVERED_OPTIONS), f"add a dimension (or a reason) for: {fields ^ set(COVERED_OPTIONS)}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{v}" for v in c.values()))
def test_every_path_gives_the_whole_batch_gradient(graph, case):
    ds, blocks = graph
    torch.manual_seed(0)
    model = guard_model(_model(case, ds))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    reference = _gradients(model, case, ds, blocks, reference=True)
    model.load_state_dict(weights)
    got = _gradients(model, case, ds, blocks, reference=False)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    worst = max(compare(names, reference, got), key=lambda d: d.max_rel_diff)
    assert worst.max_rel_diff <= 1e-5, f"{case}: {worst}"


@pytest.mark.parametrize("name", ("sage_mean", "gcn", "gat", "registered_layer"))
def test_evaluation_runs_the_training_forward(graph, name):
    """Layer-wise evaluation (each layer over all nodes) equals the model's one forward on the same
    full-neighbour blocks in eval mode: evaluation is the same function as training."""
    from cherry.models.inference import layerwise_inference

    ds, _ = graph
    torch.manual_seed(0)
    model = _model({"model": name, "dropout": 0.5, "input_dropout": 0.5}, ds).eval()
    nodes = ds.train_idx[:BATCH_SEEDS]
    blocks = NeighborSampler(ds.graph, [-1, -1]).sample(nodes, sampling_generator(0))
    with torch.no_grad():
        forward = model(blocks, ds.features.index_select(0, blocks.input_nodes))
        layerwise = layerwise_inference(model, ds.graph, ds.features)[nodes]
    assert torch.allclose(forward, layerwise, rtol=1e-5, atol=1e-5)
