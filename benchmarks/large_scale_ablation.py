"""A `$CHERRY_PLUGINS` module for `benchmarks.large_scale --ablate`: turns off what makes training
beyond the page cache work, to measure it. ``$CHERRY_LARGE_ABLATE``: ``no-readahead`` (sorted gathers
only) or ``plain`` (neither sorted gathers nor read-ahead: rows gathered in the batch's order)."""
from __future__ import annotations

import os

from cherry.data import readahead
from cherry.execution import transfer

_MODE = os.environ.get("CHERRY_LARGE_ABLATE", "")
if _MODE not in ("no-readahead", "plain"):
    raise ValueError(f"CHERRY_LARGE_ABLATE must be no-readahead or plain, got {_MODE!r}")
readahead.RowReadahead.for_dataset = classmethod(lambda cls, dataset: None)
if _MODE == "plain":
    transfer.SORTED_GATHER_MIN_BYTES = 1 << 62
