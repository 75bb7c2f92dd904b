"""Baselines at their own K under a capacity: the shared search (`smallest_fitting_k`), its use by naive,
Betty and Buffalo under an emulated device capacity on synth-tiny, and Betty's LSTM estimator."""
from __future__ import annotations

import pytest
import torch

from baselines import system_class
from baselines.common import smallest_fitting_k
from cherry.spec import RunSpec, make_spec
from cherry.memory import DeviceMemory
from tests.optional import BETTY, needs_betty_deps
from tests.unit.test_baselines_micro import CPU, FakeProbe

SAMPLE_SEED = 5


# -- the search -------------------------------------------------------------------------------------
def fake_attempts(smallest_fit: int):
    calls, oom_after = [], []

    def attempt(k):
        calls.append(k)
        if k < smallest_fit:
            raise torch.OutOfMemoryError(f"k={k} does not fit")
        return f"result of {k}"

    return attempt, calls, oom_after


@pytest.mark.parametrize("smallest, expected_calls", [
    (1, [1]), (2, [1, 2]), (5, [1, 2, 4, 8, 6, 5]), (7, [1, 2, 4, 8, 6, 7]),
    (6, [1, 2, 4, 8, 6, 5, 6]),  # the last probe (5) failed: the step is run again at 6
    (13, [1, 2, 4, 8, 16, 12, 14, 13]), (20, [1, 2, 4, 8, 16, 20, 18, 19, 20]),
])
def test_search_returns_the_smallest_fitting_k_and_its_own_result(smallest, expected_calls):
    attempt, calls, _ = fake_attempts(smallest)
    cleanups = []
    k, result = smallest_fitting_k(attempt, 1, 20, lambda: cleanups.append(calls[-1]))
    assert (k, result) == (smallest, f"result of {smallest}")
    assert calls == expected_calls
    assert cleanups == [c for c in calls if c < smallest]  # one clean-up after every failure, none else


def test_search_starts_at_first_k_and_reraises_when_even_max_k_fails():
    attempt, calls, _ = fake_attempts(3)
    assert smallest_fitting_k(attempt, 4, 9, lambda: None) == (4, "result of 4") and calls == [4]
    attempt, calls, _ = fake_attempts(100)
    with pytest.raises(torch.OutOfMemoryError, match="k=9"):
        smallest_fitting_k(attempt, 1, 9, lambda: None)
    assert calls == [1, 2, 4, 8, 9]
    for bad in ({"first_k": 0}, {"first_k": True}, {"max_k": 0}):
        with pytest.raises(ValueError, match="first_k|max_k"):
            smallest_fitting_k(attempt, **{"first_k": 1, "max_k": 4, **bad}, after_oom=lambda: None)


# -- the systems under an emulated capacity ----------------------------------------------------------
def cfg(k, aggr="mean", budget_bytes=None, system="betty") -> RunSpec:
    return make_spec(system=system, dataset="synth-tiny", model="sage", aggr=aggr, num_layers=2, hidden=32, heads=1,
                     dropout=0.0, fanouts=(5, 10), batch_size=512, lr=0.01,
                     num_microbatches=1 if system == "full" else k, budget_bytes=budget_bytes, seed=3)


def run(name, dataset, seeds, k, capacity=None, aggr="mean", budget_bytes=None):
    """(system, outcome, gradients, peak bytes) of one accumulated step inside a fresh device memory."""
    with DeviceMemory("cpu", capacity) as memory:
        system = system_class(name)(dataset, cfg(k, aggr, budget_bytes, system=name), CPU, memory, FakeProbe())
        outcome = system.accumulate_gradients(seeds, torch.Generator().manual_seed(SAMPLE_SEED))
        return system, outcome, system.gradients(), memory.peak_bytes()


def assert_same_gradient(grads, reference):
    assert all(g is not None for g in reference)
    for g, ref in zip(grads, reference):
        assert float((g - ref).norm()) <= 1e-4 * float(ref.norm()) + 1e-7


@pytest.fixture(scope="module")
def seeds(synth_tiny):
    return synth_tiny.train_idx[:512]


