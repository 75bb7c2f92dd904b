"""gnn-benchmark ``.npz`` files by path: the same dataset as reading them whole, a seeded split recorded
in the manifest, bounded memory, and one-line errors for bad values (before any cast)."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from cherry.data import gnn_benchmark, load_dataset
from cherry.data.arrays import undirected_csc
from cherry.data.random_split import draw_split, parse_split
from tests.real_graphs import GRAPHS, needs_graph
from tests.unit.child_rss import run_measured



def _arrays(n: int = 300, dim: int = 40, classes: int = 4, seed: int = 0) -> dict:
    """A small graph in the layout: a directed CSR adjacency with duplicates and a self loop, sparse
    integer-valued features with a duplicate entry in row 0, labels."""
    rng = np.random.default_rng(seed)
    rows, cols = rng.integers(0, n, 6 * n), rng.integers(0, n, 6 * n)
    rows[:5], cols[:5] = 3, 7  # duplicates
    rows[5], cols[5] = 9, 9  # a self loop
    adj = sp.csr_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n, n))
    adj.sum_duplicates()
    attr = sp.random(n, dim, density=0.1, format="csr", random_state=seed, dtype=np.float32)
    attr.data = np.ceil(attr.data * 3)
    attr_indices = attr.indices.astype(np.int64).copy()
    attr_data = attr.data.copy()
    if attr.indptr[1] >= 2:  # a duplicate column in row 0: added up, as scipy's toarray
        attr_indices[1] = attr_indices[0]
    return dict(adj_data=adj.data.astype(np.float32), adj_indices=adj.indices.astype(np.int64),
                adj_indptr=adj.indptr.astype(np.int64), adj_shape=np.array(adj.shape, np.int64),
                attr_data=attr_data, attr_indices=attr_indices, attr_indptr=attr.indptr.astype(np.int64),
                attr_shape=np.array(attr.shape, np.int64), labels=rng.integers(0, classes, n).astype(np.int64))


def _write(path: Path, arrays: dict) -> str:
    np.savez_compressed(path, **arrays)
    return str(path)


def test_npz_by_path_equals_reading_it_whole(tmp_path):
    arrays = _arrays()
    name = _write(tmp_path / "g.npz", arrays)
    ds = load_dataset(name, root=tmp_path / "data")
    n = int(arrays["adj_shape"][0])
    dense = sp.csr_matrix((arrays["attr_data"], arrays["attr_indices"], arrays["attr_indptr"]),
                          shape=tuple(arrays["attr_shape"])).toarray()
    assert np.array_equal(ds.features.numpy(), dense)
    src = np.repeat(np.arange(n), np.diff(arrays["adj_indptr"]))
    indptr, indices = undirected_csc(src, arrays["adj_indices"], n)
    assert np.array_equal(ds.graph.indptr.numpy(), indptr) and np.array_equal(ds.graph.indices.numpy(), indices)
    assert np.array_equal(ds.labels.numpy(), arrays["labels"]) and ds.num_classes == 4
    assert ds.metadata["split"] == "random:20,30@0" and ds.metadata["source"] == "npz"
    assert Path(ds.metadata["cache_dir"]).is_relative_to(tmp_path / "data")


def test_small_blocks_give_the_same_cache(tmp_path, monkeypatch):
    name = _write(tmp_path / "g.npz", _arrays(dim=50))
    whole = gnn_benchmark.prepare_npz(name, tmp_path / "a")
    monkeypatch.setattr(gnn_benchmark, "BLOCK_BYTES", 4 * 50 * 7)  # 7 rows per block
    blocks = gnn_benchmark.prepare_npz(name, tmp_path / "b")
    for f in sorted(whole.glob("*.npy")):
        assert f.read_bytes() == (blocks / f.name).read_bytes(), f.name


def test_split_per_class_and_fractions_seeded_and_recorded(tmp_path):
    labels = np.repeat(np.arange(3), [60, 80, 100])
    labels[5] = -1
    per_class = draw_split(labels, parse_split("random:20,30@4"))
    for c in range(3):
        assert (labels[per_class["train"]] == c).sum() == 20 and (labels[per_class["valid"]] == c).sum() == 30
    assert sum(v.size for v in per_class.values()) == 239 and 5 not in np.concatenate(list(per_class.values()))
    again = draw_split(labels, parse_split("random:20,30@4"))
    other = draw_split(labels, parse_split("random:20,30@5"))
    assert all(np.array_equal(per_class[s], again[s]) for s in per_class)
    assert not np.array_equal(per_class["train"], other["train"])
    fractions = draw_split(labels, parse_split("random:0.1,0.2"))
    assert (fractions["train"].size, fractions["valid"].size, fractions["test"].size) == (24, 48, 167)
    name = _write(tmp_path / "g.npz", _arrays(n=400))
    info_a = json.loads((gnn_benchmark.prepare_npz(f"{name}?split=random:0.5,0.25@1", tmp_path) / "manifest.json").read_text())
    assert info_a["metadata"]["split"] == "random:0.5,0.25@1" and info_a["split_sizes"]["train"] == 200


@pytest.mark.parametrize("text, message", [
    ("random:20", "expected 'random:TRAIN,VALID"),
    ("random:0,30", "at least 1 train node"),
    ("random:0.6,0.5", r"train \+ valid < 1"),
    ("stratified:20,30", "expected 'random:TRAIN,VALID"),
])
def test_bad_split_strings(text, message):
    with pytest.raises(ValueError, match=message):
        parse_split(text)


def test_a_class_too_small_for_its_draw_is_named():
    with pytest.raises(ValueError, match="class 1 has 40 nodes; expected more than 50"):
        draw_split(np.repeat([0, 1], [100, 40]), parse_split("random:20,30"))


def _bad(key, edit):
    def make():
        arrays = _arrays()
        arrays[key] = edit(arrays[key])
        return arrays
    return make


@pytest.mark.parametrize("make, message", [
    (_bad("attr_data", lambda a: np.where(np.arange(a.size) == 3, np.nan, a)), r"attr_data holds nan in row \d; expected finite"),
    (_bad("attr_indices", lambda a: np.where(np.arange(a.size) == 0, 40, a)), "attr_indices names column 40 in row 0"),
    (_bad("adj_indices", lambda a: np.where(np.arange(a.size) == a.size - 1, -2, a)),
     "adj_indices names column -2 in row 299"),
    (_bad("labels", lambda a: a.astype(np.float64) + 0.5), r"labels hold \d\.5 at node 0; expected integer classes"),
    (_bad("labels", lambda a: a.astype("U3")), "labels has dtype <U3; expected numbers"),
    (_bad("labels", lambda a: a[:-1]), "labels has 299 entries; expected 300"),
    (_bad("labels", lambda a: np.where(np.arange(a.size) == 8, -3, a)), "node 8 has label -3"),
    (_bad("adj_indptr", lambda a: a[::-1].copy()), "adj_indptr runs from"),
    (_bad("attr_indptr", lambda a: np.where(np.arange(a.size) == 5, a[7], a)), "attr_indptr decreases at row 5"),
    (_bad("attr_shape", lambda a: np.array([299, 40])), "disagree; expected an n x n adjacency"),
    (_bad("adj_data", lambda a: a[:-1]), "adj_data and adj_indices differ in length"),
    (_bad("attr_indices", lambda a: a.astype(np.float32)), "attr_indices has dtype float32"),
    (_bad("adj_shape", lambda a: a[None, :]), r"g.npz: npz member adj_shape has shape \(1, 2\); expected a 1-D array"),
])
def test_bad_values_are_one_line_errors_before_any_cast(tmp_path, make, message):
    name = _write(tmp_path / "g.npz", make())
    with pytest.raises(ValueError, match=message) as err:
        gnn_benchmark.prepare_npz(name, tmp_path / "data")
    assert "\n" not in str(err.value)
    assert not list((tmp_path / "data").rglob("manifest.json"))  # nothing was sealed


def test_missing_file_member_or_not_a_zip(tmp_path):
    with pytest.raises(FileNotFoundError, match="dataset file .*nope.npz does not exist"):
        load_dataset(str(tmp_path / "nope.npz"), root=tmp_path)
    arrays = _arrays()
    del arrays["attr_shape"], arrays["labels"]
    with pytest.raises(ValueError, match="lacks attr_shape, labels"):
        load_dataset(_write(tmp_path / "g.npz", arrays), root=tmp_path)
    (tmp_path / "t.npz").write_text("not a zip")
    with pytest.raises(ValueError, match="cannot be read as an npz archive"):
        load_dataset(str(tmp_path / "t.npz"), root=tmp_path)


def test_an_edited_file_or_another_split_converts_again(tmp_path):
    path = tmp_path / "g.npz"
    name = _write(path, _arrays())
    first = gnn_benchmark.prepare_npz(name, tmp_path)
    mtime = (first / "manifest.json").stat().st_mtime_ns
    assert gnn_benchmark.prepare_npz(name, tmp_path) == first and (first / "manifest.json").stat().st_mtime_ns == mtime
    assert gnn_benchmark.prepare_npz(name + "?split=random:0.2,0.2", tmp_path) != first
    _write(path, _arrays(seed=1))
    os.utime(path, ns=(1, 1))
    assert not gnn_benchmark.cache_is_current(name, tmp_path)
    ds = load_dataset(name, root=tmp_path)
    assert np.array_equal(ds.labels.numpy(), _arrays(seed=1)["labels"])


def _cli(argv):
    from cherry.cli import data as data_cli

    parser = argparse.ArgumentParser(prog="cherry")
    data_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_prepare_info_verify_with_split(tmp_path, capsys):
    name = _write(tmp_path / "g.npz", _arrays())
    root = ["--root", str(tmp_path / "data"), "--split", "random:10,10@2"]
    assert _cli(["data", "prepare", name, *root]) == 0
    assert "random_10_10_seed2" in capsys.readouterr().out
    assert _cli(["data", "info", name, *root]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["metadata"]["split"] == "random:10,10@2" and info["split_sizes"]["train"] == 40
    assert _cli(["data", "verify", name, *root]) == 0
    with pytest.raises(FileNotFoundError, match="no current dataset cache"):
        _cli(["data", "verify", name, "--root", str(tmp_path / "data"), "--split", "random:5,5"])
    with pytest.raises(ValueError, match="--split 'random:1,1' applies to .npz datasets only"):
        _cli(["data", "info", "synth-tiny", "--split", "random:1,1"])


def test_spec_validates_the_split_of_an_npz_name(tmp_path):
    from cherry.spec import SpecError, make_spec

    name = _write(tmp_path / "g.npz", _arrays())
    assert make_spec(system="cherry", dataset=name + "?split=random:0.5,0.2").dataset.endswith("0.5,0.2")
    with pytest.raises(SpecError, match="key dataset: split 'random:x'"):
        make_spec(system="cherry", dataset=name + "?split=random:x")


_CONVERT = """
import sys, tempfile
from pathlib import Path
from cherry.data import gnn_benchmark
gnn_benchmark.prepare_npz(sys.argv[1], sys.argv[2])
"""


@needs_graph("coauthor_cs.npz")
def test_coauthor_cs_densifies_in_bounded_memory(tmp_path):
    """499 MB of dense float32 features: the conversion's peak stays far below them."""
    proc, peak_bytes = run_measured(_CONVERT, GRAPHS / "coauthor_cs.npz", tmp_path)
    assert proc.returncode == 0, proc.stderr
    features = next(tmp_path.rglob("features.npy"))
    assert features.stat().st_size > 490e6
    assert peak_bytes < 448 * 2**20, peak_bytes / 2**20  # python + torch + numpy alone is ~290 MiB here


@needs_graph("amazon_photo.npz")
def test_amazon_photo_features_equal_scipy_and_split_is_shchurs(tmp_path):
    ds = load_dataset(str(GRAPHS / "amazon_photo.npz"), root=tmp_path)
    with np.load(GRAPHS / "amazon_photo.npz") as z:
        dense = sp.csr_matrix((z["attr_data"], z["attr_indices"], z["attr_indptr"]), shape=tuple(z["attr_shape"]))
        assert np.array_equal(ds.features.numpy(), dense.toarray())
    assert (ds.graph.num_nodes, ds.feature_dim, ds.num_classes) == (7650, 745, 8)
    assert ds.train_idx.numel() == 8 * 20 and ds.valid_idx.numel() == 8 * 30
    assert ds.test_idx.numel() == 7650 - 400
