"""Pickled files loaded as data: no file this project reads runs code when it is loaded.

Unpickling calls whatever callables the file names, so a checkpoint or cache from someone else (its
checksum written by the same hand) could run any Python. Every pickled file is therefore read by one
of two data-only loaders:

- `load_tensors`: ``torch.load(..., weights_only=True)`` (torch's own allow-list: tensors, numbers,
  strings, lists, dicts, tuples), for the files Cherry writes (checkpoints, cached tensors);
- `load_arrays`: a restricted unpickler that resolves only the globals of tensors and numeric numpy
  arrays, for third-party files that hold numpy arrays in pickle protocol 4, which torch's
  ``weights_only`` reader cannot parse (OGB's ``processed/data_processed`` and ``split_dict.pt``,
  which OGB's loader reads through `data_only_torch`).

Either refuses a file naming any other object with `UnsafeFileError`: one line naming the file and
the object, and nothing executed. A test walks the sources for any other way of unpickling.
"""
from __future__ import annotations

import io
import os
import pickle
import re
import types
from typing import Any, Optional

import torch


class UnsafeFileError(ValueError):
    """A file that loading would run code for (a pickle of more than data): refused, unexecuted."""


_REFUSED = re.compile(r"((?:Unsupported (?:global|operand)|Trying to (?:load|call))[^\n]*?)(?:\. |\.?\n|\.?$)")
_MARK = "Weights only load failed"  # torch's refusal begins with it; so does the restricted unpickler's


def unsafe_load_reason(exc: BaseException) -> Optional[str]:
    """The object a data-only load refused (``"Unsupported global: GLOBAL posix.system ..."``), or
    None when ``exc`` is not such a refusal."""
    text = str(exc)
    if not isinstance(exc, pickle.UnpicklingError) or _MARK.lower() not in text.lower():
        return None
    found = _REFUSED.search(text)
    return found.group(1).strip() if found else "not a tensor, numpy array or plain value"


def refusal(what: str, reason: str, hint: str = "a file from an untrusted source?") -> str:
    """The one line that refuses a file loading would run code for."""
    return (f"{what} is refused: it holds a Python object that loading would execute ({reason}); expected "
            f"tensors, numpy arrays and plain values only ({hint})")


def load_tensors(source: str | os.PathLike | bytes, what: str) -> Any:
    """Load a ``torch.save`` file (a path, or its bytes) with ``weights_only=True``. A file naming any
    object outside torch's allow-list raises `UnsafeFileError` (one line naming ``what``); any other
    failure propagates, for the caller to name as corrupt."""
    stream = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else source
    try:
        return torch.load(stream, weights_only=True)
    except Exception as exc:
        reason = unsafe_load_reason(exc)
        if reason is None:
            raise
        raise UnsafeFileError(refusal(what, reason)) from None


def _allowed_globals() -> dict[tuple[str, str], Any]:
    """What a pickled tensor or numeric numpy array names, under numpy 2's and numpy 1's module paths.
    None of these runs code of the file's choosing: an object array's items, or anything else, would
    need a global outside this table."""
    import codecs
    import collections

    import numpy as np

    core = getattr(np, "_core", None) or np.core
    allowed: dict[tuple[str, str], Any] = {}
    for package in ("numpy._core", "numpy.core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = core.multiarray._reconstruct
        allowed[(f"{package}.multiarray", "scalar")] = core.multiarray.scalar
        allowed[(f"{package}.numeric", "_frombuffer")] = core.numeric._frombuffer  # protocol 5
    allowed[("numpy", "ndarray")], allowed[("numpy", "dtype")] = np.ndarray, np.dtype
    for code in "?bBhHiIlLqQefdgFDG":
        cls = type(np.dtype(code))
        allowed[(cls.__module__, cls.__name__)] = cls
    allowed[("collections", "OrderedDict")] = collections.OrderedDict
    allowed[("_codecs", "encode")] = codecs.encode  # how protocol 2 writes bytes (torch allows it too)
    allowed[("torch._utils", "_rebuild_tensor_v2")] = torch._utils._rebuild_tensor_v2
    return allowed


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """An unpickler whose every global lookup goes through `_allowed_globals` (pickle resolves every
    class and callable, for every protocol, through ``find_class``)."""

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed_globals().get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{_MARK}: Unsupported global: GLOBAL {module}.{name}")
        return found


_ARRAYS_ONLY = types.ModuleType("cherry_arrays_only_pickle")
_ARRAYS_ONLY.Unpickler = _ArraysOnlyUnpickler
_ARRAYS_ONLY.load = lambda f, **kwargs: _ArraysOnlyUnpickler(f, **kwargs).load()


def load_arrays(source: str | os.PathLike | io.IOBase, what: Optional[str] = None, **kwargs) -> Any:
    """Load a ``torch.save`` file of tensors, numeric numpy arrays and plain values, in any pickle
    protocol, resolving no other global: a file naming one raises `UnsafeFileError` (or, with
    ``what`` None, the `pickle.UnpicklingError` that `unsafe_load_reason` reads)."""
    kwargs.pop("weights_only", None)
    kwargs.pop("pickle_module", None)
    try:
        return torch.load(source, weights_only=False, pickle_module=_ARRAYS_ONLY, **kwargs)
    except pickle.UnpicklingError as exc:
        reason = unsafe_load_reason(exc)
        if reason is None or what is None:
            raise
        raise UnsafeFileError(refusal(what, reason)) from None


def data_only_torch() -> types.SimpleNamespace:
    """A stand-in for the ``torch`` module of a third-party reader (OGB's dataset module): ``load`` is
    `load_arrays`, everything else is torch's."""
    class _Torch(types.SimpleNamespace):
        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

    return _Torch(load=load_arrays)
