"""Where the tests find the real graphs (``../shared/graphs`` beside the repository, or
``$CHERRY_GRAPHS``), and the one-line skip where they are absent."""
import os
from pathlib import Path

import pytest

GRAPHS = Path(os.environ.get("CHERRY_GRAPHS") or Path(__file__).resolve().parents[2] / "shared" / "graphs")


def needs_graph(file_name: str):
    """Skip (one line) unless ``GRAPHS/file_name`` is there."""
    return pytest.mark.skipif(not (GRAPHS / file_name).is_file(), reason=f"no {file_name} in {GRAPHS}")
