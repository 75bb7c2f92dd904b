"""`cherry train`: train a model with automatic micro-batching under a (possibly emulated) memory budget.

The options are the run spec's (`cherry.cli.options`). `train` runs the epochs inside the (emulated or
real) device memory, with progress bars on an interactive terminal (`cherry.progress`), and turns an
out-of-memory into a result (``status: "oom"``, exit 3) instead of a crash; ``--json`` writes its
summary as strict JSON (no NaN). A loss that becomes NaN or infinite stops the run
(`cherry.errors.LossDiverged`, exit 4); any failure after finished epochs still writes the summary, with
the epochs done and ``status`` naming the failure (diverged, error, ...). A SIGINT or SIGTERM abandons
the step in flight, writes the summary with ``status: "interrupted"``, keeps the last checkpoint (a save
is never cut) and exits 128 + the signal (130, 143).

The epochs are `Trainer.fit`'s (checkpoints, resumption): this module turns progress on, and adds
the summary and the printed lines, nothing of the loop.

Several ranks (`cherry.execution.distributed`): ``--nproc N`` starts N ranks here (`cherry.launch`);
under ``torchrun`` or ``srun`` each process is one rank of the launcher's world. Rank 0 prints and
writes the summary; a failed rank ends the job with one line (exit 1).
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import asdict
from typing import Callable

from cherry.cli.options import add_cherry_options, add_spec_options, spec_from_args
from cherry.errors import EXIT_OOM, LossDiverged, ResultKept, check_loss, cut, fault_line, write_json_keeping
from cherry.memory import format_size
from cherry.outputs import DIR, add_output
from cherry.spec import RunSpec


def register(sub: argparse._SubParsersAction) -> None:
    from cherry.execution.checkpoint import FILES

    p = sub.add_parser("train", help="train with exact micro-batching under a memory budget")
    add_spec_options(p)
    add_cherry_options(p)
    p.add_argument("--no-eval", dest="evaluate", action="store_const", const="false", default=argparse.SUPPRESS,
                   help="skip the layer-wise evaluation after each epoch (= --evaluate false)")
    add_output(p, "--json", default=None, metavar="OUT", help="write a JSON summary here")
    add_output(p, "--save", kind=DIR, keeps=FILES, default=None, metavar="DIR",
               help="write a checkpoint to DIR after each epoch (atomic) and keep the best-validation model")
    p.add_argument("--resume", default=None, metavar="DIR",
                   help="continue the run checkpointed in DIR (same settings; --epochs may be larger)")
    p.add_argument("--overwrite", action="store_true",
                   help="with --save DIR: start DIR afresh even if it holds a checkpoint of another run spec")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bars (shown only where standard error is a terminal)")
    p.set_defaults(func=run, _parser=p)


def _finite(value):
    """``value`` with every NaN or infinity (e.g. an accuracy not evaluated) as None: strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _silent(line: str) -> None:
    pass


def _train_rank(spec_dict: dict, progress: bool) -> dict:
    """The body of one rank that `cherry.launch.launch` started (module-level: it must pickle)."""
    from cherry.spec import spec_from_dict

    return train(spec_from_dict(spec_dict), progress, lambda line: print(line, flush=True))


def train(spec: RunSpec, progress: bool = True, echo: Callable[[str], None] = print,
          save_dir=None, resume_dir=None, overwrite: bool = False) -> dict:
    """Train every epoch of ``spec``; return a JSON-able summary (``status`` ok or oom).

    ``spec.nproc > 1`` outside a launcher starts that many ranks here and returns rank 0's summary;
    inside a launcher's world (torchrun, srun, or those ranks) this process trains as its rank."""
    from cherry.launch import launch, process_group, world_from_env

    world = world_from_env()
    if (save_dir or resume_dir) and (spec.nproc > 1 or world is not None):
        raise ValueError("--save/--resume: checkpoints are for one-process runs (nproc 1)")
    if world is None:
        if spec.nproc > 1:
            return launch(_train_rank, (spec.to_dict(), progress), spec.nproc)[0]
        return _train(spec, progress, echo, None, save_dir, resume_dir, overwrite)
    if spec.nproc not in (1, world.world_size):
        raise ValueError(f"--nproc: {spec.nproc} differs from the launcher's world of {world.world_size} ranks")
    lead = world.rank == 0
    with process_group(world, spec.device):
        return _train(spec, progress and lead, echo if lead else _silent, world)


