"""The body of one benchmark run (see `cherry.bench.run` for the command and the outcomes).

Batches come from `cherry.sampling.BatchLoader` by the one rule of `cherry.sampling.loader` (the
Trainer's), so every system sees the same batches and the same sampling stream. A system that
prepares ahead (cherry: sampling and planning) has batch ``i + 1`` prepared on the loader's thread
while batch ``i`` steps; the step's ``sample`` phase is the wait for it. Systems are built from the
spec with its budget resolved (`cherry.spec.resolve_budget_bytes`), the one rule of every engine.
"""
from __future__ import annotations

import importlib
import os
import random
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import torch

from cherry.bench.measure import RunPeakMemory, TimingProbe
from cherry.bench.record import RunMeasurements, build_record, validate_record
from cherry.systems.contract import SystemUnavailable
from cherry.data.metrics import SPLITS
from cherry.errors import LossDiverged, check_loss, cut, fault_line, write_json_keeping
from cherry.sampling import BatchLoader, sampling_generator, spec_seed_batches
from cherry.spec import RunSpec, resolve_budget_bytes

EXIT_OK, EXIT_ERROR, EXIT_BAD_SPEC = 0, 1, 2


def apply_process_switches(spec: RunSpec) -> None:
    """Environment switches that must precede the first op (one process per run makes them safe)."""
    if spec.options.get("native_ops") is False:
        os.environ["CHERRY_NO_EXT"] = "1"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_LONGEST_ALARM_S = 100 * 365 * 86400.0


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
    epoch_acc: dict = field(default_factory=lambda: {split: [] for split in SPLITS})
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
    construction: Optional[str] = None
    ordering: Optional[str] = None
    feature_cache: Optional[dict] = None
    steps_per_epoch: Optional[int] = None
    oom_single_seed: Optional[bool] = None  # set when the run ends out of memory


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
            # beyond a century the alarm cannot fire in a run, and setitimer overflows time_t near 1e10 s
            signal.setitimer(signal.ITIMER_REAL, min(self.timeout_s, _LONGEST_ALARM_S))
            self._armed = True

    def disarm(self) -> None:
        if self._armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            self._armed = False

    def check(self) -> None:
        if self.timeout_s is not None and time.monotonic() - self.start > self.timeout_s:
            raise RunTimeout(f"run exceeded timeout_s={self.timeout_s:g} s")


def _nvml_index() -> int:
    """NVML's index of the current CUDA device (they differ when CUDA_VISIBLE_DEVICES remaps)."""
    index = torch.cuda.current_device()
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


def _check_skips(spec: RunSpec):
    """The system class, or `Skipped` when this run cannot happen here."""
    from cherry.systems import get_system

    if spec.device == "cuda" and not torch.cuda.is_available():
        raise Skipped("device cuda asked for, but CUDA is not available on this machine")
    try:
        cls = get_system(spec.system)
    except SystemUnavailable as exc:
        raise Skipped(str(exc)) from exc
    if spec.num_microbatches is None and not cls.accepts_auto_microbatches:
        raise Skipped(f"system {spec.system!r} cannot choose K from a budget (microbatches 'auto')")
    return cls


def _single_seed_failed(exc: BaseException, spec: RunSpec) -> bool:
    """Whether an out-of-memory came from a micro-batch of one seed (no K fits the batch): raised as
    such (cherry's executor and planner, the baselines' K search), or a fixed K of one seed each."""
    from cherry.memory import SingleSeedOutOfMemoryError
    from cherry.planning import BudgetTooSmallError

    if isinstance(exc, (SingleSeedOutOfMemoryError, BudgetTooSmallError)):
        return True
    return spec.num_microbatches is not None and spec.num_microbatches >= spec.batch_size


