"""Where the repository's non-Python parts live, found once for every module that needs them.

The package is used from a checkout (``pip install -e .``, the only supported install): the
workflow's schemas, the native sources and the default data directory sit next to ``cherry/``.
"""
from __future__ import annotations

from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
WORKFLOW_DIR = REPO_DIR / "workflow"
SCHEMA_DIR = WORKFLOW_DIR / "schemas"
CSRC_DIR = REPO_DIR / "csrc"
DEFAULT_DATA_DIR = REPO_DIR / "data"


def schema_path(name: str) -> Path:
    """``workflow/schemas/<name>.schema.yaml`` (``name``: run, config or record)."""
    return SCHEMA_DIR / f"{name}.schema.yaml"
