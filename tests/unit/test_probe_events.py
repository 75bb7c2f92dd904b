"""The CUDA timing probe on events, checked on a CPU with a fake event class: phase edges record
events (no host wait), a step is resolved after one wait, exclusive phase times follow the events'
timestamps, and torch.cuda.synchronize is never called."""
from __future__ import annotations

import pytest
import torch

from cherry.bench.measure import TimingProbe
from cherry.probe import OTHER, PHASES


class FakeStream:
    """A stream timeline in ms that the test advances; counts host waits on its events."""

    def __init__(self):
        self.now_ms = 0.0
        self.waits = 0
        self.recorded = []

    def event(self):
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, stream: FakeStream, ready: bool = True):
        self.stream, self.t_ms, self.ready = stream, None, ready

    def record(self):
        self.t_ms = self.stream.now_ms
        self.stream.recorded.append(self)

    def synchronize(self):
        assert self.t_ms is not None, "waited on an event that was never recorded"
        self.stream.waits += 1
        self.ready = True

    def query(self):
        return self.ready

    def elapsed_time(self, other):
        assert self.ready and other.ready, "elapsed_time on an event that has not completed"
        return other.t_ms - self.t_ms


@pytest.fixture
def no_device_sync(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("torch.cuda.synchronize was called")
    monkeypatch.setattr(torch.cuda, "synchronize", refuse)


def test_event_probe_is_exclusive_and_waits_once_per_step(no_device_sync):
    stream = FakeStream()
    probe = TimingProbe("cuda", event_factory=stream.event)
    for step in range(2):
        stream.now_ms += 100.0  # time between steps is not counted
        probe.start_step()
        with probe.phase("plan"):
            stream.now_ms += 20.0
            with probe.phase("slice"):
                stream.now_ms += 30.0
            stream.now_ms += 10.0
        for _ in range(3):  # per micro-batch phases: many edges, still one wait
            with probe.phase("gather"):
                stream.now_ms += 1.0
            with probe.phase("forward_backward"):
                stream.now_ms += 4.0
        stream.now_ms += 5.0  # outside every phase
        waits_before = stream.waits
        timing = probe.end_step()
        assert stream.waits - waits_before == 1
        assert timing.total_s == pytest.approx(0.080)
        assert timing.phases_s["plan"] == pytest.approx(0.030)  # not the nested slice
        assert timing.phases_s["slice"] == pytest.approx(0.030)
        assert timing.phases_s["gather"] == pytest.approx(0.003)
        assert timing.phases_s["forward_backward"] == pytest.approx(0.012)
        assert timing.phases_s[OTHER] == pytest.approx(0.005)
        assert set(timing.phases_s) == set(PHASES) | {OTHER}
    assert len(probe.steps) == 2 and stream.waits == 2


def test_event_probe_waits_for_an_edge_on_another_stream(no_device_sync):
    stream = FakeStream()
    late = []

    def factory():
        event = FakeEvent(stream, ready=not late)  # the next events are "recorded on a side stream"
        return event

    probe = TimingProbe("cuda", event_factory=factory)
    probe.start_step()
    late.append(True)
    with probe.phase("gather"):
        stream.now_ms += 2.0
    late.clear()
    timing = probe.end_step()
    assert stream.waits == 3  # the step's last event, then each edge not yet complete
    assert timing.phases_s["gather"] == pytest.approx(0.002)


def test_aborted_step_and_phases_outside_a_step_record_nothing(no_device_sync):
    stream = FakeStream()
    probe = TimingProbe("cuda", event_factory=stream.event)
    with probe.phase("sample"):
        pass
    assert stream.recorded == []
    probe.start_step()
    with probe.phase("plan"):
        stream.now_ms += 1.0
    probe.abort_step()
    assert probe.steps == [] and stream.waits == 0
    probe.start_step()
    assert probe.end_step().total_s == 0.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_real_events_time_a_kernel_without_a_sync_per_edge():
    probe = TimingProbe("cuda")
    x = torch.randn(2048, 2048, device="cuda")
    probe.start_step()
    torch.cuda.set_sync_debug_mode("error")  # any implicit sync in the phase edges raises
    try:
        with probe.phase("forward_backward"):
            for _ in range(5):
                x = x @ x / 2048
    finally:
        torch.cuda.set_sync_debug_mode(0)
    timing = probe.end_step()
    assert 0 < timing.phases_s["forward_backward"] <= timing.total_s
