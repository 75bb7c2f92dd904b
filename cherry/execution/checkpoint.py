"""Checkpoints of a `Trainer` run: ``--save DIR`` writes them, ``--resume DIR`` continues from them.

``DIR/last.pt`` holds, after each finished epoch: the model and optimizer state, the random state
(torch's global generator and the run's sampling generator), the executor's step count (which seeds
the exact dropout masks), the memory model's calibration, the number of finished epochs, every
finished epoch's result, the best validation accuracy so far and the run spec. ``DIR/best.pt`` holds the
model of the epoch with the best validation accuracy. ``DIR/checkpoint.json`` names both with their
sha256, written last: a checkpoint is whatever that file vouches for.

Both files are loaded as data (`cherry.safe_load.load_tensors`: tensors and plain values only), so a
checkpoint directory from someone else, its index rewritten to match, runs no code: a file holding any
other Python object is refused in one line.

Every write is atomic (a temporary file in DIR, then a rename), so a run killed at any point leaves the
previous complete checkpoint. Resuming restores all of the above, so the resumed epochs draw the same
batches, samples and dropout masks and give the same losses as an uninterrupted run. Resuming from a
checkpoint of another spec (any key but ``root`` and ``epochs``) or from a corrupt or incomplete one is
a one-line `CheckpointError`. One run writes a directory at a time (a lock); a fresh run into a
directory holding a checkpoint of its own spec starts it afresh, one of another spec is refused unless
``overwrite`` (`check_save_directory`); the temporaries of a killed save are removed when the next run
takes the directory.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Optional

import torch

from cherry.errors import interrupts_deferred
from cherry.safe_load import UnsafeFileError, load_tensors

FORMAT = "cherry-checkpoint"
FORMAT_VERSION = 1
INDEX = "checkpoint.json"
FILES = (INDEX, "last.pt", "best.pt")  # what a checkpoint directory holds (an output may not take these names)
LOCK = ".lock"
_FREE_KEYS = ("root", "epochs")  # may differ between the saving and the resuming run


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message is one line naming the file and the fault."""


def _atomic_write(path: Path, data: bytes) -> str:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return hashlib.sha256(data).hexdigest()


def _tensor_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _spec_identity(spec) -> dict:
    data = spec.to_dict()
    for key in _FREE_KEYS:
        data.pop(key, None)
    return data


def trainer_state(trainer) -> dict:
    """What a resumed `Trainer` needs to continue exactly (see the module docstring)."""
    mm = trainer.memory_model
    return {
        "model": trainer.model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
        "executor_steps": trainer.executor._num_steps, "torch_rng": torch.get_rng_state(),
        "generator": trainer.generator.get_state(),
        "memory_model": {"scale": mm.scale, "floor_bytes": mm.floor_bytes, "recompute_factor": mm.recompute_factor,
                         "rc_samples": list(mm._rc_samples), "st_samples": list(mm._st_samples),
                         "st_probes": list(mm._st_probes),
                         "largest_fitted_activation_bytes": mm.largest_fitted_activation_bytes,
                         "smallest_failed_seed_bytes": dict(mm.smallest_failed_seed_bytes),
                         "samples": list(mm._samples), "measured": mm._measured,
                         "error_history": list(mm.error_history)},
    }


def load_trainer_state(trainer, state: dict) -> None:
    trainer.model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.executor._num_steps = int(state["executor_steps"])
    torch.set_rng_state(state["torch_rng"])
    trainer.generator.set_state(state["generator"])
    mm = trainer.memory_model
    saved = state["memory_model"]
    mm.scale = float(saved["scale"])
    mm.floor_bytes = int(saved["floor_bytes"])
    mm.recompute_factor = float(saved.get("recompute_factor", mm.recompute_factor))
    mm._rc_samples[:] = [tuple(p) for p in saved.get("rc_samples", [])]
    mm.seed_stream([tuple(p) for p in saved.get("st_probes", [])], probes=True)
    mm.seed_stream([tuple(p) for p in saved.get("st_samples", [])])
    mm.largest_fitted_activation_bytes = float(saved["largest_fitted_activation_bytes"])
    mm.smallest_failed_seed_bytes = dict(saved["smallest_failed_seed_bytes"])
    mm._samples[:] = [tuple(p) for p in saved["samples"]]
    mm._measured = bool(saved.get("measured", bool(mm._samples)))
    mm.error_history[:] = [tuple(p) for p in state["memory_model"]["error_history"]]


