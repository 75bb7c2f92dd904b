"""The one place the native extension (``torch.ops.cherry.*``) is built and loaded.

Sources are discovered by convention: ``csrc/<op>.cpp`` (schema, ``TORCH_LIBRARY_FRAGMENT``),
``csrc/cpu/<op>.cpp`` (CPU kernels, ``TORCH_LIBRARY_IMPL(cherry, CPU, ...)``) and, only when CUDA is
available at run time, ``csrc/cuda/<op>.cu``. The build happens at first use with
``torch.utils.cpp_extension.load`` (ninja, incremental, cached under ``~/.cache/cherry`` or
``$CHERRY_EXT_DIR``), never in pip's isolated build environment.

Contract: `extension_available()` never raises; if the build fails, or ``CHERRY_NO_EXT=1`` is set,
it returns False and every op in `cherry.ops` uses its pure-PyTorch reference instead. The reason is
kept in `extension_status()` so records can say which implementation ran.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import torch

CSRC_DIR = Path(__file__).resolve().parents[2] / "csrc"
_lock = threading.Lock()
_state: dict = {"loaded": None, "reason": "not loaded yet"}


def _build_dir() -> Path:
    root = os.environ.get("CHERRY_EXT_DIR") or os.path.join(Path.home(), ".cache", "cherry", "ext")
    tag = f"torch{torch.__version__.replace('+', '_')}_{'cuda' if _use_cuda() else 'cpu'}"
    path = Path(root) / tag
    path.mkdir(parents=True, exist_ok=True)
    return path


def _use_cuda() -> bool:
    return torch.cuda.is_available() and torch.version.cuda is not None


def extension_sources(cuda: bool | None = None) -> list[Path]:
    """All native sources the extension is built from, in a stable order."""
    cuda = _use_cuda() if cuda is None else cuda
    sources = sorted(CSRC_DIR.glob("*.cpp")) + sorted((CSRC_DIR / "cpu").glob("*.cpp"))
    if cuda:
        sources += sorted((CSRC_DIR / "cuda").glob("*.cu"))
    return sources


def _shim_sources(sources: list[Path], build_dir: Path) -> list[Path]:
    """One uniquely named shim per source (``cpu_<op>.cpp`` holding ``#include "<abs path>"``).

    torch's ninja build names each object after its file's base name, so ``csrc/<op>.cpp`` and
    ``csrc/cpu/<op>.cpp`` would collide. The compiler's depfile still tracks the real source, so an
    edit there rebuilds; a shim is rewritten only when its text changes, keeping builds incremental.
    """
    shim_dir = build_dir / "shims"
    shim_dir.mkdir(parents=True, exist_ok=True)
    shims = []
    for src in sources:
        shim = shim_dir / "_".join(src.relative_to(CSRC_DIR).parts)
        text = f'#include "{src}"\n'
        if not shim.exists() or shim.read_text() != text:
            tmp = shim.with_name(shim.name + f".tmp{os.getpid()}")
            tmp.write_text(text)
            os.replace(tmp, shim)
        shims.append(shim)
    return shims


def _load() -> None:
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        _state.update(loaded=False, reason="disabled by CHERRY_NO_EXT")
        return
    sources = extension_sources()
    if not sources:
        _state.update(loaded=False, reason=f"no native sources under {CSRC_DIR}")
        return
    try:
        from torch.utils.cpp_extension import load

        cflags = ["-O3", "-fopenmp", "-std=c++17"]
        load(
            name="cherry_ops",
            sources=[str(s) for s in _shim_sources(sources, _build_dir())],
            extra_cflags=cflags,
            extra_ldflags=["-fopenmp"],
            extra_cuda_cflags=["-O3", "--expt-relaxed-constexpr"],
            build_directory=str(_build_dir()),
            is_python_module=False,
            verbose=os.environ.get("CHERRY_EXT_VERBOSE", "") == "1",
        )
        _state.update(loaded=True, reason="native extension loaded" + (" (with CUDA)" if _use_cuda() else ""))
    except Exception as exc:  # any build or load failure means: use the reference ops
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        _state.update(loaded=False, reason=f"build failed: {first_line}")


def extension_available() -> bool:
    """True when ``torch.ops.cherry`` is usable; builds it on first call (thread-safe)."""
    with _lock:
        if _state["loaded"] is None:
            _load()
        return bool(_state["loaded"])


def extension_status() -> str:
    """A one-line description of which implementation the ops use and why."""
    extension_available()
    return _state["reason"]
