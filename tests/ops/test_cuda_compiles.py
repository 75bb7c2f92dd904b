"""Every csrc/cuda/*.cu compiles with nvcc against torch's headers (no GPU needed; skipped without nvcc).

This catches CUDA build breaks on CPU-only machines, before scarce GPU time is spent. The CPU wheel of
torch ships ATen's CUDA headers but not the CMake-generated ``c10/cuda/impl/cuda_cmake_macros.h``;
``C10_CUDA_NO_CMAKE_CONFIGURE_FILE`` skips that include (it only sets export macros). All files are
started at once and each test waits for its own, so the file costs about one compile of wall time
per core.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from torch.utils.cpp_extension import include_paths

from cherry.ops.extension import CSRC_DIR

CU_FILES = sorted((CSRC_DIR / "cuda").glob("*.cu"))
NVCC = shutil.which("nvcc")

pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


def nvcc_command(source: Path, output: Path) -> list[str]:
    includes = [flag for path in include_paths() for flag in ("-I", path)]
    return [
        NVCC, "-c", str(source), "-o", str(output), "-std=c++17", *includes,
        "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE", "--expt-relaxed-constexpr", "-Xcompiler", "-fPIC",
        "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
        "-diag-suppress=3306",  # torch's headers use C++20 bit-field initialisers; harmless here
    ]


@pytest.fixture(scope="module")
def compiles(tmp_path_factory):
    """Start nvcc on every .cu file at once; map each file to its running process."""
    out_dir = tmp_path_factory.mktemp("nvcc")
    procs = {}
    for source in CU_FILES:
        cmd = nvcc_command(source, out_dir / f"{source.stem}.o")
        procs[source.name] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True), out_dir / f"{source.stem}.o")
    yield procs
    for proc, _ in procs.values():
        if proc.poll() is None:
            proc.kill()


def test_there_are_cuda_sources():
    assert CU_FILES, f"no .cu files under {CSRC_DIR / 'cuda'}"


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.name for p in CU_FILES])
def test_cuda_source_compiles(compiles, name):
    proc, obj = compiles[name]
    output, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, f"nvcc failed on {name}:\n{output[-4000:]}"
    assert obj.stat().st_size > 0