class Checkpointer:
    """Writes a run's checkpoints into ``directory`` after each epoch (see the module docstring).

    The directory is locked (``flock`` on ``DIR/.lock``) from construction to `close`, so a second
    run saving there is refused in one line; the kernel drops the lock of a killed process. Taking
    the lock removes the temporaries a killed save left. A fresh run (``resumed`` False) first clears
    what an earlier run left, index first, so nothing vouches for another run's ``best.pt``; a
    checkpoint of another spec is refused instead, unless ``overwrite``."""

    def __init__(self, directory: str | os.PathLike, spec, overwrite: bool = False, resumed: bool = False) -> None:
        self.directory = Path(directory).expanduser()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--save: cannot create {self.directory}: {exc.strerror or exc}") from None
        if not os.access(self.directory, os.W_OK):
            raise ValueError(f"--save: {self.directory} is not writable")
        self.spec = spec
        self._lock = _lock_directory(self.directory)
        try:
            _remove_stale_temporaries(self.directory)
            if not resumed:
                check_save_directory(self.directory, spec, overwrite)
                for name in FILES:  # the index first: from here on nothing vouches for the old files
                    (self.directory / name).unlink(missing_ok=True)
        except BaseException:
            self.close()
            raise
        self.best_valid_acc: Optional[float] = None
        self.best_epoch: Optional[int] = None
        self.history: list[dict] = []

    def close(self) -> None:
        """Release the directory's lock (a killed process releases it too)."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def save(self, trainer, result) -> None:
        """Record finished epoch ``result`` (an `EpochResult`) of ``trainer``; a SIGINT or SIGTERM
        arriving meanwhile waits until the files and their index are written."""
        with interrupts_deferred():
            self._save(trainer, result)

    def _save(self, trainer, result) -> None:
        self.history.append(asdict(result))
        index = self._read_index() or {}
        valid = result.valid_acc
        if valid == valid and (self.best_valid_acc is None or valid > self.best_valid_acc):
            self.best_valid_acc, self.best_epoch = float(valid), int(result.epoch)
            best = {"format": FORMAT, "model": trainer.model.state_dict(), "epoch": result.epoch,
                    "valid_acc": valid, "test_acc": result.test_acc, "spec": self.spec.to_dict()}
            index["best"] = {"file": "best.pt", "sha256": _atomic_write(self.directory / "best.pt",
                                                                        _tensor_bytes(best)),
                             "epoch": result.epoch, "valid_acc": valid, "test_acc": result.test_acc}
        last = {"format": FORMAT, "format_version": FORMAT_VERSION, "spec": self.spec.to_dict(),
                "epochs_done": result.epoch + 1, "history": self.history,
                "best_valid_acc": self.best_valid_acc, "best_epoch": self.best_epoch,
                "state": trainer_state(trainer)}
        index.update(format=FORMAT, format_version=FORMAT_VERSION, epochs_done=result.epoch + 1,
                     spec=_spec_identity(self.spec),
                     last={"file": "last.pt", "sha256": _atomic_write(self.directory / "last.pt",
                                                                      _tensor_bytes(last))})
        _atomic_write(self.directory / INDEX, (json.dumps(index, indent=2, sort_keys=True) + "\n").encode())

    def _read_index(self) -> Optional[dict]:
        try:
            return json.loads((self.directory / INDEX).read_text())
        except (OSError, ValueError):
            return None

    def adopt(self, checkpoint: dict) -> None:
        """Continue the bookkeeping of a resumed run (its history and best epoch)."""
        self.history = list(checkpoint["history"])
        self.best_valid_acc, self.best_epoch = checkpoint["best_valid_acc"], checkpoint["best_epoch"]


def _lock_directory(directory: Path):
    """An open ``DIR/.lock`` holding an exclusive ``flock``; a one-line CheckpointError if another
    process (or another Checkpointer here) holds it."""
    import fcntl

    handle = open(directory / LOCK, "a+")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise CheckpointError(f"--save: another run is writing checkpoints to {directory} (it holds "
                              f"{directory / LOCK}); expected one writer: save elsewhere or wait for it") from None
    except BaseException:
        handle.close()
        raise
    return handle


def _remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporaries of saves that were killed (``.<file>.tmp-<pid>``): only the lock's
    holder writes here, so none of them belongs to a live save."""
    for name in FILES:
        for leftover in directory.glob(f".{name}.tmp-*"):
            leftover.unlink(missing_ok=True)


