"""Prepared datasets: OGB round trip, determinism, checksums, atomicity, real-OGB errors, info."""
import builtins
import json
import shutil

import numpy as np
import pytest
import torch

from cherry.data import DATASET_NAMES, dataset_info, load_dataset, prepare_dataset
from cherry.data import cache as cache_mod
from cherry.data import datasets as datasets_mod
from cherry.data.ogb_io import read_ogb, synth_meta_dict
from cherry.data.registry import dir_name, synth_spec
from cherry.data.synthetic import generate
from tests.unit.fake_ogb import write_fake_arxiv


def _edge_set(graph):
    dst = np.repeat(np.arange(graph.num_nodes), np.diff(graph.indptr.numpy()))
    return set(zip(graph.indices.numpy().tolist(), dst.tolist()))


def test_synth_tiny_matches_generated(synth_tiny):
    a = generate(synth_spec("synth-tiny"))
    assert torch.equal(synth_tiny.features, torch.from_numpy(a.features))
    assert torch.equal(synth_tiny.labels, torch.from_numpy(a.labels))
    for split in ("train_idx", "valid_idx", "test_idx"):
        assert torch.equal(getattr(synth_tiny, split), torch.from_numpy(getattr(a, split)))
    undirected = {(int(s), int(d)) for s, d in a.edges} | {(int(d), int(s)) for s, d in a.edges}
    assert synth_tiny.graph.num_edges == 2 * len(a.edges)
    assert _edge_set(synth_tiny.graph) == undirected  # symmetric CSC of exactly the generated edges
    assert synth_tiny.num_classes == 5 and synth_tiny.metadata["source"] == "generated"


def test_ogb_loader_reads_generated_layout(synth_tiny, data_root, tmp_path):
    spec = synth_spec("synth-tiny")
    copy = tmp_path / "synth_tiny"
    shutil.copytree(data_root / "synth_tiny", copy)  # OGB writes processed/ into the directory it reads
    read = read_ogb("synth-tiny", copy, meta_dict=synth_meta_dict(copy, spec))
    a = generate(spec)
    assert read["inverse_added"] and read["num_nodes"] == spec.num_nodes
    assert np.array_equal(read["edge_index"][:, 0::2], a.edges.T)  # OGB interleaves the reverses
    assert np.array_equal(read["edge_index"][:, 1::2], a.edges.T[::-1])
    assert np.array_equal(read["features"], a.features)
    assert np.array_equal(read["labels"], a.labels)
    assert np.array_equal(read["test_idx"], a.test_idx)


def test_same_seed_same_bytes(synth_tiny, data_root, tmp_path):
    prepare_dataset("synth-tiny", root=tmp_path)
    first, second = data_root / "synth_tiny", tmp_path / "synth_tiny"
    # every file a fresh prepare writes (the shared root may also hold derived caches, e.g. orderings)
    files = sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert any(p.name == "edge.csv.gz" for p in files) and any(p.name == "features.npy" for p in files)
    for rel in files:
        assert (first / rel).read_bytes() == (second / rel).read_bytes(), rel


def _copy_dataset(data_root, tmp_path):
    shutil.copytree(data_root / "synth_tiny", tmp_path / "synth_tiny")
    return tmp_path / "synth_tiny" / "cherry"


def test_corrupt_cache_file_is_named(synth_tiny, data_root, tmp_path):
    cache_dir = _copy_dataset(data_root, tmp_path)
    features = cache_dir / "features.npy"
    raw = bytearray(features.read_bytes())
    raw[-5] ^= 0xFF  # same size, different content
    features.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"features\.npy fails its sha256 check"):
        load_dataset("synth-tiny", root=tmp_path)
    load_dataset("synth-tiny", root=tmp_path, verify=False)  # sizes only: still loads


