"""The streamed input layer's chunk pipeline: on a GPU each chunk's copy runs on a stream of its own
beside the previous chunk's GEMMs (`cherry.execution.chunk_pipeline`).

On the CPU: the order of loads, event waits and `record_stream` calls against fake streams, and the
same results bit for bit with and without a copy stream. On a GPU (marked ``gpu``, run by
workflow/scripts/gpu_check.sh): streamed gradients with the overlap on equal unstreamed ones.
"""
from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from cherry.execution.chunk_pipeline import chunk_ranges, chunks
from cherry.execution.stream import RowSource, streamed
from cherry.models import ModelSpec, build_model
from cherry.models.dropout import set_dropout_step
from cherry.sampling import NeighborSampler, sampling_generator
from tests.unit.graphs import random_dataset

FEATURES = 40


class FakeStream:
    """Logs what is queued on it; ``current`` is the stream work is queued on now."""

    current = "compute"

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log, self.device = name, log, torch.device("cpu")

    def wait_event(self, event) -> None:
        self.log.append(f"{self.name} waits {event}")

    def wait_stream(self, other) -> None:
        self.log.append(f"{self.name} waits stream {other.name}")

    def record_event(self):
        self.log.append(f"{self.name} records")
        return f"event of {FakeStream.current}"


@pytest.fixture()
def fake(monkeypatch):
    """A log, the compute stream (current) and a copy stream, both fake: `torch.cuda.stream` switches
    ``FakeStream.current``; `record_stream` logs the tensor's first value."""
    log: list = []
    compute, copy = FakeStream("compute", log), FakeStream("copy", log)

    @contextmanager
    def stream(s):
        previous, FakeStream.current = FakeStream.current, s.name
        try:
            yield
        finally:
            FakeStream.current = previous

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: compute)
    monkeypatch.setattr(torch.cuda, "stream", stream)
    monkeypatch.setattr(torch.Tensor, "record_stream",
                        lambda self, s: log.append(f"chunk {int(self[0, 0])} used on {s.name}"))
    return log, copy


def _load(log):
    def load(start: int, stop: int) -> torch.Tensor:
        log.append(f"load {start} on {FakeStream.current}")
        return torch.arange(start, stop, dtype=torch.float32).unsqueeze(1).expand(-1, 3).clone()
    return load


def test_chunk_ranges_cover_the_rows_once():
    assert chunk_ranges(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_ranges(0, 4) == [] and chunk_ranges(3, 10) == [(0, 3)]
    with pytest.raises(ValueError, match="chunk_rows must be >= 1, got 0"):
        chunk_ranges(5, 0)


def test_without_a_copy_stream_each_chunk_loads_when_asked_for():
    log: list = []
    for start, stop, rows in chunks(_load(log), chunk_ranges(7, 3)):
        log.append(f"use {start}")
        assert rows.shape == (stop - start, 3) and int(rows[0, 0]) == start
    assert log == ["load 0 on compute", "use 0", "load 3 on compute", "use 3", "load 6 on compute", "use 6"]


def test_with_a_copy_stream_copies_queue_beside_the_previous_chunks_work(fake):
    """Chunk i + 1 is loaded on the copy stream after chunk i's work was queued on the compute stream,
    and the copy stream never waits for the compute stream (so the copy runs beside that work); the
    compute stream waits for each chunk's copy (an event, no host wait) and marks the chunk used there
    before it is handed out."""
    log, copy = fake
    for start, _, rows in chunks(_load(log), chunk_ranges(7, 3), copy):
        log.append(f"gemm {start} on {FakeStream.current}")
        del rows
    per_chunk = lambda i: [f"load {i} on copy", "copy records", "compute waits event of copy",  # noqa: E731
                           f"chunk {i} used on compute", f"gemm {i} on compute"]
    assert log == per_chunk(0) + per_chunk(3) + per_chunk(6)
    assert not any(line.startswith("copy waits") for line in log)


@pytest.fixture(scope="module")
def graph():
    ds = random_dataset(num_nodes=200, avg_degree=6, feature_dim=FEATURES)
    blocks = NeighborSampler(ds.graph, [4, 5]).sample(ds.train_idx[:20], sampling_generator(3))
    return ds, blocks


@pytest.mark.parametrize("kind", ["gcn", "gat", "sage"])
def test_a_copy_stream_changes_no_bit(graph, fake, kind):
    """The streamed layer through the pipeline (fake copy stream) gives the same loss and gradients,
    bit for bit, as without it, input dropout included."""
    ds, blocks = graph
    nodes = blocks.input_nodes
    _, copy = fake
    results = []
    for stream in (None, copy):
        torch.manual_seed(0)
        model = build_model(ModelSpec(kind, FEATURES, 8, 4, 2, aggr="mean" if kind == "sage" else None, heads=2,
                                      input_dropout=0.5))
        set_dropout_step(model, 77)
        source = RowSource(lambda a, b: ds.features.index_select(0, nodes[a:b]), nodes, FEATURES, 7,
                           copy_stream=stream)
        with streamed(model, source) as x:
            loss = torch.nn.functional.cross_entropy(model(blocks, x), ds.labels[blocks.seeds], reduction="sum")
            grads = torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad], allow_unused=True)
        results.append((loss, grads))
    (loss0, grads0), (loss1, grads1) = results
    assert torch.equal(loss0, loss1)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(grads0, grads1))


