"""Training from a memory-mapped cache beyond the page cache (issue 26, item 3): sorted row gathers give
the same rows, and the read-ahead names exactly the pages of the rows a batch gathers."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from cherry.data import readahead as readahead_mod
from cherry.data.readahead import RowReadahead
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


def test_page_cache_room_is_a_positive_size_here():
    room = readahead_mod.page_cache_room_bytes()
    assert room is None or 0 <= room < (1 << 60)


def test_only_memory_mapped_tables_count_as_file_backed(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((64, 16), dtype=np.float32))
    mapped = torch.from_numpy(np.load(tmp_path / "x.npy", mmap_mode="c"))
    assert transfer.is_file_backed(mapped.data_ptr())
    assert not transfer.is_file_backed(torch.ones(1 << 20).data_ptr())  # anonymous memory
    assert not transfer.is_file_backed(0)


def test_readahead_pages_cover_exactly_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(readahead_mod, "_PAGE_BYTES", 64)  # small pages: many runs in a small file
    x = np.arange(300 * 5, dtype=np.float32).reshape(300, 5)  # 20-byte rows straddle page boundaries
    np.save(tmp_path / "features.npy", x)
    ahead = RowReadahead(tmp_path / "features.npy")
    assert (ahead.num_rows, ahead.row_bytes) == (300, 20) and ahead.offset_bytes % 64 == 0
    nodes = torch.tensor([299, 0, 1, 150, 151, 7, 0])
    ranges = ahead.page_ranges(nodes)
    assert (ranges[:, 0] % 64 == 0).all() and (ranges[:, 1] % 64 == 0).all()
    assert (ranges[1:, 0] > ranges[:-1, 0] + ranges[:-1, 1]).all()  # ascending, disjoint, not adjacent
    covered = np.zeros((tmp_path / "features.npy").stat().st_size + 64, dtype=bool)
    for offset, length in ranges:
        covered[offset:offset + length] = True
    needed = np.zeros_like(covered)
    for row in set(nodes.tolist()):
        start = ahead.offset_bytes + row * 20
        needed[start:start + 20] = True
    assert (covered >= needed).all()  # every byte of every row is asked for
    pages_needed = {b // 64 for b in np.flatnonzero(needed)}
    assert sum(int(length) for _, length in ranges) == 64 * len(pages_needed)  # and no other page
    assert ahead(nodes) == len(ranges)
    ahead.close()


def test_readahead_only_for_memory_mapped_features(tmp_path, monkeypatch):
    from types import SimpleNamespace

    np.save(tmp_path / "features.npy", np.zeros((10, 4), dtype=np.float32))
    small = SimpleNamespace(metadata={"cache_dir": str(tmp_path)}, features=torch.zeros(10, 4))
    assert RowReadahead.for_dataset(small) is None  # below the mapping threshold: read into memory
    monkeypatch.setattr("cherry.data.cache.MMAP_THRESHOLD_BYTES", 0)
    monkeypatch.setattr(readahead_mod, "page_cache_room_bytes", lambda: 1 << 30)
    assert isinstance(RowReadahead.for_dataset(small), RowReadahead)
    monkeypatch.setattr(readahead_mod, "page_cache_room_bytes", lambda: 100)  # less room than the table
    assert RowReadahead.for_dataset(small) is None
    assert RowReadahead.for_dataset(SimpleNamespace(metadata={}, features=torch.zeros(10, 4))) is None
