"""Bounded prepare of a directory in OGB's CSV layout, by path: the streamed cache
is byte for byte the whole-read converter's, and a prepare's peak resident memory does not grow with
the data (measured from outside, in a child, as in test_data_bounded.py)."""
from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from cherry.data import bounded, cache, ogb_csv, ogb_dir
from tests.unit.child_rss import run_measured


def _write_layout(directory: Path, n: int, degree: int, dim: int, seed: int = 0,
                  node_count: bool = True, split_name: str = "random", classes: int = 7) -> np.ndarray:
    """A random graph in OGB's raw layout (fast writers: features are multiples of 1/16); return the
    nodes in no split (a fifth)."""
    rng = np.random.default_rng(seed)
    raw, split = directory / "raw", directory / "split" / split_name
    raw.mkdir(parents=True)
    split.mkdir(parents=True)
    edges = rng.integers(0, n, size=(n * degree, 2))
    edges[: n // 4] = edges[0]  # duplicates, and a few self loops
    edges[n // 4: n // 4 + 8, 1] = edges[n // 4: n // 4 + 8, 0]
    ogb_csv.write_csv_gz(raw / "edge.csv.gz", edges, ogb_csv.format_int_rows)
    features = rng.integers(-150, 150, size=(n, dim)).astype(np.float32) / 16
    ogb_csv.write_csv_gz(raw / "node-feat.csv.gz", features, ogb_csv.format_sixteenths)
    ogb_csv.write_csv_gz(raw / "node-label.csv.gz", (np.arange(n) % classes)[:, None], ogb_csv.format_int_rows)
    if node_count:
        ogb_csv.write_csv_gz(raw / "num-node-list.csv.gz", np.array([[n]]), ogb_csv.format_int_rows)
    order = rng.permutation(n)
    for name, part in zip(("train", "valid", "test"), np.split(order[: 4 * n // 5], [n // 2, 3 * n // 5])):
        ogb_csv.write_csv_gz(split / f"{name}.csv.gz", part[:, None], ogb_csv.format_int_rows)
    return order[4 * n // 5:]


def _whole_cache(directory: Path, target: Path) -> Path:
    arrays, summary = ogb_dir.read_directory(directory)
    return cache.write_cache(target, arrays, summary)


def _same_bytes(a: Path, b: Path) -> list[str]:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    return [name for name in names if (a / name).read_bytes() != (b / name).read_bytes()]


@pytest.mark.parametrize("node_count", [True, False])
def test_bounded_directory_cache_has_the_bytes_of_the_whole_read(tmp_path, monkeypatch, node_count):
    monkeypatch.setattr(bounded, "READ_ROWS", 64)  # many feature blocks, edge blocks and buckets
    monkeypatch.setattr(bounded, "BUCKET_ENTRIES", 512)
    directory = tmp_path / "g"
    unsplit = _write_layout(directory, 1500, 6, 5, node_count=node_count)
    labels = directory / "raw" / "node-label.csv.gz"  # unlabelled rows (NaN) and arbitrary float text
    rows = gzip.decompress(labels.read_bytes()).decode().splitlines()
    rows[unsplit[0]], rows[unsplit[1]] = "NaN", "nan"
    labels.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    feat = directory / "raw" / "node-feat.csv.gz"
    text = gzip.decompress(feat.read_bytes()).decode().replace("0.0625", "0.1", 7).replace("1.5000", "1e-3", 5)
    feat.write_bytes(gzip.compress(text.encode()))
    built = ogb_dir.prepare_directory(directory)
    assert not _same_bytes(built, _whole_cache(directory, tmp_path / "whole"))  # manifest included
    assert not [p for p in directory.iterdir() if p.name.startswith(".")]  # no temporary left behind


def _write_npz_layout(directory: Path, n: int, degree: int, dim: int, compressed: bool, fortran: bool,
                      node_count: bool) -> None:
    """OGB's binary layout (papers100M's): raw/data.npz and raw/node-label.npz, split as CSV."""
    unsplit = _write_layout(directory, n, degree, dim)
    raw = directory / "raw"
    edges = ogb_dir._csv(raw / "edge.csv.gz", np.int64).T
    arrays = {"edge_index": np.asfortranarray(edges) if fortran else edges,
              "node_feat": ogb_dir._csv(raw / "node-feat.csv.gz", np.float32).astype(np.float16)}
    if not fortran:  # pandas hands back Fortran order; OGB's files are written in C order
        arrays["node_feat"] = np.ascontiguousarray(arrays["node_feat"])
    if node_count:
        arrays["num_nodes_list"] = np.array([n])
    labels = (np.arange(n) % 7).astype(np.float64)[:, None]
    labels[unsplit[:3]] = np.nan
    save = np.savez_compressed if compressed else np.savez
    save(raw / "data.npz", **arrays)
    save(raw / "node-label.npz", node_label=labels)
    for name in ("edge.csv.gz", "node-feat.csv.gz", "node-label.csv.gz", "num-node-list.csv.gz"):
        (raw / name).unlink(missing_ok=True)


@pytest.mark.parametrize("compressed, fortran, node_count", [(False, False, True), (True, False, False),
                                                               (False, True, True)])
def test_bounded_npz_directory_has_the_bytes_of_the_whole_read(tmp_path, monkeypatch, compressed, fortran,
                                                               node_count):
    from cherry.data import npz_stream

    monkeypatch.setattr(bounded, "BUCKET_ENTRIES", 512)
    monkeypatch.setattr(npz_stream, "ROWS", 100)  # many blocks of every member
    directory = tmp_path / "g"
    _write_npz_layout(directory, 1500, 6, 5, compressed, fortran, node_count)
    built = ogb_dir.prepare_directory(directory)
    assert not _same_bytes(built, _whole_cache(directory, tmp_path / "whole"))  # manifest included
    assert sorted(p.name for p in (directory / "raw").iterdir()) == ["data.npz", "node-label.npz"]


def test_papers100m_by_name_is_streamed_with_the_bytes_of_ogbs_loader(tmp_path, monkeypatch):
    """ogbn-papers100M's raw npz by name: streamed (`real_npz_streamable`), the cache equal to the
    one converted from OGB's loader; declared counts that differ from the arrays go to OGB's loader."""
    pytest.importorskip("ogb")
    from cherry.data import datasets, npz_stream
    from cherry.data.ogb_io import read_ogb, real_npz_streamable

    monkeypatch.setattr(bounded, "BUCKET_ENTRIES", 512)
    monkeypatch.setattr(npz_stream, "ROWS", 100)
    directory = tmp_path / "root" / "ogbn_papers100M"
    _write_npz_layout(directory, 1500, 6, 5, compressed=False, fortran=False, node_count=True)
    (directory / "split" / "random").rename(directory / "split" / "time")
    with np.load(directory / "raw" / "data.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["node_feat"] = arrays["node_feat"].astype(np.float32)
    arrays["num_edges_list"] = np.array([arrays["edge_index"].shape[1]])
    np.savez(directory / "raw" / "data.npz", **arrays)
    (directory / "RELEASE_v1.txt").write_text("v1\n")
    reference = tmp_path / "ref" / directory.name
    shutil.copytree(directory, reference)
    assert real_npz_streamable("ogbn-papers100M", directory)
    built = datasets.prepare_dataset("ogbn-papers100M", root=tmp_path / "root")
    assert not (directory / "processed").exists()  # not OGB's loader
    read = read_ogb("ogbn-papers100M", reference)
    whole, summary = datasets._convert(read, lambda s, f: None)
    info = {"name": "ogbn-papers100M", "num_classes": 172, **summary,
            "metadata": datasets._expected_metadata("ogbn-papers100M", None)}
    assert not _same_bytes(built, cache.write_cache(tmp_path / "whole", whole, info))  # manifest included
    arrays["num_edges_list"] = np.array([arrays["edge_index"].shape[1] - 1])  # OGB would drop the last edge
    np.savez(directory / "raw" / "data.npz", **arrays)
    assert not real_npz_streamable("ogbn-papers100M", directory)


def test_bounded_directory_refuses_bad_files_in_one_line(tmp_path):
    directory = tmp_path / "g"
    _write_layout(directory, 300, 3, 4)
    (directory / "raw" / "num-node-list.csv.gz").write_bytes(gzip.compress(b"299\n"))
    with pytest.raises(ValueError, match="have 300 rows for 299 nodes") as info:
        ogb_dir.prepare_directory(directory)
    assert "\n" not in str(info.value)
    (directory / "raw" / "num-node-list.csv.gz").write_bytes(gzip.compress(b"300\n"))
    feat = directory / "raw" / "node-feat.csv.gz"
    rows = gzip.decompress(feat.read_bytes()).decode().splitlines()
    rows[200] = "0.5,abc,1,2"
    saved = feat.read_bytes()
    feat.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    with pytest.raises(ValueError, match=r"node-feat\.csv\.gz holds 'abc' at row 200, column 1; expected numbers"):
        ogb_dir.prepare_directory(directory)
    feat.write_bytes(saved)
    edges = directory / "raw" / "edge.csv.gz"
    edges.write_bytes(edges.read_bytes()[:-40])  # a truncated gzip stream
    with pytest.raises(ValueError, match="edge.csv.gz cannot be read"):
        ogb_dir.prepare_directory(directory)
    assert not (directory / "cherry").exists()


@pytest.mark.parametrize("name, split_name, classes", [("ogbn-arxiv", "time", 40),
                                                      ("ogbn-products", "sales_ranking", 47)])
def test_real_name_with_raw_csv_is_bounded_with_the_bytes_of_ogbs_loader(tmp_path, monkeypatch, name,
                                                                           split_name, classes):
    """ogbn-arxiv (symmetrised here) and ogbn-products (OGB's add_inverse_edge) by name: their raw CSV
    files go through `cherry.data.bounded`; the cache equals the one converted from OGB's loader."""
    pytest.importorskip("ogb")
    from cherry.data import datasets
    from cherry.data.ogb_io import read_ogb

    monkeypatch.setattr(bounded, "READ_ROWS", 64)
    monkeypatch.setattr(bounded, "BUCKET_ENTRIES", 512)
    directory = tmp_path / "root" / name.replace("-", "_")
    _write_layout(directory, 1200, 5, 3, split_name=split_name, classes=classes)
    ogb_csv.write_csv_gz(directory / "raw" / "num-edge-list.csv.gz", np.array([[1200 * 5]]), ogb_csv.format_int_rows)
    ogb_csv.write_csv_gz(directory / "raw" / "node_year.csv.gz", np.full((1200, 1), 2019), ogb_csv.format_int_rows)
    (directory / "RELEASE_v1.txt").write_text("v1\n")
    reference = tmp_path / "ref" / directory.name
    shutil.copytree(directory, reference)
    stages = []
    built = datasets.prepare_dataset(name, root=tmp_path / "root", progress=lambda s, f: stages.append(s))
    assert any("in blocks" in s for s in stages) and not (directory / "processed").exists()  # not OGB's loader
    arrays, summary = datasets._convert(read_ogb(name, reference), lambda s, f: None)
    info = {"name": name, "num_classes": classes, **summary, "metadata": datasets._expected_metadata(name, None)}
    assert not _same_bytes(built, cache.write_cache(tmp_path / "whole", arrays, info))  # manifest included
    assert sorted(p.name for p in directory.iterdir()) == ["RELEASE_v1.txt", "cherry", "raw", "split"]


_PREPARE_PATH_SMALL_BLOCKS = """
import sys
sys.modules["ogb"] = None
import cherry.data.bounded as b, cherry.data.npz_stream as z
b.READ_ROWS, b.BUCKET_ENTRIES, z.ROWS = 1 << 10, 1 << 16, 1 << 10
from cherry.cli import main
sys.exit(main(["data", "prepare", sys.argv[1]]))
"""


def _peak_mib(directory: Path) -> float:
    proc, peak_bytes = run_measured(_PREPARE_PATH_SMALL_BLOCKS, directory)
    assert proc.returncode == 0, proc.stderr
    return peak_bytes / 2**20


@pytest.mark.parametrize("layout", ["csv", "npz"])
def test_bounded_directory_prepare_peak_does_not_grow_with_the_data(tmp_path, layout):
    small, large = tmp_path / "s", tmp_path / "l"
    for directory, n in ((small, 25_000), (large, 100_000)):
        if layout == "csv":
            _write_layout(directory, n, 8, 64)
        else:
            _write_npz_layout(directory, n, 8, 64, compressed=True, fortran=False, node_count=True)
    peak_small, peak_large = _peak_mib(small), _peak_mib(large)
    sizes = [sum(f.stat().st_size for f in (d / "cherry").glob("*.npy")) / 2**20 for d in (small, large)]
    assert sizes[1] > 3.5 * sizes[0] > 8  # the data did grow 4x (~9.6 and ~38 MiB of cache)
    ceiling_mib = 448  # python + torch + numpy + pandas alone is ~290 MiB here
    assert peak_small <= ceiling_mib and peak_large <= ceiling_mib, (peak_small, peak_large)
    # 4x the data: the peak may grow only by the per-node vectors (labels, split, indptr: ~40 bytes per
    # node, 3 MiB for the 75,000 more nodes); the whole read grew by ~4x the cache's growth
    assert peak_large <= peak_small + 20, (peak_small, peak_large, sizes)
