"""Byte sizes as people write them ("1GiB", "512 MB", 4096) and back.

Decimal units (KB, MB, GB, TB) are powers of 1000; binary units (KiB, MiB, GiB, TiB) powers of 1024,
as in IEC 80000-13. Units are matched case-insensitively; they are unambiguous either way.
"""
from __future__ import annotations

import math
import re

_UNITS_BYTES = {
    "": 1, "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_PATTERN = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$")
_EXPECTED = "a non-negative number with an optional unit B, KB, MB, GB, TB, KiB, MiB, GiB or TiB (e.g. '1GiB')"


def parse_size(value: str | int) -> int:
    """Returns the number of bytes ``value`` denotes; fractional results are rounded down to whole bytes.

    Accepts a non-negative int, or a string such as ``"1GiB"``, ``"1.5 GB"``, ``"512"``, ``"64KiB"``.
    Raises TypeError for other types and ValueError (naming the value) for anything unparsable.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"size {value!r} has type {type(value).__name__}: expected an int or a string")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"size {value!r} is negative: expected {_EXPECTED}")
        return value
    match = _PATTERN.match(value)
    if match is None or match.group(2).lower() not in _UNITS_BYTES:
        raise ValueError(f"size {value!r} not understood: expected {_EXPECTED}")
    number, unit = match.group(1), match.group(2).lower()
    multiplier = _UNITS_BYTES[unit]
    if "." not in number:
        return int(number) * multiplier  # exact for any size, no float rounding
    result = float(number) * multiplier
    if not math.isfinite(result):
        raise ValueError(f"size {value!r} is too large: expected {_EXPECTED}")
    return int(result)


def format_size(num_bytes: int) -> str:
    """Human-readable binary size: ``"512 B"``, ``"1.50 KiB"``, ``"2.00 GiB"`` (two decimals above bytes)."""
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int):
        raise TypeError(f"num_bytes {num_bytes!r} has type {type(num_bytes).__name__}: expected an int")
    if num_bytes < 0:
        raise ValueError(f"num_bytes {num_bytes!r} is negative: expected a byte count >= 0")
    if num_bytes < 1024:
        return f"{num_bytes} B"
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:.2f} {unit}"
    raise AssertionError("unreachable: num_bytes >= 1024 matches KiB")
