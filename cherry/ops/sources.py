"""Where the native sources live and which files make up the extension (no torch, no cherry imports).

The convention: ``csrc/<op>.cpp`` holds an op's schema (``TORCH_LIBRARY_FRAGMENT``), ``csrc/cpu/<op>.cpp``
its CPU kernels and ``csrc/cuda/<op>.cu`` its CUDA kernels; ``csrc/python/module.cpp`` is the
``cherry._C`` module init of the install-time build. `setup.py` loads this file by path (before
``cherry`` is importable) and `cherry.ops.extension` imports it, so both builds compile the same files.
"""
from __future__ import annotations

from pathlib import Path

REPO_DIR = Path(__file__).resolve().parents[2]
CSRC_DIR = REPO_DIR / "csrc"
MODULE_SOURCE = CSRC_DIR / "python" / "module.cpp"
CXX_FLAGS = ["-O3", "-fopenmp", "-std=c++17"]
LD_FLAGS = ["-fopenmp"]
NVCC_FLAGS = ["-O3", "--expt-relaxed-constexpr"]


def op_sources(cuda: bool, csrc_dir: Path = CSRC_DIR) -> list[Path]:
    """The op sources in a stable order: schemas, CPU kernels, then (if ``cuda``) CUDA kernels."""
    sources = sorted(csrc_dir.glob("*.cpp")) + sorted((csrc_dir / "cpu").glob("*.cpp"))
    if cuda:
        sources += sorted((csrc_dir / "cuda").glob("*.cu"))
    return sources


def native_inputs(csrc_dir: Path = CSRC_DIR) -> list[Path]:
    """Every file a build depends on (sources and headers): what a cache's freshness is judged by."""
    return sorted(p for p in csrc_dir.rglob("*") if p.suffix in (".cpp", ".cu", ".h", ".cuh"))