def _train(spec: RunSpec, progress: bool, echo: Callable[[str], None], world, save_dir=None,
           resume_dir=None, overwrite: bool = False) -> dict:
    import torch

    from cherry.data import load_dataset
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory

    summary: dict = {"spec": spec.to_dict(), "status": "ok", "reason": None, "epochs": [],
                     "nproc": world.world_size if world else 1, "rank": world.rank if world else 0, "step_losses": [],
                     "step_feature_bytes_moved": []}
    dataset = load_dataset(spec.dataset, spec.root)
    with DeviceMemory(spec.device, spec.device_memory_bytes) as memory:
        if world is None:
            trainer = Trainer(dataset, spec, memory=memory)
        else:
            from cherry.execution.distributed import DistributedTrainer

            trainer = DistributedTrainer(dataset, spec, memory=memory)
        _describe(trainer, summary, echo)
        try:
            _fit(trainer, summary, progress, echo, save_dir, resume_dir, overwrite)
        except torch.OutOfMemoryError as exc:
            summary.update(status="oom", reason=str(exc).splitlines()[0])
        except BaseException as exc:  # the epochs done are kept: the caller writes them, then reports exc
            status = "diverged" if isinstance(exc, LossDiverged) else \
                "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
            summary.update(status=status, reason=cut(fault_line(exc) or f"{type(exc).__name__}: {exc}", 300))
            exc.cherry_summary = _finite(summary)
            raise
        finally:
            trainer.close()
        if world is not None:
            summary["rank_peak_bytes"] = list(trainer.rank_peak_bytes)
        evaluated = [e for e in summary["epochs"] if e["valid_acc"] == e["valid_acc"] and e["valid_acc"] is not None]
        if evaluated:  # the best-validation epoch (what --save keeps as best.pt)
            best = max(evaluated, key=lambda e: e["valid_acc"])  # the first of equals
            summary["best"] = {k: best[k] for k in ("epoch", "valid_acc", "test_acc")}
        errors = trainer.memory_model.relative_errors()
        summary["estimator_median_relative_error"] = statistics.median(errors) if errors else None
    return _finite(summary)


def _describe(trainer, summary: dict, echo: Callable[[str], None]) -> None:
    """The run's placement choices, into ``summary`` and echoed."""
    from cherry.ops import extension_status

    summary["num_parameters"] = trainer.num_parameters
    summary["native_ops"] = extension_status()
    summary["construction"] = trainer.construction.as_dict()
    echo(f"construction: {trainer.construction.where} ({trainer.construction.reason})")
    summary["feature_cache"] = trainer.residency.as_dict()
    if trainer.residency.mode == "none" and trainer.spec.options.get("feature_cache", "none") == "none":
        return  # no cache asked for, none built: nothing to say (the --json summary still records it)
    echo(f"feature cache: {trainer.residency.mode}, {trainer.residency.cache_rows} of "
         f"{trainer.residency.num_rows} rows, {format_size(trainer.residency.cache_bytes)} "
         f"({trainer.residency.reason})")


def _fit(trainer, summary: dict, progress: bool, echo: Callable[[str], None], save_dir, resume_dir,
         overwrite: bool) -> None:
    """Drive `Trainer.fit` (checkpoints, resumption), its steps and evaluation shown as progress bars on
    an interactive standard error (`cherry.progress`), one line per epoch in any case; every finished
    epoch goes into ``summary`` as it completes, so an interruption keeps it."""
    import contextlib

    from cherry import progress as bars

    now: dict = {"epoch": None, "started_s": 0.0}

    def take_resumed() -> None:  # once: the resumed run's finished epochs come first
        if resume_dir is not None and "resumed_epochs" not in summary:
            summary["epochs"] = trainer.resumed_history + summary["epochs"]
            summary["resumed_epochs"] = len(trainer.resumed_history)
            echo(f"resumed from {resume_dir}: {summary['resumed_epochs']} epochs done")

    def on_epoch_start(epoch: int) -> None:
        take_resumed()
        now.update(epoch=epoch, started_s=time.perf_counter())

    def on_step(stats) -> None:
        summary["step_losses"].append(stats.loss)
        summary["step_feature_bytes_moved"].append(stats.feature_bytes_moved)
        check_loss(stats.loss, len(summary["step_losses"]), now["epoch"])

    with bars.shown() if progress else contextlib.nullcontext():
        for result in trainer.fit(on_step, save_dir=save_dir, resume_dir=resume_dir, overwrite=overwrite,
                                  on_epoch_start=on_epoch_start):
            summary["epochs"].append({**asdict(result), "wall_s": time.perf_counter() - now["started_s"]})
            echo(_epoch_line(result))
    take_resumed()