def test_truncated_and_missing_cache_files_are_named(synth_tiny, data_root, tmp_path):
    cache_dir = _copy_dataset(data_root, tmp_path)
    labels = cache_dir / "labels.npy"
    labels.write_bytes(labels.read_bytes()[:-8])
    with pytest.raises(ValueError, match=r"labels\.npy has \d+ bytes, manifest says"):
        load_dataset("synth-tiny", root=tmp_path, verify=False)
    (cache_dir / "indptr.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"indptr\.npy is missing"):
        dataset_info("synth-tiny", root=tmp_path)


def test_memory_mapped_load_is_copy_on_write(synth_tiny, data_root):
    cache_dir = data_root / "synth_tiny" / "cherry"
    arrays, _ = cache_mod.load_cache(cache_dir, mmap_threshold_bytes=0)
    assert isinstance(arrays["features"], np.memmap)
    tensor = torch.from_numpy(arrays["features"])
    tensor[0, 0] += 1.0  # private page: the file must not change
    cache_mod.load_cache(cache_dir)  # checksums still verify
    assert tensor[0, 0] == synth_tiny.features[0, 0] + 1.0


def test_interrupted_prepare_leaves_nothing(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("interrupted")

    # mid-conversion: the layout and features.npy are written, the graph is not
    monkeypatch.setattr("cherry.data.bounded.write_csc", fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        prepare_dataset("synth-tiny", root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_scaled_dataset_gets_own_directory(tmp_path):
    ds = load_dataset("synth-products", root=tmp_path, scale=0.002)
    spec = synth_spec("synth-products", 0.002)
    assert ds.graph.num_nodes == spec.num_nodes and ds.graph.num_edges == 2 * spec.num_edges
    assert (tmp_path / "synth_products_scale0.002" / "cherry" / "manifest.json").exists()
    assert dir_name("synth-products") == "synth_products"  # the default (1/10) scale


def test_prepare_reuses_current_cache_and_force_rebuilds(synth_tiny, data_root, tmp_path):
    manifest = data_root / "synth_tiny" / "cherry" / "manifest.json"
    before = manifest.stat().st_mtime_ns
    assert prepare_dataset("synth-tiny", root=data_root) == manifest.parent
    assert manifest.stat().st_mtime_ns == before
    copy = _copy_dataset(data_root, tmp_path) / "manifest.json"
    (copy.parent / "stale-marker").write_text("x")
    prepare_dataset("synth-tiny", root=tmp_path, force=True)
    assert not (copy.parent / "stale-marker").exists()  # a new directory replaced the old one
    assert copy.read_bytes() == manifest.read_bytes()


def test_dataset_info_is_json_and_consistent(synth_tiny, data_root):
    info = json.loads(json.dumps(dataset_info("synth-tiny", root=data_root)))
    assert info["num_nodes"] == 2000 and info["num_edges"] == synth_tiny.graph.num_edges
    assert info["source_edges"] == synth_tiny.graph.num_edges // 2
    assert info["feature_dim"] == synth_tiny.feature_dim and info["num_classes"] == 5
    assert info["split_sizes"] == {"train": 1200, "valid": 400, "test": 400}
    deg = synth_tiny.graph.in_degrees().numpy()
    assert info["degree"] == {"min": int(deg.min()), "median": float(np.median(deg)), "max": int(deg.max())}
    assert info["degree"]["max"] > 10 * info["degree"]["median"]


def test_real_ogb_layout_is_read_and_symmetrised(tmp_path):
    write_fake_arxiv(tmp_path / "ogbn_arxiv")
    ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert ds.num_classes == 40 and ds.metadata["source"] == "ogb"
    directed = {(0, 1), (1, 0), (2, 3), (4, 5), (5, 0)}
    assert _edge_set(ds.graph) == directed | {(d, s) for s, d in directed}  # reverse added, no duplicate
    assert ds.graph.num_edges == 8 and ds.metadata["source_edges"] == 5
    assert torch.equal(ds.features, torch.arange(12, dtype=torch.float32).reshape(6, 2) / 16)
    assert ds.labels.tolist() == [0, 39, 3, 3, 1, 0] and ds.test_idx.tolist() == [4, 5]
    assert (tmp_path / "ogbn_arxiv" / "cherry" / "manifest.json").exists()


@pytest.mark.timeout(30)
def test_missing_real_dataset_names_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(builtins, "input", lambda *a: pytest.fail("OGB prompted"))
    with pytest.raises(FileNotFoundError) as info:
        load_dataset("ogbn-products", root=tmp_path)
    message = str(info.value)
    assert str(tmp_path / "ogbn_products") in message and "\n" not in message
    (tmp_path / "ogbn_arxiv" / "raw").mkdir(parents=True)  # present but incomplete, no RELEASE file
    with pytest.raises(FileNotFoundError, match=r"missing RELEASE_v1\.txt, raw/edge\.csv\.gz"):
        dataset_info("ogbn-arxiv", root=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ogbn_arxiv"]  # nothing written


@pytest.mark.parametrize("name", ["ogbn-foo", "synth_tiny", "Cora"])
def test_unknown_name_lists_valid_names(name, tmp_path):
    with pytest.raises(ValueError) as info:
        load_dataset(name, root=tmp_path)
    assert name in str(info.value) and all(n in str(info.value) for n in DATASET_NAMES)
    assert "\n" not in str(info.value)


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="dataset name must be a str"):
        prepare_dataset(3, root=tmp_path)
    for scale in (0, -1, 1.5, float("nan"), "big"):
        with pytest.raises(ValueError, match="scale must be a number in"):
            prepare_dataset("synth-tiny", root=tmp_path, scale=scale)
    with pytest.raises(ValueError, match="generated datasets only"):
        prepare_dataset("ogbn-arxiv", root=tmp_path, scale=0.5)
