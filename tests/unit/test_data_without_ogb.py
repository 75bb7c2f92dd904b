"""Generated datasets are written and read without the ``ogb`` package (the GPU machine has none):
`CsvLayoutDataset` gives OGB's arrays, the cache has the same bytes, bad files are still named."""
from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from cherry.data import ogb_io, prepare_dataset
from cherry.data.ogb_csv_reader import CsvLayoutDataset
from cherry.data.registry import synth_spec
from cherry.data.synthetic import generate
from tests.optional import importable

needs_ogb = pytest.mark.skipif(not importable("ogb"), reason="the comparison needs OGB's own loader")


@pytest.fixture()
def without_ogb(monkeypatch):
    """``read_ogb`` as on a machine without the ogb package."""
    monkeypatch.setattr(ogb_io, "_ogb_dataset_module", lambda: None)
    assert not ogb_io.ogb_available()


@pytest.fixture(scope="module")
def layout(tmp_path_factory):
    """synth-tiny at a small scale written in OGB's CSV layout, and its meta_dict."""
    directory = tmp_path_factory.mktemp("layout") / "synth_tiny"
    spec = synth_spec("synth-tiny", 0.25)
    ogb_io.write_synth_layout(directory, generate(spec))
    return directory, ogb_io.synth_meta_dict(directory, spec)


@needs_ogb
def test_own_reader_returns_ogbs_arrays(layout, monkeypatch):
    directory, meta = layout
    by_ogb = ogb_io.read_ogb("synth-tiny", directory, meta_dict=meta)
    (directory / "processed" / "data_processed").unlink(missing_ok=True)
    monkeypatch.setattr(ogb_io, "_ogb_dataset_module", lambda: None)
    by_us = ogb_io.read_ogb("synth-tiny", directory, meta_dict=meta)
    assert by_ogb.keys() == by_us.keys()
    for key, value in by_ogb.items():
        if isinstance(value, np.ndarray):
            assert value.dtype == by_us[key].dtype and np.array_equal(value, by_us[key]), key
        else:
            assert value == by_us[key], key
    assert by_us["inverse_added"] and by_us["edge_index"].shape[1] % 2 == 0
    # the reverse of edge i sits right after it, as OGB interleaves them
    assert np.array_equal(by_us["edge_index"][:, 1::2], by_us["edge_index"][::-1, 0::2])


@needs_ogb
def test_cache_has_the_same_bytes_with_and_without_ogb(tmp_path, monkeypatch):
    with_ogb = prepare_dataset("synth-tiny", root=tmp_path / "a", scale=0.25)
    monkeypatch.setattr(ogb_io, "_ogb_dataset_module", lambda: None)
    without = prepare_dataset("synth-tiny", root=tmp_path / "b", scale=0.25)
    names = sorted(p.name for p in with_ogb.iterdir())
    assert names == sorted(p.name for p in without.iterdir()) and any(n.endswith(".npy") for n in names)
    for name in names:
        if name == "manifest.json":  # paths and times differ; the checksums must not
            a, b = (json.loads((d / name).read_text()) for d in (with_ogb, without))
            assert a.get("files") == b.get("files") and a["files"]
        else:
            assert (with_ogb / name).read_bytes() == (without / name).read_bytes(), name


def test_without_ogb_a_truncated_file_is_named(layout, tmp_path, without_ogb):
    import shutil

    directory = tmp_path / "synth_tiny"
    shutil.copytree(layout[0], directory)
    meta = {**layout[1], "dir_path": str(directory)}
    assert ogb_io.read_ogb("synth-tiny", directory, meta_dict=meta)["num_nodes"] > 0
    edge = directory / "raw" / "edge.csv.gz"
    edge.write_bytes(edge.read_bytes()[:-4])
    with pytest.raises(ValueError, match=r"raw/edge\.csv\.gz is truncated"):
        ogb_io.read_ogb("synth-tiny", directory, meta_dict=meta)


def test_without_ogb_the_checks_still_run(layout, tmp_path, without_ogb):
    import shutil

    directory = tmp_path / "synth_tiny"
    shutil.copytree(layout[0], directory)
    meta = {**layout[1], "dir_path": str(directory)}
    with gzip.open(directory / "raw" / "num-node-list.csv.gz", "wt") as f:
        f.write("3\n")  # fewer nodes than the edges name
    with pytest.raises(ValueError, match=r"edge\.csv\.gz"):
        ogb_io.read_ogb("synth-tiny", directory, meta_dict=meta)


def test_without_ogb_real_datasets_and_binary_layouts_are_refused(tmp_path, without_ogb):
    with pytest.raises(ModuleNotFoundError, match="ogbn-arxiv needs the ogb package"):
        ogb_io.read_ogb("ogbn-arxiv", tmp_path / "ogbn_arxiv")
    with pytest.raises(ValueError, match="binary"):
        CsvLayoutDataset("x", {"dir_path": str(tmp_path), "binary": "True", "is hetero": "False"})
