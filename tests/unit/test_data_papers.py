"""synth-papers: the papers100M-shaped generated dataset, written and read without
the `ogb` package, and `cherry data prepare`'s peak resident memory, measured from outside."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from cherry.data.registry import SYNTH_SPECS, dir_name, synth_spec
from tests.unit.child_rss import run_measured

SCALE = 0.0001  # 11,106 nodes, 161,569 undirected edges


def test_spec_keeps_papers100m_shape_at_any_scale():
    full = SYNTH_SPECS["synth-papers"]
    assert (full.feature_dim, full.num_classes) == (128, 172)
    for scale in (SCALE, 0.001, 0.01):
        spec = synth_spec("synth-papers", scale)
        labelled = sum(spec.split_sizes) / spec.num_nodes
        assert 0.01 <= labelled <= 0.02, (scale, labelled)  # papers100M labels ~1.4%, not all nodes
        assert spec.num_edges / spec.num_nodes == pytest.approx(full.num_edges / full.num_nodes, rel=0.01)
    assert dir_name("synth-papers") == "synth_papers"  # the default 1/1000 scale


def test_other_generated_splits_unchanged():
    # Fully labelled sets still put every node in a split (test takes the remainder).
    spec = synth_spec("synth-products", 0.01)
    assert sum(spec.split_sizes) == spec.num_nodes


_PREPARE_WITHOUT_OGB = """
import sys
sys.modules["ogb"] = None  # any `import ogb` now raises ImportError
from cherry.cli import main
sys.exit(main(["data", "prepare", "synth-papers", "--root", sys.argv[1], "--scale", sys.argv[2]]))
"""


def _prepare_in_child(root: Path) -> tuple[subprocess.CompletedProcess, int]:
    return run_measured(_PREPARE_WITHOUT_OGB, root, SCALE, timeout_s=120)


def test_prepare_and_load_without_ogb_under_rss_ceiling(tmp_path):
    proc, child_peak_bytes = _prepare_in_child(tmp_path)
    assert proc.returncode == 0, proc.stderr
    match = re.search(r"synth-papers ready \(peak resident memory (\d+) MiB\)", proc.stderr)
    assert match, proc.stderr
    ceiling_bytes = 1024 * 2**20  # python + torch + numpy alone is ~300 MiB; the data is ~6 MiB
    assert int(match.group(1)) * 2**20 <= ceiling_bytes
    if child_peak_bytes > 0:
        assert child_peak_bytes <= ceiling_bytes
        # The printed figure is true: taken just before exit, so at most the child's final peak and
        # close to it (interpreter teardown may still add a little).
        assert int(match.group(1)) - 1 <= child_peak_bytes / 2**20 <= int(match.group(1)) + 64

    from cherry.data.datasets import load_dataset

    spec = synth_spec("synth-papers", SCALE)
    ds = load_dataset("synth-papers", root=tmp_path, scale=SCALE)
    assert tuple(ds.features.shape) == (spec.num_nodes, 128)
    assert int(ds.labels.max()) < 172
    assert (ds.train_idx.numel(), ds.valid_idx.numel(), ds.test_idx.numel()) == spec.split_sizes
