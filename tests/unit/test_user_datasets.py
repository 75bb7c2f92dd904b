"""A user's data: `Dataset.from_arrays`, a directory in OGB's layout by path, `register_dataset`."""
from __future__ import annotations

import gzip
import shutil

import numpy as np
import pytest
import torch

from cherry.data import Dataset, dataset_info, load_dataset, register_dataset
from cherry.data.sources import _REGISTERED, dataset_kind
from cherry.spec import SpecError, make_spec


def _edge_keys(ds: Dataset) -> np.ndarray:
    n = ds.graph.num_nodes
    dst = np.repeat(np.arange(n), np.diff(ds.graph.indptr.numpy()))
    return np.sort(dst * n + ds.graph.indices.numpy())


def _small_arrays(n=12, classes=3):
    rng = np.random.default_rng(0)
    src = np.arange(n)
    dst = (src + 1) % n
    edge_index = np.stack([src, dst])
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = np.arange(n) % classes
    return edge_index, x, y, np.arange(0, 6), np.arange(6, 9), np.arange(9, 12)


def test_from_arrays_undirected_with_class_count_from_labels():
    ei, x, y, tr, va, te = _small_arrays()
    ds = Dataset.from_arrays("ring", ei, x, y, tr, va, te)
    assert ds.num_classes == 3 and ds.graph.num_edges == 2 * ei.shape[1]
    # node 0 hears from 1 (the reverse edge) and from 11
    assert sorted(ds.graph.indices[ds.graph.indptr[0]:ds.graph.indptr[1]].tolist()) == [1, 11]
    directed = Dataset.from_arrays("ring", torch.from_numpy(ei), x, y, tr, va, te, undirected=False)
    assert directed.graph.num_edges == ei.shape[1]
    csc = Dataset.from_arrays("ring", None, x, y, tr, va, te, csc=(ds.graph.indptr, ds.graph.indices))
    assert torch.equal(csc.graph.indices, ds.graph.indices)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(ei=np.array([[0, 1], [1, 99]])), "node 99"),
    (lambda a: a["x"].__setitem__((2, 1), np.nan), "finite"),
    (lambda a: a.update(tr=np.array([0, 0])), "distinct"),
    (lambda a: a.update(va=np.array([0])), "disjoint"),
    (lambda a: a.update(x=a["x"][:5]), "12 labels for 5 nodes"),
])
def test_from_arrays_refuses_bad_arrays_in_one_line(change, message):
    ei, x, y, tr, va, te = _small_arrays()
    a = dict(ei=ei, x=x.copy(), y=y, tr=tr, va=va, te=te)
    change(a)
    with pytest.raises((ValueError, TypeError)) as info:
        Dataset.from_arrays("bad", a["ei"], a["x"], a["y"], a["tr"], a["va"], a["te"])
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.fixture
def ogb_copy(synth_tiny, data_root, tmp_path):
    """synth-tiny's OGB directory copied under a user's own name, without RELEASE_v1.txt or the cache."""
    target = tmp_path / "my_graph"
    shutil.copytree(data_root / "synth_tiny", target, ignore=shutil.ignore_patterns("cherry", "processed"))
    (target / "RELEASE_v1.txt").unlink()
    return target


def test_directory_by_path_matches_the_builtin_and_is_cached(ogb_copy, synth_tiny):
    ds = load_dataset(str(ogb_copy))
    assert ds.num_classes == synth_tiny.num_classes  # from the labels (5), not a borrowed OGB table
    assert torch.equal(ds.features, synth_tiny.features) and torch.equal(ds.labels, synth_tiny.labels)
    assert np.array_equal(_edge_keys(ds), _edge_keys(synth_tiny))
    assert torch.equal(ds.train_idx, synth_tiny.train_idx)
    manifest = (ogb_copy / "cherry" / "manifest.json")
    stamp = manifest.stat().st_mtime_ns
    load_dataset(str(ogb_copy))
    assert manifest.stat().st_mtime_ns == stamp  # unchanged sources: read from the cache
    assert dataset_kind(str(ogb_copy)) == "path"
    assert make_spec(dataset=str(ogb_copy)).dataset == str(ogb_copy)
    assert dataset_info(str(ogb_copy))["num_classes"] == 5


def test_directory_named_like_ogb_takes_ogbs_class_count(ogb_copy, tmp_path):
    named = ogb_copy.rename(tmp_path / "ogbn_arxiv")
    assert load_dataset(str(named)).num_classes == 40


def test_directory_edit_rebuilds_and_missing_file_is_one_line(ogb_copy):
    load_dataset(str(ogb_copy))
    labels = ogb_copy / "raw" / "node-label.csv.gz"
    rows = gzip.decompress(labels.read_bytes()).decode().splitlines()
    rows[0] = "7"  # a new class: the count follows the labels
    labels.write_bytes(gzip.compress(("\n".join(rows) + "\n").encode()))
    assert load_dataset(str(ogb_copy)).num_classes == 8
    labels.unlink()
    with pytest.raises(FileNotFoundError, match="lacks raw/node-label.csv.gz"):
        load_dataset(str(ogb_copy))


def test_register_dataset_names_a_users_dataset_everywhere():
    ei, x, y, tr, va, te = _small_arrays()
    calls = []

    def loader():
        calls.append(1)
        return Dataset.from_arrays("ring-reg", ei, x, y, tr, va, te)

    try:
        register_dataset("ring-reg", loader)
        spec = make_spec(dataset="ring-reg", fanouts=[2, 2], batch_size=4)
        assert spec.dataset == "ring-reg"
        assert load_dataset("ring-reg") is load_dataset("ring-reg") and calls == [1]
        with pytest.raises(ValueError, match="already registered"):
            register_dataset("ring-reg", lambda: None)
        with pytest.raises(ValueError, match="built in"):
            register_dataset("synth-tiny", loader)
    finally:
        _REGISTERED.pop("ring-reg", None)
    with pytest.raises(SpecError, match="unknown dataset 'ring-reg'"):
        make_spec(dataset="ring-reg")


def test_cli_prepares_and_trains_a_directory_by_path(ogb_copy, capsys):
    from cherry.cli import main

    assert main(["data", "prepare", str(ogb_copy)]) == 0
    assert capsys.readouterr().out.strip() == str(ogb_copy / "cherry")
    assert main(["train", "--dataset", str(ogb_copy), "--hidden", "8", "--fanouts", "3,3", "--batch-size", "400",
                 "--max-steps", "1", "--microbatches", "2", "--quiet"]) == 0
    assert "done: K=2" in capsys.readouterr().out
    assert main(["train", "--dataset", str(ogb_copy / "nope"), "--quiet"]) != 0
    err = capsys.readouterr().err.strip()
    assert "does not exist" in err and len(err.splitlines()) == 1
