"""No host sync inside a micro-batch: counted on the CPU with `SyncCounter`, and, on a GPU, enforced
with ``torch.cuda.set_sync_debug_mode("error")``. Also: the packed LSTM equals the bucketed one."""
from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from cherry.bench.syncs import SyncCounter
from cherry.execution import ExecutorOptions, MicrobatchExecutor
from cherry.models import ModelSpec, build_model
from cherry.planning import MemoryModel
from cherry.sampling import NeighborSampler
from tests.unit.graphs import random_dataset

CONFIGS = [("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None), ("mlp", None)]
IDS = [f"{m}-{a}" if a else m for m, a in CONFIGS]


@pytest.fixture(scope="module")
def data():
    ds = random_dataset(num_nodes=600, avg_degree=8)
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:96], torch.Generator().manual_seed(5))
    return ds, blocks


def _host_tensors(parts):
    return [b.layout.batch_sizes for p in parts for b in p.layers if b.layout is not None]


class _LoopProbe:
    """Runs every per-micro-batch phase inside ``context()`` (the counter, or the sync debug mode)."""

    def __init__(self, context):
        self.context = context

    @contextmanager
    def phase(self, name):
        if name in ("gather", "forward_backward"):
            with self.context():
                yield
        else:
            yield


def _spec(ds, model_name, aggr, lstm_impl="auto"):
    # "auto" is the step loop on the CPU; the packed LSTM is checked too (the GPU's auto)
    return ModelSpec(model_name, ds.feature_dim, 8, ds.num_classes, 2, aggr=aggr, heads=2, lstm_impl=lstm_impl)


def _executor(ds, model_name, aggr, k, device, probe, pipeline):
    torch.manual_seed(0)
    spec = _spec(ds, model_name, aggr)
    model = build_model(spec).to(device)
    return MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), MemoryModel.for_model(spec),
                              ExecutorOptions.for_k(k, pipeline=pipeline, stage_features=False),
                              device, probe=probe)


@pytest.mark.parametrize("model_name,aggr", CONFIGS, ids=IDS)
def test_microbatch_loop_forces_no_sync(data, model_name, aggr):
    ds, blocks = data
    for k in (1, 4):
        counters = []

        def counting():
            counters.append(SyncCounter(_host_tensors(planned.plan.microbatches)))
            return counters[-1]

        ex = _executor(ds, model_name, aggr, k, "cpu", _LoopProbe(counting), pipeline=False)
        planned = ex.plan_batch(blocks, ds.features)
        stats = ex.accumulate(planned, ds.features, ds.labels)
        ex.close()
        assert stats.num_microbatches == k
        assert len(counters) == 2 * k + 1  # staging, then gather + forward_backward of every micro-batch
        found = sum((c.counts for c in counters), start=type(counters[0].counts)())
        assert sum(found.values()) == 0, f"K={k}: sync-forcing ops inside the micro-batch loop: {dict(found)}"


@pytest.mark.parametrize("model_name,aggr", CONFIGS, ids=IDS)
def test_model_on_blocks_forces_no_sync(data, model_name, aggr):
    """``model(blocks, x)`` called directly: blocks were validated when sampled, nothing is checked again."""
    ds, blocks = data
    torch.manual_seed(0)
    model = build_model(_spec(ds, model_name, aggr))
    x = ds.features.index_select(0, blocks.input_nodes).requires_grad_()
    with SyncCounter(_host_tensors([blocks])) as counter:
        model(blocks, x).square().sum().backward()
    assert counter.total == 0, dict(counter.counts)
    assert x.grad is not None


@pytest.mark.parametrize("impl", ["packed", "steps"])
def test_lstm_impls_on_blocks_force_no_sync(data, impl):
    ds, blocks = data
    torch.manual_seed(0)
    model = build_model(_spec(ds, "sage", "lstm", lstm_impl=impl))
    x = ds.features.index_select(0, blocks.input_nodes).requires_grad_()
    with SyncCounter(_host_tensors([blocks])) as counter:
        model(blocks, x).square().sum().backward()
    assert counter.total == 0, dict(counter.counts)


