"""The one parsing layer for the integers that enter (node ids, labels, counts), from any reader.

Arrays (numpy, torch, lists), CSV blocks, npz members: `integer_array` turns them into int64 only
where that is exact. It refuses, naming the file (or array), the row, the column and the value as it
was read (the CSV line's own text where the value came from a file):

- a fractional number (``1.5``, ``-0.5``: a cast would truncate it to a neighbouring id or class);
- a number outside int64 (``1e20``; an uint64 id above 2**63 - 1), checked before any cast, which
  would wrap it into a negative number;
- text (a header row ``src,dst``), booleans, NaN or infinity (NaN is a missing label only where the
  caller says ``missing``: it becomes that value).

`integer_scalar` is the same rule for one count (``num_classes``): an int, not a float or a string.
Ranges (ids below the node count, labels below the class count) stay with `cherry.data.checks`.
"""
from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any, Optional

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max
_BOUND = 2.0 ** 63  # the first float above int64 (float(_INT64_MAX) rounds up to it)


def integer_array(values: Any, what: str, where: Optional[str] = None, *, missing: Optional[int] = None,
                  first_row: int = 0, source: Optional[Path] = None) -> np.ndarray:
    """``values`` as an int64 array of the same shape, exactly (see the module docstring). ``what``
    names the values ("node id", "label"), ``where`` their file or array; ``missing``: the value that
    NaN becomes (None: NaN is refused); ``first_row``: the file row of ``values[0]``; ``source``: a
    gzip CSV to quote the offending line from."""
    if hasattr(values, "detach"):  # a torch tensor
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    kind = arr.dtype.kind
    if kind in "i":
        return arr.astype(np.int64, copy=False)
    if kind == "u":
        return _unsigned(arr, what, where, first_row, source)
    if kind == "f":
        return _floating(arr, what, where, missing, first_row, source)
    if kind == "O":
        return _objects(arr, what, where, missing, first_row, source)
    if arr.size == 0:
        return arr.astype(np.int64)
    label = "booleans" if kind == "b" else f"values of dtype {arr.dtype}"
    raise ValueError(f"{_at(what, where)} holds {label}; expected integer {what}s")


def integer_column(values: Any, what: str, where: Optional[str] = None, **kwargs) -> np.ndarray:
    """`integer_array` of a one-column file or vector, flattened: a file of two columns (``1,2``) is
    refused, not read as a flat list."""
    arr = np.asarray(values.detach().cpu().numpy() if hasattr(values, "detach") else values)
    if arr.ndim > 2 or (arr.ndim == 2 and arr.shape[1] != 1):
        raise ValueError(f"{_at(what, where)} has rows of {arr.shape[-1]} columns (shape {tuple(arr.shape)}); "
                         f"expected one {what} per row")
    return integer_array(arr.reshape(-1), what, where, **kwargs)


def integer_scalar(value: Any, name: str, low: Optional[int] = None) -> int:
    """``value`` as an int: a Python or numpy integer (not a bool, a float or a string), ``>= low``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if low is not None and int(value) < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _unsigned(arr: np.ndarray, what, where, first_row, source) -> np.ndarray:
    big = arr > _INT64_MAX
    if big.any():
        _refuse(arr, big, what, where, first_row, source, "beyond int64")
    return arr.astype(np.int64)


def _floating(arr: np.ndarray, what, where, missing, first_row, source) -> np.ndarray:
    nan = np.isnan(arr)
    finite = np.isfinite(arr)
    for bad, why in ((nan if missing is None else np.zeros(arr.shape, bool), "missing"),
                     (~nan & ~finite, "not finite"), (finite & ~(np.abs(arr) < _BOUND), "beyond int64"),
                     (finite & (arr != np.floor(arr)), "not an integer")):
        if bad.any():
            _refuse(arr, bad, what, where, first_row, source, why)
    out = np.where(nan, 0.0, arr).astype(np.int64)
    if missing is not None:
        out[nan] = missing
    return out


def _objects(arr: np.ndarray, what, where, missing, first_row, source) -> np.ndarray:
    """Mixed or text values (pandas reads a column holding a header or a word as objects)."""
    def number(v):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            return None
        return v

    converted = np.array([number(v) for v in arr.reshape(-1)], dtype=object).reshape(arr.shape)
    text = np.vectorize(lambda v: v is None, otypes=[bool])(converted) if arr.size else np.zeros(arr.shape, bool)
    if text.any():
        _refuse(arr, text, what, where, first_row, source, "text")
    if all(isinstance(v, (int, np.integer)) for v in converted.reshape(-1)):
        ints = [int(v) for v in converted.reshape(-1)]
        big = np.array([not (-_INT64_MAX - 1 <= v <= _INT64_MAX) for v in ints], dtype=bool).reshape(arr.shape)
        if big.any():
            _refuse(arr, big, what, where, first_row, source, "beyond int64")
        return np.array(ints, dtype=np.int64).reshape(arr.shape)
    return _floating(converted.astype(np.float64), what, where, missing, first_row, source)


def _refuse(arr: np.ndarray, bad: np.ndarray, what, where, first_row, source, why) -> None:
    position = tuple(int(i) for i in np.argwhere(np.asarray(bad))[0])
    value = arr[position]
    shown = repr(value.item() if hasattr(value, "item") else value)
    row = first_row + position[0] if position else first_row
    column = f", column {position[1]}" if len(position) > 1 else ""
    line = _line_text(source, row)
    fields = line.split(",") if line is not None else []
    index = position[1] if len(position) > 1 else 0
    if index < len(fields):  # the value as written in the file, not as a float parsed it
        shown = _as_written(fields[index].strip())
    quoted = f"; the line reads {line!r}" if line is not None else ""
    raise ValueError(f"{_at(what, where)} holds {shown} at row {row}{column}; expected integer {what}s "
                     f"({why}{quoted})")


def _as_written(text: str) -> str:
    try:
        float(text)
        return text
    except ValueError:
        return repr(text)


def _line_text(source: Optional[Path], row: int) -> Optional[str]:
    """Line ``row`` of the gzip CSV ``source`` as written (only on the error path), or None."""
    if source is None or not str(source).endswith(".gz"):
        return None
    try:
        with gzip.open(source, "rt", errors="replace") as f:
            for i, line in enumerate(f):
                if i == row:
                    return line.rstrip("\n")[:200]
    except (OSError, EOFError):
        return None
    return None


def _at(what: str, where: Optional[str]) -> str:
    return f"{where}" if where else f"the {what}s"
