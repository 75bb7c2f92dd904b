"""A `$CHERRY_PLUGINS` module for `benchmarks.large_scale`: ``synth-papers-large`` is synth-papers at
``$CHERRY_LARGE_SCALE`` in ``$CHERRY_LARGE_ROOT`` (``cherry train`` takes no ``--scale``), loaded
without the sha256 pass (which would read the whole cache before training)."""
from __future__ import annotations

import os

from cherry.data import load_dataset, register_dataset

register_dataset("synth-papers-large", lambda: load_dataset(
    "synth-papers", root=os.environ["CHERRY_LARGE_ROOT"], scale=float(os.environ["CHERRY_LARGE_SCALE"]),
    verify=False), replace=True)
