"""Bounded-memory prepare: the streamed pieces equal their in-memory versions, and a
prepare's peak resident memory does not grow with the data (measured from outside, in a child)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from cherry.data import bounded, ogb_csv
from cherry.data.arrays import undirected_csc
from cherry.data.graph import Graph
from cherry.data.registry import synth_spec
from cherry.data.synthetic import generate
from tests.unit.child_rss import run_measured



def _blocks(array: np.ndarray, sizes) -> list[np.ndarray]:
    cuts = np.cumsum(sizes)[:-1]
    return np.split(array, cuts)


@pytest.mark.parametrize("inverse", [True, False])
def test_csc_by_counting_sort_on_disk_equals_the_in_memory_build(tmp_path, monkeypatch, inverse):
    rng = np.random.default_rng(0)
    n, e = 300, 2_000
    edges = rng.integers(0, n, (e, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    monkeypatch.setattr(bounded, "BUCKET_ENTRIES", 97)  # many destination buckets, some empty
    indptr = bounded.write_csc(_blocks(edges, [1, 500, 7, edges.shape[0] - 508]), n, tmp_path, tmp_path,
                               inverse_interleaved=inverse, declared_edges=edges.shape[0])
    indices = np.load(tmp_path / "indices.npy")
    if inverse:  # OGB's add_inverse_edge: edge i, then its reverse; columns keep edge-list order
        src = np.stack([edges[:, 0], edges[:, 1]], 1).ravel()
        dst = np.stack([edges[:, 1], edges[:, 0]], 1).ravel()
        ref = Graph.from_edges(torch.from_numpy(src), torch.from_numpy(dst), n)
        ref_indptr, ref_indices = ref.indptr.numpy(), ref.indices.numpy()
    else:
        ref_indptr, ref_indices = undirected_csc(edges[:, 0], edges[:, 1], n)
    assert np.array_equal(indptr, ref_indptr) and np.array_equal(indices, ref_indices)
    with open(tmp_path / "indices.npy", "rb") as f:  # np.save's own header: the cache checksums agree
        np.save(tmp_path / "ref.npy", ref_indices)
        assert f.read() == (tmp_path / "ref.npy").read_bytes()
    assert list(tmp_path.glob("csc-*")) == []  # bucket files are removed


def test_csc_refuses_a_short_edge_list_and_bad_ids(tmp_path):
    edges = np.array([[0, 1], [1, 2]])
    with pytest.raises(ValueError, match="2 edges read, the dataset declares 3"):
        bounded.write_csc([edges], 3, tmp_path, tmp_path, inverse_interleaved=True, declared_edges=3,
                          where="edge.csv.gz")
    with pytest.raises(ValueError, match=r"name node 7; expected node ids in \[0, 3\) \(row 1: \[1, 7\]\)"):
        bounded.write_csc([np.array([[0, 1], [1, 7]])], 3, tmp_path, tmp_path, inverse_interleaved=True)


def test_streamed_csv_has_the_bytes_of_the_whole_array(tmp_path, monkeypatch):
    monkeypatch.setattr(ogb_csv, "CHUNK_VALUES", 64)  # several gzip members
    values = np.random.default_rng(1).integers(0, 10**6, (301, 2))
    ogb_csv.write_csv_gz(tmp_path / "whole.csv.gz", values, ogb_csv.format_int_rows)
    ogb_csv.write_csv_gz_blocks(tmp_path / "blocks.csv.gz", iter(_blocks(values, [5, 1, 200, 95])), 2,
                                ogb_csv.format_int_rows)
    assert (tmp_path / "whole.csv.gz").read_bytes() == (tmp_path / "blocks.csv.gz").read_bytes()
    rows = list(bounded.csv_blocks(tmp_path / "blocks.csv.gz", rows=64))
    assert [r.shape[0] for r in rows] == [64, 64, 64, 64, 45] and np.array_equal(np.concatenate(rows), values)


def test_chunked_generator_keeps_the_models_guarantees(monkeypatch):
    from cherry.data import synthetic_chunked

    for name, value in (("CHUNK_NODES", 300), ("DRAWS_PER_PIECE", 2_000), ("BUCKET_EDGES", 3_000)):
        monkeypatch.setattr(synthetic_chunked, name, value)  # many pieces, buckets and feature blocks
    spec = dataclasses.replace(synth_spec("synth-tiny"), chunked=True)
    a, b = generate(spec), generate(spec)
    assert a.edges.shape == (spec.num_edges, 2) and (a.edges[:, 0] < a.edges[:, 1]).all()
    assert np.unique(a.edges[:, 0] * spec.num_nodes + a.edges[:, 1]).size == spec.num_edges  # exact, distinct
    assert not (np.diff(a.edges[:, 0]) >= 0).all()  # not sorted by source
    assert a.features.shape == (spec.num_nodes, spec.feature_dim)
    assert np.array_equal(np.rint(a.features * 16), a.features * 16)
    assert [a.train_idx.size, a.valid_idx.size, a.test_idx.size] == list(spec.split_sizes)
    for field in dataclasses.fields(a):
        assert np.array_equal(getattr(a, field.name), getattr(b, field.name)), field.name
    same = (a.labels[a.edges[:, 0]] == a.labels[a.edges[:, 1]]).mean()
    assert same > 2 * (np.bincount(a.labels) / a.labels.size).__pow__(2).sum()  # homophilous
    deg = np.bincount(a.edges.ravel(), minlength=spec.num_nodes)
    assert deg.max() >= 10 * max(np.median(deg), 1)  # heavy-tailed


# Block sizes 16x below the defaults, so that the two small scales below span many blocks of every
# kind (the defaults reach their full working set of ~200 MiB only beyond ~0.002).
_PREPARE_SMALL_BLOCKS = """
import sys
sys.modules["ogb"] = None
import cherry.data.bounded as b, cherry.data.ogb_csv as c, cherry.data.synthetic_chunked as g
b.READ_ROWS, b.BUCKET_ENTRIES, c.CHUNK_VALUES = 1 << 10, 1 << 16, 1 << 17
g.CHUNK_NODES, g.DRAWS_PER_PIECE, g.BUCKET_EDGES = 1 << 10, 1 << 14, 1 << 16
from cherry.cli import main
sys.exit(main(["data", "prepare", "synth-papers", "--root", sys.argv[1], "--scale", sys.argv[2]]))
"""
def _peak_mib(root: Path, scale: float) -> float:
    proc, peak_bytes = run_measured(_PREPARE_SMALL_BLOCKS, root, scale)
    assert proc.returncode == 0, proc.stderr
    return peak_bytes / 2**20


def test_bounded_prepare_peak_does_not_grow_with_the_data(tmp_path):
    small, large = 0.0001, 0.0004  # caches of ~8 and ~32 MiB; the old in-memory prepare grew ~7x that
    peak_small, peak_large = _peak_mib(tmp_path / "s", small), _peak_mib(tmp_path / "l", large)
    sizes = [sum(f.stat().st_size for f in (tmp_path / d).rglob("cherry/*.npy")) / 2**20 for d in ("s", "l")]
    assert sizes[1] > 3.5 * sizes[0] > 25  # the data did grow 4x
    ceiling_mib = 448  # python + torch + numpy + pandas alone is ~290 MiB here
    assert peak_small <= ceiling_mib and peak_large <= ceiling_mib, (peak_small, peak_large)
    # 4x the data, +24 MiB of cache: the peak may grow only by the per-node vectors (labels, split,
    # indptr, the generator's weights; ~0.3 MiB per 1,000 nodes here: 33,318 more nodes)
    assert peak_large <= peak_small + 20, (peak_small, peak_large, sizes)
