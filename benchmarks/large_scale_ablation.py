"""A `$CHERRY_PLUGINS` module for `benchmarks.large_scale --ablate`: rows gathered in the batch's order
(no sorted gathers of memory-mapped tables), to measure what sorting brings."""
from __future__ import annotations

from cherry.execution import transfer

transfer.SORTED_GATHER_MIN_BYTES = 1 << 62
