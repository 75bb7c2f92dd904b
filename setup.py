"""Install-time build of the native ops as the extension module ``cherry._C``.

`pyproject.toml` holds the metadata; this file only adds the extension. It needs the installed torch,
so install with ``pip install --no-build-isolation -e .`` (what ``make install`` runs): pip's isolated
build environment has no torch, and then (or with ``CHERRY_NO_EXT=1``) the package installs without the
extension and every op runs its pure-PyTorch reference. CUDA kernels are compiled when torch is a CUDA
build and nvcc is found (``CUDA_HOME``); ``MAX_JOBS`` bounds the parallel compiles.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent


def _sources_module():
    spec = importlib.util.spec_from_file_location("_cherry_sources", HERE / "cherry" / "ops" / "sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extensions() -> tuple[list, dict]:
    if os.environ.get("CHERRY_NO_EXT", "") not in ("", "0"):
        print("cherry: CHERRY_NO_EXT is set: installing without the native ops (reference ops only)", file=sys.stderr)
        return [], {}
    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
    except ImportError:
        print("cherry: torch is not importable in this build environment (use pip install --no-build-isolation): "
              "installing without the native ops (reference ops only)", file=sys.stderr)
        return [], {}
    src = _sources_module()
    cuda = torch.version.cuda is not None and CUDA_HOME is not None
    # relative paths: setuptools names each object after its path, so csrc/<op>.cpp and csrc/cpu/<op>.cpp
    # become distinct objects (the JIT build needs shims for the same reason)
    sources = [str(p.relative_to(HERE)) for p in [*src.op_sources(cuda), src.MODULE_SOURCE]]
    kind, flags = (CUDAExtension, {"cxx": src.CXX_FLAGS, "nvcc": src.NVCC_FLAGS}) if cuda else (CppExtension, {"cxx": src.CXX_FLAGS})
    print(f"cherry: building the native ops ({'CPU and CUDA' if cuda else 'CPU'} kernels, {len(sources)} files)",
          file=sys.stderr)
    ext = kind("cherry._C", sources, extra_compile_args=flags, extra_link_args=src.LD_FLAGS)
    return [ext], {"build_ext": BuildExtension}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
