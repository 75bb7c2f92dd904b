"""Cherry's converted dataset cache: one ``.npy`` file per array plus a checksummed ``manifest.json``.

Invariants: a cache directory exists only complete (it is written in a temporary sibling directory and
renamed into place, so an interruption leaves no half-written cache); ``manifest.json`` records the
sha256, size, shape and dtype of every file; `load_cache` refuses a file whose size or checksum differs
from the manifest, naming the file.

What is trusted: the manifest, and only a well-formed one. It is written last, inside the temporary
directory, so a cache with a well-formed manifest was complete when written; every array is then
checked against it (size always, sha256 unless the caller opts out, shape and dtype at load).
`read_manifest` refuses a missing, truncated or malformed manifest (wrong types, unknown file names,
a file entry pointing outside the cache) with a one-line error: the arrays cannot be checked without
it, so they are not used (`cherry.data.datasets` rebuilds on ``data prepare`` and refuses at load).
A manifest of another format version raises `StaleCacheError`: a rebuild, not a fault.

Temporary and replaced directories are named ``.<name>.tmp-<host>-<pid>-<hex>`` and
``.<name>.old-<host>-<pid>-<hex>``; `remove_stale_temps` deletes those whose process no longer runs on
this host (left by a killed run), never one a running process still writes. Large arrays are memory-mapped copy-on-write (``mmap_mode='c'``):
pages load lazily and an accidental in-place write cannot corrupt the cache (a read-only mapping would
turn such a write into a segfault once wrapped by ``torch.from_numpy``).
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


class StaleCacheError(ValueError):
    """The manifest is well-formed but of another cache format version: rebuild the cache."""


def temp_sibling(target: Path, kind: str = "tmp") -> Path:
    """A fresh sibling path of ``target`` named after this host and process (see module docstring)."""
    return target.with_name(f".{target.name}.{kind}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(target: Path) -> list[Path]:
    """Delete temporary / replaced siblings of ``target`` whose writer died on this host; return them."""
    target = Path(target)
    # Names from before writers were recorded (``.<name>.tmp-<hex>``) belong to no live writer of this
    # code, which always names itself: they are removed too.
    pattern = re.compile(rf"\.{re.escape(target.name)}\.(tmp|old)-(?:(?P<host>.+)-(?P<pid>\d+)-)?[0-9a-f]{{8}}$")
    host, removed = socket.gethostname(), []
    if not target.parent.is_dir():
        return removed
    for path in target.parent.iterdir():
        match = pattern.match(path.name)
        legacy = match is not None and match["pid"] is None
        if match and (legacy or (match["host"] == host and not _process_alive(int(match["pid"])))):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_HASH_BLOCK_BYTES):
            h.update(block)
    return h.hexdigest()


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
        for key in ARRAY_NAMES:
            np.save(tmp / f"{key}.npy", np.ascontiguousarray(arrays[key]), allow_pickle=False)
        seal_cache(tmp, cache_dir, info)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return cache_dir


def _npy_header(path: Path) -> tuple[list, str]:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return list(shape), str(dtype)


def seal_cache(build_dir: Path, cache_dir: Path, info: dict) -> Path:
    """Make ``build_dir`` (holding exactly the ``<name>.npy`` files of `ARRAY_NAMES`, written by any
    means, e.g. streamed by `cherry.data.bounded`) the cache ``cache_dir``: write its manifest (sha256,
    size, shape and dtype of every file, ``info`` merged in), then rename it into place (atomic)."""
    build_dir = Path(build_dir)
    present = sorted(p.stem for p in build_dir.glob("*.npy"))
    if present != sorted(ARRAY_NAMES):
        raise ValueError(f"cache arrays must be exactly {ARRAY_NAMES}, got {present}")
    files = {}
    for key in ARRAY_NAMES:
        path = build_dir / f"{key}.npy"
        shape, dtype = _npy_header(path)
        files[key] = {"file": path.name, "sha256": sha256_file(path), "bytes": path.stat().st_size,
                      "shape": shape, "dtype": dtype}
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **info, "files": files}
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")  # private dir
    swap_into_place(build_dir, Path(cache_dir))
    return Path(cache_dir)


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


_SUMMARY_TYPES = {"name": str, "num_nodes": int, "num_edges": int, "source_edges": int, "feature_dim": int,
                  "num_classes": int, "split_sizes": dict, "degree": dict, "metadata": dict}
_KIND_NAMES = {str: "a string", int: "an integer", dict: "a JSON object"}
_ENTRY_TYPES = {"file": str, "sha256": str, "bytes": int, "shape": list, "dtype": str}


def read_manifest(cache_dir: Path) -> dict:
    """The parsed, well-formed manifest of ``cache_dir``.

    FileNotFoundError if it is missing; ValueError (one line, naming the file and the fault) if it is
    truncated or malformed; `StaleCacheError` if it is of another format version.
    """
    path = Path(cache_dir) / MANIFEST
    if not path.exists():
        raise FileNotFoundError(f"no dataset cache manifest at {path}")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"corrupt cache manifest {path}: not valid JSON ({exc})") from None

    def bad(what: str) -> ValueError:
        return ValueError(f"corrupt cache manifest {path}: {what}")

    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise bad(f"expected a {FORMAT} manifest (a JSON object with format {FORMAT!r})")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise StaleCacheError(f"{path} is a {FORMAT} v{manifest.get('format_version')} manifest; "
                              f"this Cherry reads v{FORMAT_VERSION}")
    for key, kind in _SUMMARY_TYPES.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise bad(f"field {key!r} must be {_KIND_NAMES[kind]}, got {manifest.get(key)!r}")
    files = manifest.get("files")
    if not isinstance(files, dict) or set(files) != set(ARRAY_NAMES):
        raise bad(f"'files' must list exactly {', '.join(ARRAY_NAMES)}")
    for key in ARRAY_NAMES:
        entry = files[key]
        if not isinstance(entry, dict) or any(not isinstance(entry.get(f), t) for f, t in _ENTRY_TYPES.items()):
            raise bad(f"entry {key!r} must hold {', '.join(_ENTRY_TYPES)}, got {entry!r}")
        if entry["file"] != f"{key}.npy":  # never follow a manifest outside its directory
            raise bad(f"entry {key!r} names file {entry['file']!r}; expected {key}.npy")
    return manifest


def verify_cache(cache_dir: Path, manifest: dict, checksums: bool = True) -> None:
    """Check each file's presence and size (and sha256 if ``checksums``) against the manifest."""
    for key in ARRAY_NAMES:
        entry = manifest["files"][key]
        path = Path(cache_dir) / entry["file"]
        if not path.exists():
            raise FileNotFoundError(f"dataset cache file {path} is missing; "
                                    "re-run `cherry data prepare` with --force")
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