@pytest.mark.parametrize("name", ["naive", BETTY, "buffalo"])
def test_auto_k_is_the_smallest_k_that_fits_and_keeps_the_gradient(synth_tiny, seeds, name):
    peaks = {k: run(name, synth_tiny, seeds, k)[3] for k in (1, 2, 3)}
    assert peaks[1] > peaks[2] > peaks[3]  # the premise: finer splits need less memory here
    capacity = (peaks[2] + peaks[3]) // 2
    with pytest.raises(torch.OutOfMemoryError):
        run(name, synth_tiny, seeds, 1, capacity)
    with pytest.raises(torch.OutOfMemoryError):
        run(name, synth_tiny, seeds, 2, capacity)
    _, fixed, fixed_grads, _ = run(name, synth_tiny, seeds, 3, capacity)
    system, auto, auto_grads, peak = run(name, synth_tiny, seeds, None, capacity)
    assert auto.num_microbatches == 3 == fixed.num_microbatches and system.auto_k == 3
    assert peak <= capacity
    assert auto.loss == pytest.approx(fixed.loss, rel=1e-6)
    assert_same_gradient(auto_grads, fixed_grads)  # failed attempts left nothing behind
    if name != "naive":  # naive samples each group apart: not the full batch's sample
        _, _, full, _ = run("full", synth_tiny, seeds, 1)
        assert_same_gradient(auto_grads, full)


@needs_betty_deps
def test_an_oom_mid_step_resets_the_gradients_before_the_retry(synth_tiny, seeds):
    """Attempts at K < 3 run out of memory at their last micro-batch, after earlier ones accumulated
    into ``.grad``; every attempt must start from ``.grad = None`` and the step equal K=3's."""
    system = system_class("betty")(synth_tiny, cfg(None, system="betty"), CPU, None, FakeProbe())
    run_k, run_mb = system._run, system.run_microbatch
    state = {"k": None, "index": 0}
    clean_at_start = []

    def patched_run(prepared, generator, k):
        state.update(k=k, index=0)
        return run_k(prepared, generator, k)

    def patched_microbatch(blocks, total):
        if state["index"] == 0:
            clean_at_start.append(all(p.grad is None for p in system.model.parameters()))
        state["index"] += 1
        if state["k"] < 3 and state["index"] == state["k"]:
            raise torch.OutOfMemoryError("emulated: the last micro-batch does not fit")
        run_mb(blocks, total)

    system._run, system.run_microbatch = patched_run, patched_microbatch
    outcome = system.accumulate_gradients(seeds, torch.Generator().manual_seed(SAMPLE_SEED))
    assert outcome.num_microbatches == 3 and system.auto_k == 3
    assert clean_at_start == [True] * len(clean_at_start) and len(clean_at_start) >= 4  # 1, 2, 4, 3
    _, fixed, fixed_grads, _ = run("betty", synth_tiny, seeds, 3)
    assert outcome.loss == pytest.approx(fixed.loss, rel=1e-6)
    assert_same_gradient(system.gradients(), fixed_grads)
    # The next step starts from the K found, not from 1 again.
    state["k"] = None
    calls = []
    system._run = lambda prepared, generator, k: (calls.append(k), patched_run(prepared, generator, k))[1]
    system.accumulate_gradients(seeds, torch.Generator().manual_seed(SAMPLE_SEED + 1))
    assert calls == [3]


@needs_betty_deps
def test_betty_auto_k_uses_its_lstm_estimate_against_the_budget(synth_tiny, seeds):
    probe_system = system_class("betty")(synth_tiny, cfg(1, "lstm", system="betty"), CPU, None, FakeProbe())
    blocks = probe_system.sampler.sample(seeds, torch.Generator().manual_seed(SAMPLE_SEED))
    estimate = {k: probe_system.estimate_bytes(blocks, probe_system.partition(blocks, k)) for k in range(1, 6)}
    budget = (estimate[3] + estimate[4]) // 2
    expected = min(k for k, e in estimate.items() if e <= budget)
    system, outcome, grads, _ = run("betty", synth_tiny, seeds, None, aggr="lstm", budget_bytes=budget)
    assert outcome.num_microbatches == expected and outcome.estimated_peak_bytes <= budget
    assert estimate[expected - 1] > budget
    _, _, full, _ = run("full", synth_tiny, seeds, 1, aggr="lstm")
    assert_same_gradient(grads, full)