def test_staging_streams_host_rows_through_the_copy_stream_in_half_chunks(graph, fake):
    """On a GPU (a copy stream), rows of a host table stream through it, each chunk half the priced
    one (two are live at a time); without one, the priced chunk and no copy stream."""
    from cherry.execution.staging import StagedBatch, Staging

    ds, blocks = graph
    _, copy = fake
    staging = Staging(torch.device("cpu"), stage_features=False, budget_bytes=None)
    unstaged = StagedBatch(False, None, False, 0, 0)
    plain = staging.row_source(blocks, blocks, unstaged, ds.features, 10)
    assert plain.copy_stream is None and plain.chunk_rows == 10
    staging.chunk_stream = copy
    overlapped = staging.row_source(blocks, blocks, unstaged, ds.features, 10)
    assert overlapped.copy_stream is copy and overlapped.chunk_rows == 5
    n = overlapped.num_rows
    rows = lambda source: torch.cat([x for _, _, x in source.chunks(n)])  # noqa: E731
    assert torch.equal(rows(overlapped), rows(plain))


def _executor_streams_exactly(kind: str, k: int, device: str, monkeypatch, copy_stream=None) -> None:
    """The executor with staging off (rows from the host table) streams through its copy stream
    (``copy_stream`` replaces it where given), forward and backward of every micro-batch, and gives
    the unstreamed loss and gradients."""
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.execution import stream as stream_mod
    from cherry.execution.partition_check import compare
    from cherry.planning import MemoryModel

    passes, pipelined = [], stream_mod.pipelined

    def counted(load, ranges, copy_stream=None):
        passes.append(copy_stream is not None)
        return pipelined(load, ranges, copy_stream)

    monkeypatch.setattr(stream_mod, "pipelined", counted)
    ds = random_dataset(num_nodes=3000, avg_degree=8, feature_dim=512)
    features = ds.features.pin_memory() if device == "cuda" else ds.features
    blocks = NeighborSampler(ds.graph, [4, 6]).sample(ds.train_idx[:512], sampling_generator(3))
    grads, losses = {}, {}
    for stream in ("off", "on"):
        torch.manual_seed(0)
        spec = ModelSpec(kind, 512, 16, ds.num_classes, 2, heads=2, input_dropout=0.3)
        model = build_model(spec).to(device)
        options = ExecutorOptions.for_k(k, stage_features=False, pipeline=True, exactness_check="off",
                                        stream_inputs=stream)
        ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.0), MemoryModel.for_model(spec),
                                options, device)
        if copy_stream is not None:
            ex.staging.chunk_stream = copy_stream
        assert ex.staging.chunk_stream is not None
        ex.stream_chunk_rows = 64  # many chunks per micro-batch: 32 rows each through the copy stream
        stats = ex.accumulate(blocks, features, ds.labels)
        assert stats.streamed == (stream == "on")
        losses[stream], grads[stream] = stats.loss, [g.detach().cpu().clone() for g in ex.gradients()]
        names = [n for n, p in model.named_parameters() if p.requires_grad]
        ex.close()
    if device == "cuda":
        torch.cuda.synchronize()
    assert len(passes) == 2 * k and all(passes)  # each micro-batch's forward and backward, overlapped
    assert abs(losses["on"] - losses["off"]) <= 1e-5 * abs(losses["off"])
    assert max(d.max_rel_diff for d in compare(names, grads["off"], grads["on"])) <= 1e-5