def _epoch_line(result) -> str:
    peak = result.measured_peak_bytes
    return (f"epoch {result.epoch}: loss={result.loss:.4f} train_acc={result.train_acc:.4f} "
            f"valid_acc={result.valid_acc:.4f} K={result.max_microbatches} "
            f"peak={format_size(peak) if peak else 'n/a'} est={format_size(result.estimated_peak_bytes)} "
            f"K_changes={result.k_changes} recompute={result.recompute_steps}/{result.num_steps} "
            f"h2d={format_size(result.feature_bytes_moved)} hit={result.feature_hit_rate:.3f}"
            + (f" streamed={result.streamed_steps}/{result.num_steps}" if result.streamed_steps else ""))


def _write_summary(path: str, summary: dict) -> None:
    """Write a failed run's summary; where even that fails, say where it was kept (the run's own error
    is the one reported)."""
    try:
        write_json_keeping(path, summary)
    except ResultKept as kept:
        print(f"cherry: {kept}", file=sys.stderr)


# Run-spec keys of the benchmark runner's (timed steps of one configuration); training runs epochs.
_RUNNER_ONLY = {"steps": "--steps", "warmup": "--warmup", "timeout_s": "--timeout-s"}


def _refuse_what_does_not_apply(args: argparse.Namespace) -> None:
    """An option given that training would ignore is refused in one line (spec options are absent
    from ``args`` unless given)."""
    given = [flag for key, flag in _RUNNER_ONLY.items() if hasattr(args, key)]
    if given:
        raise ValueError(f"{', '.join(given)}: the benchmark runner's (python -m cherry.bench.run), not cherry "
                         "train's, which runs --epochs (and --max-steps per epoch); leave it out")
    if getattr(args, "root", None) is not None:
        from cherry.data.sources import dataset_kind

        if dataset_kind(args.dataset if hasattr(args, "dataset") else "synth-arxiv") != "builtin":
            raise ValueError(f"--root: does not apply to dataset {args.dataset!r} (a directory or a registered "
                             "name is read where it is); leave it out")


def _same_dir(a, b) -> bool:
    from pathlib import Path

    return b is not None and Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


def run(args: argparse.Namespace) -> int:
    from cherry.launch import RankFailed

    spec = spec_from_args(args, args._parser)  # each value checked first, then whether it applies
    _refuse_what_does_not_apply(args)
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device: cuda was asked for, but no CUDA device is available")
    if spec.epochs < 1:
        raise ValueError(f"--epochs: expected an integer >= 1 for training, got {spec.epochs}")
    if args.overwrite and args.save is None:
        raise ValueError("--overwrite: applies to --save DIR only, and no --save was given")
    if args.save is not None and not _same_dir(args.save, args.resume):
        from cherry.execution.checkpoint import check_save_directory

        check_save_directory(args.save, spec, args.overwrite)  # before the work: not after an epoch
    try:
        summary = train(spec, progress=not args.quiet, echo=lambda line: print(line, flush=True),
                        save_dir=args.save, resume_dir=args.resume, overwrite=args.overwrite)
    except RankFailed as exc:
        print(f"cherry: error: {exc}", file=sys.stderr)
        return 1
    except BaseException as exc:  # a failure after finished epochs still writes what was finished
        partial = getattr(exc, "cherry_summary", None)
        if args.json is not None and partial is not None and partial.get("rank", 0) == 0:
            _write_summary(args.json, partial)
            print(f"cherry: the summary of the {len(partial['epochs'])} epoch(s) done "
                  f"(status {partial['status']}) is in {args.json}", file=sys.stderr)
        raise
    if summary.get("rank", 0) != 0:  # under torchrun/srun: rank 0 reports
        return EXIT_OOM if summary["status"] == "oom" else 0
    if args.json is not None:
        write_json_keeping(args.json, summary)
    if summary["status"] == "oom":
        print(f"cherry: out of memory: {summary['reason']}", file=sys.stderr)
        return EXIT_OOM
    last = summary["epochs"][-1]
    acc = " ".join(f"{k}={last[k]:.4f}" for k in ("valid_acc", "test_acc") if last[k] is not None)
    print(f"done: K={last['max_microbatches']} peak={format_size(last['measured_peak_bytes'] or 0)} {acc}".rstrip())
    if summary.get("best"):
        b = summary["best"]
        print(f"best validation: epoch {b['epoch']} valid_acc={b['valid_acc']:.4f} test_acc={b['test_acc']:.4f}")
    return 0
