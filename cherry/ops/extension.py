"""The one place the native extension (``torch.ops.cherry.*``) is loaded.

Two builds, one set of sources (`cherry.ops.sources`):

- **installed** (the normal path): ``pip install --no-build-isolation -e .`` (``make install``) compiles
  the ops into the module ``cherry._C`` (see ``setup.py``). Loading it compiles nothing.
- **JIT** (opt-in, for developing the kernels): with ``CHERRY_JIT=1`` the ops are built from this
  source tree at first use by ``torch.utils.cpp_extension.load`` (ninja, incremental) instead, into
  ``$CHERRY_EXT_DIR`` (default ``~/.cache/cherry/ext``) under a directory keyed by the torch build and
  by this source tree's path, so two checkouts never rebuild each other. A build says on stderr that it
  is building and how long it took; a lock left by a killed build is removed with one line.

Contract: `extension_available()` never raises and importing this module loads nothing. If neither
build loads, or ``CHERRY_NO_EXT=1`` is set, it returns False and every op in `cherry.ops` uses its
pure-PyTorch reference. `extension_status()` says which path loaded (or why none did), so records can
say which implementation ran.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import sys
import threading
import time
from pathlib import Path

import torch

from cherry.ops import sources as _sources

CSRC_DIR = _sources.CSRC_DIR
_lock = threading.Lock()
_state: dict = {"loaded": None, "reason": "not loaded yet"}
_LIB_NAME = "cherry_ops"
_HINT = ("run `make install` (pip install --no-build-isolation -e .) to build it, or set CHERRY_JIT=1 to "
         "build it from this tree at first use")


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _use_cuda() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def extension_sources(cuda: bool | None = None) -> list[Path]:
    """All op sources the JIT build compiles, in a stable order."""
    return _sources.op_sources(_use_cuda() if cuda is None else cuda)


def jit_build_dir(cuda: bool | None = None, csrc_dir: Path = CSRC_DIR) -> Path:
    """The JIT build's directory: one per torch build, device kind and source tree (not created)."""
    cuda = _use_cuda() if cuda is None else cuda
    root = os.environ.get("CHERRY_EXT_DIR") or os.path.join(Path.home(), ".cache", "cherry", "ext")
    tree = hashlib.sha1(str(csrc_dir.resolve()).encode()).hexdigest()[:10]
    tag = f"torch{torch.__version__.replace('+', '_')}_{'cuda' if cuda else 'cpu'}_src{tree}"
    return Path(root) / tag


