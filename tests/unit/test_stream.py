"""The streamed input layer: the same loss and gradients as the plain forward, chunk by chunk."""
from __future__ import annotations

import pytest
import torch

from cherry.execution.partition_check import compare
from cherry.execution.recompute import recomputed
from cherry.execution.stream import RowSource, can_stream, check_streamable, chunk_rows, streamed
from cherry.models import ModelSpec, build_model
from cherry.models.dropout import set_dropout_step
from cherry.sampling import NeighborSampler, sampling_generator
from tests.unit.graphs import random_dataset

FEATURES = 40


@pytest.fixture(scope="module")
def graph():
    ds = random_dataset(num_nodes=200, avg_degree=6, feature_dim=FEATURES)
    blocks = NeighborSampler(ds.graph, [4, 5]).sample(ds.train_idx[:20], sampling_generator(3))
    return ds, blocks


def _model(kind: str, aggr: str = "mean", input_dropout: float = 0.5):
    torch.manual_seed(0)
    spec = ModelSpec(kind, FEATURES, 8, 4, 2, aggr=aggr if kind == "sage" else None, heads=2,
                     dropout=0.3, input_dropout=input_dropout)
    model = build_model(spec)
    set_dropout_step(model, 1234)
    return model


def _source(ds, blocks, rows: int) -> RowSource:
    nodes = blocks.input_nodes
    return RowSource(lambda a, b: ds.features.index_select(0, nodes[a:b]), nodes, FEATURES, rows)


def _loss_and_grads(model, blocks, x, ds):
    loss = torch.nn.functional.cross_entropy(model(blocks, x), ds.labels[blocks.seeds], reduction="sum")
    params = [p for p in model.parameters() if p.requires_grad]
    return loss.detach(), torch.autograd.grad(loss, params, allow_unused=True)


@pytest.mark.parametrize("kind,recompute", [("gcn", False), ("gat", False), ("sage", False), ("gcn", True),
                                            ("sage", True)])
@pytest.mark.parametrize("rows", [1, 7, 10_000])
def test_streamed_equals_plain(graph, kind, recompute, rows):
    ds, blocks = graph
    model = _model(kind)
    plain_loss, plain = _loss_and_grads(model, blocks, ds.features.index_select(0, blocks.input_nodes), ds)
    with streamed(model, _source(ds, blocks, rows)) as x:
        if recompute:
            with recomputed(model):
                logits = model(blocks, x)
        else:
            logits = model(blocks, x)
        loss = torch.nn.functional.cross_entropy(logits, ds.labels[blocks.seeds], reduction="sum")
        got = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
    assert torch.isfinite(loss) and abs(loss - plain_loss) <= 1e-5 * abs(plain_loss)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert all((g is None) == (p is None) for g, p in zip(got, plain))
    pairs = [(n, g, p) for n, g, p in zip(names, got, plain) if g is not None]
    worst = max(compare([n for n, _, _ in pairs], [p for _, _, p in pairs], [g for _, g, _ in pairs]),
                key=lambda d: d.max_rel_diff)
    assert worst.max_rel_diff <= 1e-5, worst
    assert "forward_input" not in model.__dict__ and "forward" not in model.layers[0].fc_neigh.__dict__ \
        if kind == "sage" else "forward_input" not in model.__dict__


def test_no_rows_tensor_beyond_a_chunk(graph):
    """Every tensor the streamed forward and backward gather is at most one chunk of rows."""
    ds, blocks = graph
    model = _model("gcn")
    sizes = []
    nodes = blocks.input_nodes

    def gather(a, b):
        sizes.append(b - a)
        return ds.features.index_select(0, nodes[a:b])

    with streamed(model, RowSource(gather, nodes, FEATURES, 16)) as x:
        model(blocks, x).sum().backward()
    assert max(sizes) <= 16 and sum(sizes) == 2 * nodes.numel()  # forward once, backward once


def test_declarations_and_the_refusal():
    assert can_stream(_model("gcn")) and can_stream(_model("gat")) and can_stream(_model("sage"))
    assert not can_stream(_model("sage", aggr="pool")) and not can_stream(_model("sage", aggr="lstm"))
    wide = build_model(ModelSpec("gcn", 8, 16, 4, 2))  # the output is wider than the input: nothing to gain
    assert not can_stream(wide)
    with pytest.raises(ValueError, match=r"layer 0 \(SAGEConv\) declares no input projection"):
        check_streamable(_model("sage", aggr="pool"))


