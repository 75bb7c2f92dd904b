"""Atomic file writes, a tensor cache and a data-only loader: a killed process never leaves a
half-written file, and a cached tensor runs no code when loaded (`cherry.safe_load`)."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch


# The process's umask, read once: mkstemp creates files 0600, but an output is meant to be as readable
# as any file the user writes (records are shared with whoever draws the figures).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, with the mode a plain
    ``open`` would give. An OSError names ``path`` (not the temporary file, nor none at all, as a
    failed ``write`` on a full disk would)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if exc.filename is None or exc.filename == tmp:
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    write_bytes_atomic(path, (json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n").encode())


def read_json(path: str | os.PathLike, what: str, error: type[Exception] = ValueError) -> Any:
    """Parse the JSON file at ``path``; an unreadable or malformed file raises ``error`` with one line
    naming ``what`` (e.g. "run spec") and the file."""
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            raise error(f"{what} {str(path)!r} repeats the key(s) {', '.join(map(repr, repeated))}: "
                        "expected each key once")
        return dict(pairs)

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f, object_pairs_hook=no_duplicates)
    except OSError as exc:
        raise error(f"cannot read {what} {str(path)!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise error(f"{what} {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except RecursionError:
        raise error(f"{what} {str(path)!r} is nested too deeply to read: expected a shallower JSON document") from None
    except UnicodeDecodeError as exc:
        raise error(f"{what} {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _jsonable(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def cached_tensor(path: str | os.PathLike, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Load the tensor at ``path``, or compute and store it atomically. A corrupt file, or one that
    would run code on load (`load_tensors` refuses it unexecuted), is recomputed."""
    path = Path(path)
    if path.exists():
        try:
            from cherry.safe_load import load_tensors

            return load_tensors(path, f"cached tensor {str(path)!r}")
        except Exception:
            path.unlink(missing_ok=True)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        torch.save(value, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return value


def check_writable(path: str | os.PathLike) -> None:
    """Raise ValueError (one line naming ``path``) unless a file can be written there atomically:
    checked before a long run, so its result is not lost at the end (`cherry.outputs.check_file`)."""
    from cherry.outputs import check_file

    check_file(path)
