"""Training from a memory-mapped cache beyond the page cache: sorted row gathers give
the same rows, and only tables memory-mapped from a file take that path."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cherry.execution import transfer
from cherry.execution.transfer import PinnedRows, gather_rows


@pytest.mark.parametrize("threshold", [0, 1 << 40])  # sorted path, plain path
def test_gather_rows_equals_index_select(monkeypatch, threshold):
    monkeypatch.setattr(transfer, "SORTED_GATHER_MIN_BYTES", threshold)
    monkeypatch.setattr(transfer, "is_file_backed", lambda ptr: True)
    x = torch.randn(500, 7)
    nodes = torch.tensor([499, 3, 3, 250, 0, 17, 3, 498])  # unsorted, repeated
    assert torch.equal(gather_rows(x, nodes), x.index_select(0, nodes))
    out = torch.empty(nodes.numel(), 7)
    assert gather_rows(x, nodes, out=out) is out and torch.equal(out, x.index_select(0, nodes))
    assert torch.equal(PinnedRows().gather(x, nodes, "cpu"), x.index_select(0, nodes))
    assert gather_rows(x, torch.empty(0, dtype=torch.int64)).shape == (0, 7)


def test_only_memory_mapped_tables_count_as_file_backed(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((64, 16), dtype=np.float32))
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="c"))
    assert transfer.is_file_backed(mapped.data_ptr())
    assert not transfer.is_file_backed(torch.ones(1 << 20).data_ptr())  # anonymous memory
    assert not transfer.is_file_backed(0)
