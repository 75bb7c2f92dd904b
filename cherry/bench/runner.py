"""The body of one benchmark run (see `cherry.bench.run` for the command and the outcomes).

Batches: a `torch.Generator` seeded with ``spec.seed`` shuffles the training seeds; steps take
consecutive batches of ``batch_size`` (steps mode drops a partial last batch unless the training set
is smaller than one batch, and reshuffles when the set is used up; epochs mode covers the whole set
every epoch). A second generator, seeded from ``spec.seed`` as well, is handed to the system for
sampling, so every system sees the same batches and the same sampling stream.
"""
from __future__ import annotations

import importlib
import os
import random
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import numpy as np
import torch

from cherry.bench.measure import RunPeakMemory, TimingProbe
from cherry.bench.record import RunMeasurements, build_record, write_record
from cherry.bench.spec import RunSpec
from cherry.bench.system import StepOutcome, SystemConfig, SystemUnavailable

EXIT_OK, EXIT_ERROR, EXIT_BAD_SPEC = 0, 1, 2
BUDGET_RESERVE_FRACTION = 0.1  # of device_memory, kept for what the budget does not model
SAMPLE_SEED_OFFSET = 1_000_003


def apply_process_switches(spec: RunSpec) -> None:
    """Environment switches that must precede the first op (one process per run makes them safe)."""
    if spec.system == "cherry" and spec.options.get("native_ops") is False:
        os.environ["CHERRY_NO_EXT"] = "1"


def effective_budget_bytes(spec: RunSpec) -> Optional[int]:
    """``budget``; else ``device_memory`` less a 10% reserve; else, for "auto" on a GPU, 90% of the
    device's memory; else None."""
    if spec.budget is not None:
        return spec.budget
    capacity = spec.device_memory
    if capacity is None and spec.microbatches == "auto" and spec.device == "cuda" and torch.cuda.is_available():
        capacity = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    if capacity is None:
        return None
    return max(capacity - int(capacity * BUDGET_RESERVE_FRACTION), 1)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RunTimeout(BaseException):
    """The run exceeded ``timeout_s`` (a BaseException so a system's ``except Exception`` cannot eat it)."""


class Skipped(Exception):
    """The run cannot happen here; recorded as ``skipped``."""


@dataclass
class _Progress:
    """What the run measured so far; mutable because a timeout or out-of-memory can end it anywhere."""

    timings: list = field(default_factory=list)
    outcomes: list = field(default_factory=list)
    epoch_losses: list = field(default_factory=list)
    epoch_acc: dict = field(default_factory=lambda: {"train": [], "valid": [], "test": []})
    epoch_eval_s: list = field(default_factory=list)
    final_accuracy: Optional[dict] = None
    num_parameters: Optional[int] = None
    load_s: Optional[float] = None
    preprocess_s: Optional[float] = None
    build_s: Optional[float] = None
    peak_tracked_bytes: Optional[int] = None
    peak_reserved_bytes: Optional[int] = None
    nvml_peak_bytes: Optional[int] = None
    nvml_baseline_bytes: Optional[int] = None
    estimator_errors: tuple = ()


class _Deadline:
    """``timeout_s`` from `start`: checked between steps and by SIGALRM (POSIX) inside a step."""

    def __init__(self, timeout_s: Optional[float]) -> None:
        self.timeout_s = timeout_s
        self.start = time.monotonic()
        self._armed = False

    def _fire(self, signum, frame) -> None:
        raise RunTimeout(f"run exceeded timeout_s={self.timeout_s:g} s (interrupted inside a step)")

    def arm(self) -> None:
        self.start = time.monotonic()
        if self.timeout_s is not None and hasattr(signal, "setitimer"):
            signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
            self._armed = True

    def disarm(self) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self._armed = False

    def check(self) -> None:
        if self.timeout_s is not None and time.monotonic() - self.start > self.timeout_s:
            raise RunTimeout(f"run exceeded timeout_s={self.timeout_s:g} s")


def system_config(spec: RunSpec, budget_bytes: Optional[int]) -> SystemConfig:
    return SystemConfig(
        model=spec.model, aggr=spec.aggr, num_layers=spec.layers, hidden=spec.hidden, heads=spec.heads,
        dropout=spec.dropout, fanouts=tuple(spec.fanouts), batch_size=spec.batch_size, lr=spec.lr,
        num_microbatches=spec.num_microbatches, budget_bytes=budget_bytes, seed=spec.seed,
        options=dict(spec.options),
    )