def test_counter_sees_what_syncs():
    t = torch.arange(5)
    with SyncCounter() as counter:
        int(t.sum())
        torch.nonzero(t)
        torch.repeat_interleave(torch.arange(5), t)
        t.tolist()
        torch.repeat_interleave(torch.arange(5), t, output_size=10)  # sizes known: not counted
    assert counter.counts == {"_local_scalar_dense": 1, "nonzero": 1, "repeat_interleave(no output_size)": 1,
                              "tolist": 1}


@pytest.mark.parametrize("impl", ["packed", "steps"])
@pytest.mark.parametrize("fanouts", [[5], [5, 3], [1, 4]], ids=["1-layer", "2-layer", "fanout-1"])
def test_lstm_impls_equal_bucketed(data, impl, fanouts):
    """Forward and every gradient (input rows, LSTM and linear weights) equal the bucketed LSTM's.
    Fanout 1 makes a layer with no more edges than sources: the step loop then projects the gathered
    edge rows instead of the source rows."""
    ds, _ = data
    num_layers = len(fanouts)
    # an isolated node adds a zero-degree destination
    seeds = torch.cat([ds.train_idx[:40], torch.tensor([int(ds.graph.num_nodes) - 1])]).unique()
    blocks = NeighborSampler(ds.graph, fanouts).sample(seeds, torch.Generator().manual_seed(9))
    outs, grads = [], []
    for name in (impl, "bucketed"):
        torch.manual_seed(3)
        spec = ModelSpec("sage", ds.feature_dim, 8, ds.num_classes, num_layers, aggr="lstm", lstm_impl=name)
        model = build_model(spec).double()
        x = ds.features.double().index_select(0, blocks.input_nodes).requires_grad_()
        out = model(blocks, x)
        out.square().sum().backward()
        outs.append(out.detach())
        grads.append([x.grad] + [p.grad for p in model.parameters()])
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-12)
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_step_lstm_matches_nn_lstm_in_float32_and_runs_backward_once(data):
    """Against torch's own LSTM on one degree bucket (float32 tolerance); a second backward through
    the same graph is refused (the first one reused the saved activations)."""
    from cherry.models import lstm_aggregate_steps

    ds, blocks = data
    block = blocks.layers[-1]
    torch.manual_seed(1)
    lstm = torch.nn.LSTM(ds.feature_dim, 6, batch_first=True)
    h = torch.randn(block.num_src, ds.feature_dim, requires_grad=True)
    out = lstm_aggregate_steps(lstm, block, h)
    deg = block.in_degrees()
    d = int(deg.max())
    rows = torch.nonzero(deg == d).flatten()
    seq = h[block.indices[(block.indptr[rows].unsqueeze(1) + torch.arange(d)).flatten()]].view(rows.numel(), d, -1)
    torch.testing.assert_close(out[rows], lstm(seq)[1][0][-1], rtol=1e-5, atol=1e-6)
    assert torch.all(out[deg == 0] == 0)
    loss = out.sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs once"):
        loss.backward()


def test_lstm_impl_is_validated():
    with pytest.raises(ValueError, match="lstm_impl must be one of"):
        ModelSpec("sage", 4, 8, 2, 1, aggr="lstm", lstm_impl="cudnn")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("pipeline", [False, True])
@pytest.mark.parametrize("model_name,aggr", CONFIGS, ids=IDS)
def test_microbatch_loop_under_cuda_sync_debug_mode(data, model_name, aggr, pipeline):
    ds, blocks = data

    @contextmanager
    def strict():
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous)

    reference = None
    for k in (1, 4):
        ex = _executor(ds, model_name, aggr, k, "cuda", _LoopProbe(strict), pipeline=pipeline)
        stats = ex.accumulate(ex.plan_batch(blocks, ds.features), ds.features, ds.labels)
        ex.close()
        reference = reference or stats
        assert stats.num_microbatches == k
        assert stats.loss == pytest.approx(reference.loss, rel=1e-4)