@pytest.mark.parametrize("kind,k", [("gcn", 1), ("gat", 3)])
def test_the_executor_streams_through_a_copy_stream_exactly(kind, k, fake, monkeypatch):
    """The GPU test below on the CPU, with a fake copy stream: the executor's plumbing."""
    _executor_streams_exactly(kind, k, "cpu", monkeypatch, copy_stream=fake[1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["gcn", "gat"])
@pytest.mark.parametrize("k", [1, 3])
def test_on_the_gpu_streamed_gradients_with_overlap_equal_unstreamed(kind, k, monkeypatch):
    """Host (pinned) features on a CUDA device: chunk copies on the staging's copy stream, overlapped."""
    _executor_streams_exactly(kind, k, "cuda", monkeypatch)


def test_the_benchmarks_overlap_counts_copy_time_under_kernels_of_other_streams():
    from benchmarks.stream_overlap import overlap_of, text

    def event(cat, name, ts, dur, stream):
        return {"cat": cat, "name": name, "ts": ts, "dur": dur, "args": {"stream": stream}}

    serial = [event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 10, 7), event("kernel", "gemm", 10, 10, 7),
              event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 20, 10, 7), event("kernel", "gemm", 30, 10, 7)]
    assert overlap_of(serial) == {"copies": 2, "copy_ms": 0.02, "kernel_ms": 0.02, "overlap_ms": 0.0}
    beside = [event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 0, 10, 20), event("kernel", "gemm", 5, 10, 7),
              event("kernel", "mm", 8, 4, 7), event("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 0, 50, 20),
              event("cpu_op", "aten::mm", 0, 100, None)]
    got = overlap_of(beside)
    assert got["copies"] == 1 and abs(got["overlap_ms"] - 0.005) < 1e-12 and abs(got["kernel_ms"] - 0.014) < 1e-12
    assert "0.01 ms of the copies (50%) ran beside a kernel" in text(got)
    assert text({"error": "device cpu"}) == "overlap: not measured (device cpu)"


def test_the_benchmarks_overlap_step_streams_host_rows(graph):
    """`benchmarks.stream_overlap.measure` end to end on the CPU (no copies there: zero of each)."""
    from types import SimpleNamespace

    from benchmarks.stream import _spec
    from benchmarks.stream_overlap import measure

    ds, blocks = graph
    args = SimpleNamespace(root=None, sample_fanouts=[4, 5], hidden=16, heads=2, batch_size=20, seed=0, device="cpu")
    got = measure(ds, _spec(args, "synth-tiny", "gcn", k=1, stream="on", stage=False), blocks)
    assert got == {"copies": 0, "copy_ms": 0.0, "kernel_ms": 0.0, "overlap_ms": 0.0}
    refused = measure(ds, _spec(args, "synth-tiny", "gcn", k=1, stream="off", stage=False), blocks)
    assert refused["error"].startswith("the step did not stream host rows")