def _batches(train_idx: torch.Tensor, batch_size: int, gen: torch.Generator, drop_last: bool) -> list:
    order = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
    batches = list(torch.split(order, batch_size))
    if drop_last and len(batches) > 1 and batches[-1].numel() < batch_size:
        batches.pop()
    return batches


def _step_stream(train_idx: torch.Tensor, batch_size: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    while True:
        yield from _batches(train_idx, batch_size, gen, drop_last=True)


def _nvml_index() -> int:
    """NVML's index of the current CUDA device (they differ when CUDA_VISIBLE_DEVICES remaps)."""
    index = torch.cuda.current_device()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


def _check_skips(spec: RunSpec):
    """The system class, or `Skipped` when this run cannot happen here."""
    from cherry.bench.systems import get_system

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise Skipped("device cuda asked for, but CUDA is not available on this machine")
    try:
        cls = get_system(spec.system)
    except SystemUnavailable as exc:
        raise Skipped(str(exc)) from exc
    if spec.num_microbatches is None and not cls.accepts_auto_microbatches:
        raise Skipped(f"system {spec.system!r} cannot choose K from a budget (microbatches 'auto')")
    return cls


class _Run:
    def __init__(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        self.spec, self.log = spec, log
        self.progress = _Progress()
        self.deadline = _Deadline(spec.timeout_s)
        self.budget_bytes = effective_budget_bytes(spec)
        self.device = torch.device(spec.device)

    def _timed_step(self, system, probe: TimingProbe, seeds: torch.Tensor, gen: torch.Generator, label: str) -> StepOutcome:
        self.deadline.check()
        probe.start_step()
        try:
            outcome = system.step(seeds, gen)
        except BaseException:
            probe.abort_step()
            raise
        timing = probe.end_step()
        self.progress.timings.append(timing)
        self.progress.outcomes.append(outcome)
        self.log(f"[{self.spec.system}] {label} loss={outcome.loss:.4f} K={outcome.num_microbatches} "
                 f"time={timing.total_s:.4f}s")
        return outcome

    def _evaluate(self, system) -> dict:
        self.deadline.check()
        t0 = time.perf_counter()
        acc = system.evaluate()
        self.progress.epoch_eval_s.append(time.perf_counter() - t0)
        self.progress.final_accuracy = dict(acc)
        return acc

    def _train(self, system, probe: TimingProbe, dataset) -> None:
        spec, p = self.spec, self.progress
        order_gen = torch.Generator().manual_seed(spec.seed)
        sample_gen = torch.Generator().manual_seed(spec.seed * SAMPLE_SEED_OFFSET + 1)
        if spec.epochs == 0:
            stream = _step_stream(dataset.train_idx, spec.batch_size, order_gen)
            total = spec.warmup + spec.steps
            for i in range(total):
                tag = " (warm-up)" if i < spec.warmup else ""
                self._timed_step(system, probe, next(stream), sample_gen, f"step {i + 1}/{total}{tag}")
            if spec.evaluate:
                self._evaluate(system)
            return
        for epoch in range(spec.epochs):
            batches = _batches(dataset.train_idx, spec.batch_size, order_gen, drop_last=False)
            weighted, seen = 0.0, 0
            for i, seeds in enumerate(batches):
                out = self._timed_step(system, probe, seeds, sample_gen, f"epoch {epoch} step {i + 1}/{len(batches)}")
                weighted += out.loss * seeds.numel()
                seen += seeds.numel()
            p.epoch_losses.append(weighted / max(seen, 1))
            if spec.evaluate:
                acc = self._evaluate(system)
                for split in ("train", "valid", "test"):
                    p.epoch_acc[split].append(acc.get(split))
                self.log(f"[{spec.system}] epoch {epoch}: loss={p.epoch_losses[-1]:.4f} valid_acc={acc.get('valid')}")

    def _measure_run(self, cls, config: SystemConfig) -> None:
        from cherry.data import load_dataset
        from cherry.memory import DeviceMemory, NvmlSampler

        spec, p = self.spec, self.progress
        t0 = time.perf_counter()
        dataset = load_dataset(spec.dataset, spec.root)
        p.load_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        cls.preprocess(dataset, config)
        p.preprocess_s = time.perf_counter() - t0
        nvml = NvmlSampler(_nvml_index()) if self.device.type == "cuda" else nullcontext()
        with DeviceMemory(self.device, spec.device_memory) as raw_memory, nvml as sampler:
            memory = RunPeakMemory(raw_memory)
            probe = TimingProbe(self.device)
            system = None
            try:
                t0 = time.perf_counter()
                system = cls(dataset, config, self.device, memory, probe)
                p.build_s = time.perf_counter() - t0
                p.num_parameters = getattr(system, "num_parameters", None)
                self._train(system, probe, dataset)
            finally:
                p.peak_tracked_bytes = memory.run_peak_bytes()
                p.peak_reserved_bytes = memory.run_peak_reserved_bytes()
                if sampler is not None:
                    sampler.sample()
                    p.nvml_peak_bytes, p.nvml_baseline_bytes = sampler.peak_bytes, sampler.baseline_bytes
                if system is not None:
                    p.estimator_errors = tuple(system.estimator_errors())
                    system.close()

    def execute(self) -> tuple[str, Optional[str]]:
        """Run; returns (status, reason). Raises only for status error (the caller records it)."""
        from cherry.planning import BudgetTooSmallError

        spec = self.spec
        torch.manual_seed(spec.seed)
        random.seed(spec.seed)
        np.random.seed(spec.seed % 2**32)
        try:
            cls = _check_skips(spec)
        except Skipped as exc:
            return "skipped", str(exc)
        config = system_config(spec, self.budget_bytes)
        if self.device.type == "cpu":
            # The CPU tracker's dispatch mode imports torch._dynamo on first use (about 1 s); do it
            # here so neither build_s nor the timeout pays for an import.
            importlib.import_module("torch._dynamo")
        try:
            try:
                self.deadline.arm()
                self._measure_run(cls, config)
            finally:
                self.deadline.disarm()
        except RunTimeout as exc:
            return "timeout", str(exc)
        except (torch.OutOfMemoryError, BudgetTooSmallError) as exc:
            return "oom", _one_line(exc)
        except SystemUnavailable as exc:
            return "skipped", str(exc)
        return "ok", None


def execute(spec: RunSpec, out_path: str, log: Callable[[str], None]) -> int:
    """Run ``spec``, write its record to ``out_path``; returns the exit code (0, or 1 for an error)."""
    import sys
    import traceback

    from cherry.memory import process_peak_rss_bytes

    run = _Run(spec, log)
    code = EXIT_OK
    try:
        status, reason = run.execute()
    except Exception as exc:  # anything but a result (oom, timeout, skipped) fails loudly
        traceback.print_exc(file=sys.stderr)
        status, reason, code = "error", _one_line(exc), EXIT_ERROR
    p = run.progress
    m = RunMeasurements(
        status=status, reason=reason, device=spec.device, budget_bytes=run.budget_bytes,
        warmup_steps=min(spec.warmup, len(p.timings)), step_timings=tuple(p.timings),
        step_outcomes=tuple(p.outcomes), num_parameters=p.num_parameters, load_s=p.load_s,
        preprocess_s=p.preprocess_s, build_s=p.build_s, wall_s=time.monotonic() - run.deadline.start,
        peak_tracked_bytes=p.peak_tracked_bytes, peak_reserved_bytes=p.peak_reserved_bytes,
        nvml_peak_bytes=p.nvml_peak_bytes, nvml_baseline_bytes=p.nvml_baseline_bytes,
        process_peak_rss_bytes=process_peak_rss_bytes(), estimator_errors=tuple(p.estimator_errors),
        epoch_losses=tuple(p.epoch_losses), epoch_train_acc=tuple(p.epoch_acc["train"]),
        epoch_valid_acc=tuple(p.epoch_acc["valid"]), epoch_test_acc=tuple(p.epoch_acc["test"]),
        epoch_eval_s=tuple(p.epoch_eval_s), final_accuracy=p.final_accuracy,
    )
    write_record(out_path, build_record(spec, m))
    log(f"[{spec.system}] {status}{': ' + reason if reason else ''} -> {out_path}")
    return code