def test_chunk_rows_follow_the_budget():
    assert chunk_rows(1000, None) == (4 << 20) // 4000
    assert chunk_rows(1000, 64 << 20) == (2 << 20) // 4000  # a 32nd of the budget
    assert chunk_rows(1000, 1 << 30) == (4 << 20) // 4000  # at most 4 MiB
    assert chunk_rows(1000, 1 << 20) == 16  # never below 16 rows


def _executor(model, **options):
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.planning import MemoryModel

    opts = ExecutorOptions.for_k(options.pop("k", None), options.pop("budget", None), stage_features=False,
                                 pipeline=False, safety=0.0, exactness_check="off", **options)
    return MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0),
                              MemoryModel.for_model(model.spec), opts)


def test_the_planner_prices_the_streamed_layer(graph):
    from cherry.planning import BatchShape, MemoryModel, plan_microbatches

    ds, blocks = graph
    memory = MemoryModel.for_model(_model("gcn").spec)
    memory.stream_chunk_rows = 16
    shape = BatchShape.of(blocks)
    plain, stream = memory.estimate_bytes(shape), memory.with_stream().estimate_bytes(shape)
    rows = blocks.layers[0].num_src * (FEATURES + FEATURES) * 4  # the gathered rows and their dropped copy
    assert plain - stream == rows - 16 * (FEATURES + FEATURES) * 4  # (for_model prices no prefetch)
    budget = (plain + stream) // 2  # only the streamed K = 1 fits
    auto = plan_microbatches(blocks, memory, budget_bytes=budget, stream="auto")
    off = plan_microbatches(blocks, memory, budget_bytes=budget, stream="off")
    assert auto.stream and auto.num_microbatches == 1 and auto.max_estimated_bytes <= budget
    assert not off.stream and off.num_microbatches > 1
    roomy = plan_microbatches(blocks, memory, budget_bytes=2 * plain, stream="auto")
    assert not roomy.stream and roomy.num_microbatches == 1  # plain K = 1 fits: nothing is cheaper


def test_a_streamed_measurement_calibrates_the_streamed_line_only(graph):
    """A streamed micro-batch never moves the plain scale (the plain plan must still learn the rows'
    cost); one measured above its estimate lifts the streamed price to what it held, so that a run
    streaming from its first step is not priced below what it holds."""
    from cherry.planning import BatchShape, MemoryModel

    ds, blocks = graph
    memory = MemoryModel.for_model(_model("gcn").spec)
    memory.stream_chunk_rows = 16
    shape = BatchShape.of(blocks)
    plain = memory.estimate_bytes(shape)
    memory.observe(shape, memory.with_stream().estimate_bytes(shape) // 2, stream=True)
    assert memory.scale == 1.0 and memory.floor_bytes == 0 and memory.estimate_bytes(shape) == plain
    act = memory.with_stream().activation_bytes(shape)
    held = memory.fixed_bytes + int(1.5 * act)
    memory.observe(shape, held, stream=True)
    assert memory.scale == 1.0 and memory.estimate_bytes(shape) == plain
    assert memory.with_stream().estimate_bytes(shape) >= held


def test_the_executor_streams_under_a_tight_budget_and_stays_exact(graph, monkeypatch):
    ds, blocks = graph
    monkeypatch.setattr("cherry.execution.executor.chunk_rows", lambda width, budget: 8)  # a tiny graph
    reference = _executor(_model("sage"), k=1, stream_inputs="off")
    want = reference.accumulate(blocks, ds.features, ds.labels)
    grads = [g.clone() for g in reference.gradients()]
    estimate = reference.plan(blocks, num_microbatches=1).max_estimated_bytes
    tight = _executor(_model("sage"), budget=int(estimate * 0.8), stream_inputs="auto")
    got = tight.accumulate(blocks, ds.features, ds.labels)
    assert got.streamed and got.num_microbatches == 1
    assert abs(got.loss - want.loss) <= 1e-5 * abs(want.loss)
    names = [n for n, p in tight.model.named_parameters() if p.requires_grad]
    assert max(d.max_rel_diff for d in compare(names, grads, tight.gradients())) <= 1e-5


def test_on_without_an_input_projection_is_refused_before_any_work():
    with pytest.raises(ValueError, match=r"^stream_inputs='on' .* layer 0 \(SAGEConv\) declares no input projection"):
        _executor(_model("sage", aggr="pool"), k=1, stream_inputs="on")