def check_save_directory(directory: str | os.PathLike, spec, overwrite: bool = False) -> None:
    """Refuse (one-line CheckpointError) a ``--save`` directory holding a checkpoint of another run
    spec, unless ``overwrite``: saving there would mix two runs' files. Checked before any work."""
    directory = Path(directory).expanduser()
    if overwrite or not (directory / INDEX).exists():
        return
    theirs = _saved_spec(directory)
    ours = _spec_identity(spec)
    if theirs == ours:
        return
    if theirs is None:
        raise CheckpointError(f"--save: {directory} holds a checkpoint that cannot be read; start afresh there "
                              "with --overwrite, or save elsewhere")
    key = next(k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k))
    raise CheckpointError(f"--save: {directory} holds a checkpoint of another run spec (key {key}: "
                          f"{theirs.get(key)!r} there, {ours.get(key)!r} here); save elsewhere, resume it with the "
                          "same settings, or start afresh there with --overwrite")


def _saved_spec(directory: Path) -> Optional[dict]:
    """The spec identity of the checkpoint in ``directory`` (the index's; an older index has none:
    then ``last.pt``'s, loaded as data), or None when it cannot be read."""
    try:
        index = json.loads((directory / INDEX).read_text())
        if isinstance(index.get("spec"), dict):
            return index["spec"]
        return _spec_identity_dict(load_tensors(directory / "last.pt", str(directory / "last.pt"))["spec"])
    except Exception:
        return None


def read_checkpoint(directory: str | os.PathLike, spec) -> dict:
    """The last checkpoint in ``directory``, checked against its index and against ``spec``."""
    directory = Path(directory).expanduser()
    index_path = directory / INDEX
    if not index_path.is_file():
        raise CheckpointError(f"--resume: no checkpoint in {directory} (no {INDEX}); save one with --save {directory}")
    try:
        index = json.loads(index_path.read_text())
        entry = index["last"]
        if index.get("format") != FORMAT or index.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"format {index.get('format')!r} v{index.get('format_version')}")
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"--resume: {index_path} is corrupt ({type(exc).__name__}: {exc}); "
                              "expected a checkpoint index written by cherry train --save") from None
    path = directory / "last.pt"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"--resume: cannot read {path}: {exc.strerror or exc}") from None
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise CheckpointError(f"--resume: {path} fails its sha256 check (corrupt or truncated); "
                              "resume from an intact checkpoint or start afresh")
    try:
        checkpoint = load_tensors(data, f"--resume: {path}")
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    except Exception as exc:
        raise CheckpointError(f"--resume: {path} cannot be loaded ({type(exc).__name__}); it is corrupt") from None
    theirs, ours = _spec_identity_dict(checkpoint["spec"]), _spec_identity(spec)
    if theirs != ours:
        key = next(k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k))
        raise CheckpointError(f"--resume: {directory} holds a checkpoint of another run spec (key {key}: "
                              f"{theirs.get(key)!r} there, {ours.get(key)!r} here); resume with the same "
                              "settings or save elsewhere")
    if checkpoint["epochs_done"] > spec.epochs:
        raise CheckpointError(f"--resume: {directory} holds {checkpoint['epochs_done']} finished epochs, more "
                              f"than --epochs {spec.epochs}")
    return checkpoint


def _spec_identity_dict(data: dict) -> dict:
    data = dict(data)
    for key in _FREE_KEYS:
        data.pop(key, None)
    return data


def load_best_model(directory: str | os.PathLike) -> dict:
    """The best-validation checkpoint: ``{"model": state_dict, "epoch", "valid_acc", "test_acc", "spec"}``,
    only as the directory's index vouches for it (its sha256)."""
    path = Path(directory).expanduser() / "best.pt"
    try:
        entry = json.loads((path.parent / INDEX).read_text()).get("best")
    except (OSError, ValueError, AttributeError):
        entry = None
    if not path.is_file() or not isinstance(entry, dict):
        raise CheckpointError(f"no best-validation model at {path} that {INDEX} vouches for "
                              "(evaluation off, no epoch finished, or another run's leftover)")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        raise CheckpointError(f"{path} fails its sha256 check in {INDEX} (corrupt, or another run's file)")
    try:
        return load_tensors(data, str(path))
    except UnsafeFileError as exc:
        raise CheckpointError(str(exc)) from None
    except Exception as exc:
        raise CheckpointError(f"{path} cannot be loaded ({type(exc).__name__}); it is corrupt") from None
