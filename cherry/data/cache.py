"""Cherry's converted dataset cache: one ``.npy`` file per array plus a checksummed ``manifest.json``.

Invariants: a cache directory exists only complete (it is written in a temporary sibling directory and
renamed into place, so an interruption leaves no half-written cache; the sibling's name carries the
writer's host and pid, and the next writer removes siblings whose writer died, e.g. by kill -9);
``manifest.json`` records the sha256, size, shape and dtype of every file; `load_cache` refuses a file
whose size or checksum differs from the manifest, naming the file. Large arrays are memory-mapped
copy-on-write (``mmap_mode='c'``): pages load lazily and an accidental in-place write cannot corrupt
the cache (a read-only mapping would turn such a write into a segfault once wrapped by
``torch.from_numpy``).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import uuid
from pathlib import Path

import numpy as np

ARRAY_NAMES = ("indptr", "indices", "features", "labels", "train_idx", "valid_idx", "test_idx")
MANIFEST = "manifest.json"
FORMAT = "cherry-dataset-cache"
FORMAT_VERSION = 1
MMAP_THRESHOLD_BYTES = 256 << 20
_HASH_BLOCK_BYTES = 8 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK_BYTES):
            h.update(block)
    return h.hexdigest()


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def temp_sibling(target: Path, kind: str = "tmp") -> Path:
    """A fresh hidden sibling of ``target`` named after this host and process (``kind``: tmp or old)."""
    if kind not in ("tmp", "old"):
        raise ValueError(f"kind must be 'tmp' or 'old', got {kind!r}")
    target = Path(target)
    return target.with_name(f".{target.name}.{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _writer_alive(host: str | None, pid: int | None) -> bool:
    if host is None or pid is None:
        return False  # a name from before writers were recorded: nobody owns it any more
    if host != socket.gethostname():
        return True  # another machine's writer (shared file system): not ours to judge
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete the temporary siblings of ``target`` left by dead writers (see `temp_sibling`)."""
    target = Path(target)
    pattern = re.compile(rf"^\.{re.escape(target.name)}\.(?:tmp|old)-"
                         r"(?:(?P<host>.+)-(?P<pid>\d+)-)?[0-9a-f]{8}$")
    removed = []
    for sibling in target.parent.glob(f".{target.name}.*"):
        match = pattern.match(sibling.name)
        if match is None:
            continue
        pid = int(match["pid"]) if match["pid"] else None
        if not _writer_alive(match["host"], pid):
            if sibling.is_dir():
                shutil.rmtree(sibling, ignore_errors=True)
            else:
                sibling.unlink(missing_ok=True)
            removed.append(sibling)
    return removed


def write_cache(cache_dir: Path, arrays: dict[str, np.ndarray], info: dict) -> Path:
    """Write ``arrays`` (exactly `ARRAY_NAMES`) and a manifest with ``info`` merged in; atomic.

    An existing ``cache_dir`` is replaced only after the new one is complete. Returns ``cache_dir``.
    """
    if set(arrays) != set(ARRAY_NAMES):
        raise ValueError(f"cache arrays must be exactly {ARRAY_NAMES}, got {sorted(arrays)}")
    cache_dir = Path(cache_dir)
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(cache_dir)
    tmp = temp_sibling(cache_dir)
    tmp.mkdir()
    try:
        files = {}
        for key in ARRAY_NAMES:
            arr = np.ascontiguousarray(arrays[key])
            path = tmp / f"{key}.npy"
            np.save(path, arr, allow_pickle=False)
            files[key] = {"file": path.name, "sha256": sha256_file(path), "bytes": path.stat().st_size,
                          "shape": list(arr.shape), "dtype": str(arr.dtype)}
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **info, "files": files}
        _write_json_atomic(tmp / MANIFEST, manifest)
        swap_into_place(tmp, cache_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return cache_dir


def swap_into_place(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``, replacing an existing ``target`` (moved aside, then deleted).

    Two writers of the same target may race (a resumed workflow beside an orphaned job): each step
    tolerates the other having moved ``target`` meanwhile, and the last complete copy wins."""
    old = None
    if target.exists():
        old = temp_sibling(target, "old")
        try:
            os.rename(target, old)
        except FileNotFoundError:
            old = None
    try:
        os.rename(new, target)
    except OSError:  # another writer placed its complete copy after our move: replace it once more
        if not target.exists():
            raise
        again = temp_sibling(target, "old")
        os.rename(target, again)
        os.rename(new, target)
        shutil.rmtree(again, ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_manifest(cache_dir: Path) -> dict:
    """The parsed manifest of ``cache_dir``; FileNotFoundError / ValueError if missing or malformed."""
    path = Path(cache_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no dataset cache manifest at {path}")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"corrupt cache manifest {path}: {exc}") from None
    if manifest.get("format") != FORMAT or manifest.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{path} is not a {FORMAT} v{FORMAT_VERSION} manifest")
    if set(manifest.get("files", {})) != set(ARRAY_NAMES):
        raise ValueError(f"{path} must list files {ARRAY_NAMES}")
    return manifest


def verify_cache(cache_dir: Path, manifest: dict, checksums: bool = True) -> None:
    """Check each file's presence and size (and sha256 if ``checksums``) against the manifest."""
    for key in ARRAY_NAMES:
        entry = manifest["files"][key]
        path = Path(cache_dir) / entry["file"]
        if not path.exists():
            raise FileNotFoundError(f"dataset cache file {path} is missing; re-run with --force")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise ValueError(
                f"dataset cache file {path} has {size} bytes, manifest says {entry['bytes']} "
                "(truncated or replaced); re-run `cherry data prepare` with --force"
            )
        if checksums and sha256_file(path) != entry["sha256"]:
            raise ValueError(
                f"dataset cache file {path} fails its sha256 check (corrupt); "
                "re-run `cherry data prepare` with --force"
            )


def load_cache(cache_dir: Path, verify: bool = True,
               mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> tuple[dict[str, np.ndarray], dict]:
    """Verified arrays of a cache and its manifest; arrays above the threshold are memory-mapped."""
    cache_dir = Path(cache_dir)
    manifest = read_manifest(cache_dir)
    verify_cache(cache_dir, manifest, checksums=verify)
    arrays = {}
    for key in ARRAY_NAMES:
        entry = manifest["files"][key]
        path = cache_dir / entry["file"]
        mode = "c" if entry["bytes"] >= mmap_threshold_bytes else None
        arr = np.load(path, mmap_mode=mode, allow_pickle=False)
        if list(arr.shape) != entry["shape"] or str(arr.dtype) != entry["dtype"]:
            raise ValueError(f"dataset cache file {path} holds {arr.dtype}{list(arr.shape)}, "
                             f"manifest says {entry['dtype']}{entry['shape']}")
        arrays[key] = arr
    return arrays, manifest