def _shim_sources(sources: list[Path], build_dir: Path, csrc_dir: Path) -> list[Path]:
    """One uniquely named shim per source (``cpu_<op>.cpp`` holding ``#include "<abs path>"``).

    torch's ninja build names each object after its file's base name, so ``csrc/<op>.cpp`` and
    ``csrc/cpu/<op>.cpp`` would collide. The compiler's depfile still tracks the real source, so an
    edit there rebuilds; a shim is rewritten only when its text changes, keeping builds incremental.
    """
    shim_dir = build_dir / "shims"
    shim_dir.mkdir(parents=True, exist_ok=True)
    shims = []
    for src in sources:
        shim = shim_dir / "_".join(src.relative_to(csrc_dir).parts)
        text = f'#include "{src}"\n'
        if not shim.exists() or shim.read_text() != text:
            tmp = shim.with_name(shim.name + f".tmp{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, shim)
        shims.append(shim)
    return shims


def _say(line: str) -> None:
    print(f"cherry: {line}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def build_lock(build_dir: Path):
    """Hold the build directory for this process; clear what a killed build left behind.

    Every JIT build of cherry takes ``<build_dir>/cherry.lock`` with ``flock``, which the kernel
    releases when its owner dies, however it dies. torch's own lock (``<build_dir>/lock``, a file that
    torch waits on for as long as it exists) is therefore stale whenever it exists while we hold ours:
    its owner was killed mid-build. It is removed with one line instead of hanging every later command.
    """
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir / "cherry.lock", "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            _say(f"waiting for the native-ops build of {owner} in {build_dir}")
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        torch_lock = build_dir / "lock"
        if torch_lock.exists():
            torch_lock.unlink(missing_ok=True)
            _say(f"removed a stale build lock {torch_lock} (a build there was killed)")
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()


def _stale(library: Path, inputs: list[Path]) -> bool:
    if not library.exists():
        return True
    built_s = library.stat().st_mtime
    return any(p.stat().st_mtime > built_s for p in inputs)


def jit_build(sources: list[Path], build_dir: Path, csrc_dir: Path = CSRC_DIR, name: str = _LIB_NAME,
              cuda: bool = False) -> None:
    """Build (when a source is newer than the library) and load ``sources`` as ``name`` in ``build_dir``.

    Raises whatever the build raises; says on stderr when it compiles and how long that took."""
    from torch.utils.cpp_extension import load

    with build_lock(build_dir):
        shims = _shim_sources(sources, build_dir, csrc_dir)
        compiling = _stale(build_dir / f"{name}.so", _sources.native_inputs(csrc_dir) + shims)
        if compiling:
            _say(f"building the native ops from {csrc_dir} in {build_dir} (CHERRY_JIT=1; the first build "
                 "takes minutes)")
        start_s = time.monotonic()
        load(name=name, sources=[str(s) for s in shims], extra_cflags=_sources.CXX_FLAGS,
             extra_ldflags=_sources.LD_FLAGS, extra_cuda_cflags=_sources.NVCC_FLAGS,
             build_directory=str(build_dir), is_python_module=False, with_cuda=cuda,
             verbose=_flag("CHERRY_EXT_VERBOSE"))
        if compiling:
            _say(f"building the native ops took {time.monotonic() - start_s:.0f} s")


def _has_cuda_kernels() -> bool:
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key("cherry::csr_aggregate_forward", "CUDA")
    except (AttributeError, RuntimeError):
        return False


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _load() -> None:
    if _flag("CHERRY_NO_EXT"):
        _state.update(loaded=False, reason="disabled by CHERRY_NO_EXT")
        return
    if _flag("CHERRY_JIT"):
        path = "JIT build"
        try:
            jit_build(extension_sources(), jit_build_dir(), cuda=_use_cuda())
        except Exception as exc:  # any build or load failure means: use the reference ops
            _state.update(loaded=False, reason=f"JIT build failed: {_first_line(exc)}")
            return
    else:
        path = "installed build"
        try:
            import cherry._C  # noqa: F401  (loading the library registers torch.ops.cherry.*)
        except ModuleNotFoundError as exc:
            if exc.name == "cherry._C":
                _state.update(loaded=False, reason=f"native extension not built: {_HINT}; using the reference ops")
                return
            _state.update(loaded=False, reason=f"installed build failed to load ({_first_line(exc)}): {_HINT}")
            return
        except Exception as exc:  # e.g. built against another torch: undefined symbols
            _state.update(loaded=False, reason=f"installed build failed to load ({_first_line(exc)}): {_HINT}")
            return
    try:
        from cherry.ops import registrations

        registrations.register()
    except Exception as exc:  # a torch without these registration APIs: the ops still run eagerly
        _state.update(loaded=False, reason=f"registering the native ops' autograd failed: {_first_line(exc)}")
        return
    cuda = " with CUDA" if _has_cuda_kernels() else ", CPU kernels only"
    _state.update(loaded=True, reason=f"native extension loaded ({path}{cuda})")


def extension_available() -> bool:
    """True when ``torch.ops.cherry`` is usable; loads it on first call (thread-safe, never raises)."""
    with _lock:
        if _state["loaded"] is None:
            _load()
        return bool(_state["loaded"])


def extension_status() -> str:
    """A one-line description of which implementation the ops use and why (which build loaded)."""
    extension_available()
    return _state["reason"]
