"""Shared fixtures. ``synth_tiny`` is the generated 2,000-node dataset, prepared once per session."""
from __future__ import annotations

from pathlib import Path

import pytest

from cherry.data import Dataset, load_dataset


@pytest.fixture(scope="session")
def data_root(tmp_path_factory) -> Path:
    """A session-wide datasets root (never the repository's data/ directory)."""
    return tmp_path_factory.mktemp("cherry-data")


@pytest.fixture(scope="session")
def synth_tiny(data_root: Path) -> Dataset:
    """``synth-tiny`` prepared into `data_root` (OGB CSV layout + cache) and loaded. Do not mutate."""
    return load_dataset("synth-tiny", root=data_root)