class _Run:
    def __init__(self, spec: RunSpec, log: Callable[[str], None]) -> None:
        self.spec, self.log = spec, log
        self.progress = _Progress()
        self.deadline = _Deadline(spec.timeout_s)
        self.budget_bytes = resolve_budget_bytes(spec)
        self.device = torch.device(spec.device)
        self.epoch: Optional[int] = None

    def _timed_steps(self, system, probe: TimingProbe, loader: BatchLoader, label: Callable[[int], str]) -> list:
        """Step through ``loader``: each step's timing includes the wait for its batch (``sample``)."""
        outcomes = []
        batches = iter(loader)
        for i in range(len(loader)):
            self.deadline.check()
            probe.start_step()
            try:
                with probe.phase("sample"):
                    batch = next(batches)
                outcome = system.step(batch)
            except BaseException:
                probe.abort_step()
                raise
            timing = probe.end_step()
            self.progress.timings.append(timing)
            self.progress.outcomes.append(outcome)
            outcomes.append((batch.seeds.numel(), outcome))
            check_loss(outcome.loss, len(self.progress.outcomes), self.epoch)
            self.log(f"[{self.spec.system}] {label(i)} loss={outcome.loss:.4f} K={outcome.num_microbatches} "
                     f"time={timing.total_s:.4f}s")
        return outcomes

    def _evaluate(self, system) -> dict:
        self.deadline.check()
        t0 = time.perf_counter()
        acc = system.evaluate()
        self.progress.epoch_eval_s.append(time.perf_counter() - t0)
        self.progress.final_accuracy = dict(acc)
        return acc

    def _loader(self, system, batches: list) -> BatchLoader:
        prepare = system.prepare if system.prepares_ahead else None
        return BatchLoader(batches, self.generator, prepare)

    def _train(self, system, probe: TimingProbe, dataset) -> None:
        spec, p = self.spec, self.progress
        self.generator = sampling_generator(spec.seed)
        self.epoch = None
        if spec.epochs == 0:
            total = spec.warmup + spec.steps
            with self._loader(system, spec_seed_batches(spec, dataset.train_idx)) as loader:
                self._timed_steps(system, probe, loader, lambda i: f"step {i + 1}/{total}"
                                  + (" (warm-up)" if i < spec.warmup else ""))
            if spec.evaluate:
                self._evaluate(system)
            return
        for epoch in range(spec.epochs):
            self.epoch = epoch
            batches = spec_seed_batches(spec, dataset.train_idx, epoch)
            with self._loader(system, batches) as loader:
                done = self._timed_steps(system, probe, loader,
                                         lambda i: f"epoch {epoch} step {i + 1}/{len(batches)}")
            seen = sum(n for n, _ in done)
            p.epoch_losses.append(sum(o.loss * n for n, o in done) / max(seen, 1))
            if spec.evaluate:
                acc = self._evaluate(system)
                for split in SPLITS:
                    p.epoch_acc[split].append(acc.get(split))
                self.log(f"[{spec.system}] epoch {epoch}: loss={p.epoch_losses[-1]:.4f} valid_acc={acc.get('valid')}")

    def _measure_run(self, cls, spec: RunSpec) -> None:
        from cherry.data import load_dataset
        from cherry.memory import DeviceMemory, NvmlSampler

        p = self.progress
        t0 = time.perf_counter()
        dataset = load_dataset(spec.dataset, spec.root)
        p.load_s = time.perf_counter() - t0
        p.steps_per_epoch = len(spec_seed_batches(spec, dataset.train_idx, 0))
        t0 = time.perf_counter()
        cls.preprocess(dataset, spec)
        p.preprocess_s = time.perf_counter() - t0
        nvml = NvmlSampler(_nvml_index()) if self.device.type == "cuda" else nullcontext()
        with DeviceMemory(self.device, spec.device_memory_bytes) as raw_memory, nvml as sampler:
            memory = RunPeakMemory(raw_memory)
            probe = TimingProbe(self.device)
            system = None
            try:
                t0 = time.perf_counter()
                system = cls(dataset, spec, self.device, memory, probe)
                p.build_s = time.perf_counter() - t0
                p.num_parameters = getattr(system, "num_parameters", None)
                p.construction = getattr(system, "construction", None)
                p.ordering = getattr(system, "ordering", None)
                p.feature_cache = getattr(system, "feature_cache", None)
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
        resolved = spec if self.budget_bytes == spec.budget_bytes else spec.replace(budget_bytes=self.budget_bytes)
        if self.device.type == "cpu":
            # The CPU tracker's dispatch mode imports torch._dynamo on first use (about 1 s); do it
            # here so neither build_s nor the timeout pays for an import.
            importlib.import_module("torch._dynamo")
        try:
            try:
                self.deadline.arm()
                self._measure_run(cls, resolved)
            finally:
                self.deadline.disarm()
        except RunTimeout as exc:
            return "timeout", str(exc)
        except (torch.OutOfMemoryError, BudgetTooSmallError) as exc:
            self.progress.oom_single_seed = _single_seed_failed(exc, spec)
            return "oom", _one_line(exc)
        except SystemUnavailable as exc:
            return "skipped", str(exc)
        except LossDiverged as exc:
            return "diverged", str(exc)
        return "ok", None


def execute(spec: RunSpec, out_path: str, log: Callable[[str], None]) -> int:
    """Run ``spec``, write its record to ``out_path``; returns the exit code (0, or 1 for an error).
    A run of ``spec.nproc > 1`` ranks launches them (`cherry.bench.ranks`), each running this."""
    import sys

    if spec.nproc > 1 and not torch.distributed.is_initialized():
        from cherry.bench.ranks import execute_ranks

        return EXIT_ERROR if execute_ranks(spec, out_path, log, execute) == "error" else EXIT_OK
    import traceback

    from cherry.memory import process_peak_rss_bytes

    run = _Run(spec, log)
    code = EXIT_OK
    try:
        status, reason = run.execute()
    except Exception as exc:  # anything but a result (oom, timeout, skipped, diverged) fails loudly
        fault = fault_line(exc)
        if fault is None:  # a bug: its traceback; an environment fault: its one line is enough
            traceback.print_exc(file=sys.stderr)
        status, reason, code = "error", cut(fault or _one_line(exc), 500), EXIT_ERROR
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
        construction=p.construction,
        ordering=p.ordering, feature_cache=p.feature_cache,
        steps_per_epoch=p.steps_per_epoch, oom_single_seed=p.oom_single_seed,
    )
    record = build_record(spec, m)
    validate_record(record)
    write_json_keeping(out_path, record)  # a full disk now keeps the finished run elsewhere and says where
    log(f"[{spec.system}] {status}{': ' + reason if reason else ''} -> {out_path}")
    return code
