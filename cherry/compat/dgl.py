"""Make ``import dgl`` work when DGL's per-torch C++ libraries do not match the installed torch.

DGL 2.1.0 (the newest Linux wheel on PyPI) ships ``libgraphbolt_pytorch_<v>.so`` and
``libdgl_sparse_pytorch_<v>.so`` only for torch 2.0-2.2.1, and ``dgl.graphbolt`` / ``dgl.sparse`` load
them at module level, so ``import dgl`` fails on any newer torch. The classic API (DGLGraph, dgl.nn,
dgl.dataloading.NeighborSampler/DataLoader, to_block, METIS) needs only ``libdgl.so``.

`import_dgl()` installs a `sys.meta_path` finder for exactly those two module names. Their real source
runs unchanged; only the library-loading call (a frame of ``load_graphbolt`` / ``load_dgl_sparse``)
may fail, and that failure is swallowed and recorded in `skipped_libraries()`. Any other error, or one
raised outside those functions, propagates. Other modules, and ``torch.ops`` of other libraries, are
untouched: the finder declines every other name, and nothing is patched.

Invariant: after `import_dgl()` returns, ``dgl.graphbolt`` and ``dgl.sparse`` are importable Python
modules; their native-backed functions (GraphBolt sampling, ``dgl.sparse`` ops) raise at call time.
"""
from __future__ import annotations

import torch
import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import types
import warnings

# module name -> the function whose library load may fail without breaking the module
_GUARDED = {"dgl.graphbolt": "load_graphbolt", "dgl.sparse": "load_dgl_sparse"}
_lock = threading.Lock()
_skipped: dict[str, str] = {}


class _TolerantLoader(importlib.abc.Loader):
    """Runs the real loader; tolerates a failure raised inside the named library-loading function."""

    def __init__(self, inner: importlib.abc.Loader, fullname: str, loader_fn: str):
        self._inner = inner
        self._fullname = fullname
        self._loader_fn = loader_fn

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        try:
            self._inner.exec_module(module)
        except (OSError, ImportError, RuntimeError) as exc:
            # Swallow only when the innermost DGL frame is the library loader itself; anything else is
            # a genuine failure of the module and must surface.
            if not _raised_in(exc, self._loader_fn):
                raise
            _skipped[self._fullname] = f"{type(exc).__name__}: {exc}"


def _raised_in(exc: BaseException, function_name: str) -> bool:
    tb = exc.__traceback__
    names = []
    while tb is not None:
        names.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    return function_name in names


class _DglLibraryFinder(importlib.abc.MetaPathFinder):
    """Wraps the spec of ``dgl.graphbolt`` and ``dgl.sparse`` with `_TolerantLoader`; declines all else."""

    def find_spec(self, fullname, path, target=None):
        loader_fn = _GUARDED.get(fullname)
        if loader_fn is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TolerantLoader(spec.loader, fullname, loader_fn)
        return spec


def install_hook() -> None:
    """Puts the finder first on `sys.meta_path` (idempotent). Safe to call before or after torch."""
    with _lock:
        if not any(isinstance(f, _DglLibraryFinder) for f in sys.meta_path):
            sys.meta_path.insert(0, _DglLibraryFinder())


def skipped_libraries() -> dict[str, str]:
    """Module name -> why its native library was not loaded (empty when all loaded)."""
    return dict(_skipped)


def import_dgl() -> types.ModuleType:
    """Returns the ``dgl`` module, importing it through the tolerant hook.

    Raises ImportError with a one-line reason when DGL is not installed or fails for another reason.
    """
    install_hook()
    try:
        with warnings.catch_warnings():
            # torchdata<0.10 (which DGL 2.1 needs) warns about its own deprecation at every import.
            warnings.filterwarnings("ignore", message=r"(?s).*'datapipes', 'dataloader2' modules are deprecated")
            return importlib.import_module("dgl")
    except Exception as exc:  # any import-time failure becomes one ImportError with a short reason
        text = str(exc).strip().splitlines()
        reason = f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")
        raise ImportError(f"dgl cannot be imported: {reason}") from exc


def dgl_available() -> tuple[bool, str]:
    """(True, version and any skipped libraries) when DGL imports; (False, reason) otherwise. Never raises."""
    try:
        dgl = import_dgl()
    except ImportError as exc:
        return False, str(exc)
    skipped = skipped_libraries()
    note = f"dgl {getattr(dgl, '__version__', '?')}"
    if skipped:
        note += " (without native " + ", ".join(sorted(skipped)) + ": library not built for this torch)"
    return True, note


def dgl_graph(dgl, graph):
    """The DGL graph of a Cherry CSC `Graph` (edge ``indices[e] -> v`` for ``e`` in column ``v``)."""
    empty = torch.empty(0, dtype=torch.int64)
    return dgl.graph(("csc", (graph.indptr, graph.indices, empty)), num_nodes=graph.num_nodes)
