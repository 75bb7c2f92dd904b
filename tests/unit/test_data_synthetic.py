"""The generator's guarantees (exact sizes, determinism, heavy tail, homophily, useful features)
and the vectorised OGB CSV writer."""
import dataclasses
import gzip

import numpy as np
import pandas as pd
import pytest

from cherry.data import ogb_csv
from cherry.data.registry import synth_spec
from cherry.data.synthetic import generate


@pytest.fixture(scope="module")
def tiny():
    spec = synth_spec("synth-tiny")
    return spec, generate(spec)


@pytest.fixture(scope="module")
def products_small():
    spec = synth_spec("synth-products", scale=0.01)  # 24,490 nodes, 618,591 edges
    return spec, generate(spec)


def _degrees(spec, arrays):
    return np.bincount(arrays.edges.ravel(), minlength=spec.num_nodes)


def test_generated_shapes_and_simple_graph(tiny):
    spec, a = tiny
    assert a.edges.shape == (spec.num_edges, 2) and a.edges.dtype == np.int64
    assert (a.edges[:, 0] < a.edges[:, 1]).all()  # no self-loops, each undirected edge once
    keys = a.edges[:, 0] * spec.num_nodes + a.edges[:, 1]
    assert np.unique(keys).size == spec.num_edges
    assert a.features.shape == (spec.num_nodes, spec.feature_dim) and a.features.dtype == np.float32
    assert np.array_equal(np.rint(a.features * 16), a.features * 16)  # exact in decimal CSV
    assert a.labels.min() >= 0 and a.labels.max() < spec.num_classes
    split = np.concatenate([a.train_idx, a.valid_idx, a.test_idx])
    assert [a.train_idx.size, a.valid_idx.size, a.test_idx.size] == list(spec.split_sizes)
    assert np.unique(split).size == split.size  # disjoint


def test_same_seed_same_arrays_other_seed_differs(tiny):
    spec, a = tiny
    b = generate(spec)
    for field in dataclasses.fields(a):
        assert np.array_equal(getattr(a, field.name), getattr(b, field.name)), field.name
    c = generate(dataclasses.replace(spec, seed=spec.seed + 1))
    assert not np.array_equal(a.edges, c.edges)


@pytest.mark.parametrize("which", ["tiny", "products_small"])
def test_degrees_heavy_tailed_and_labels_homophilous(which, request):
    spec, a = request.getfixturevalue(which)
    deg = _degrees(spec, a)
    assert deg.max() >= 20 * max(np.median(deg), 1)
    same = (a.labels[a.edges[:, 0]] == a.labels[a.edges[:, 1]]).mean()
    # Chance level for random endpoints is sum_c p_c^2 (>= 1 / num_classes; classes are skewed).
    chance = ((np.bincount(a.labels) / spec.num_nodes) ** 2).sum()
    assert same > 0.5 and same > 2 * chance


def _centroid_accuracy(x, y, train, test, num_classes):
    centroids = np.stack([x[train][y[train] == c].mean(0) for c in range(num_classes)])
    scores = x[test] @ centroids.T - 0.5 * (centroids ** 2).sum(1)
    return (scores.argmax(1) == y[test]).mean()


def test_neighbour_averaging_beats_features_alone(products_small):
    spec, a = products_small
    n = spec.num_nodes
    src = np.concatenate([a.edges[:, 0], a.edges[:, 1]])
    dst = np.concatenate([a.edges[:, 1], a.edges[:, 0]])
    x = a.features.astype(np.float64)
    agg = np.zeros_like(x)
    np.add.at(agg, dst, x[src])
    agg /= np.maximum(np.bincount(dst, minlength=n), 1)[:, None]
    args = (a.labels, a.train_idx, a.test_idx, spec.num_classes)
    alone = _centroid_accuracy(x, *args)
    averaged = _centroid_accuracy(np.concatenate([x, agg], 1), *args)
    assert 0.3 < alone < 0.7
    assert averaged > alone + 0.15


def test_int_and_float_formatters_round_trip(tmp_path):
    ints = np.array([[0, 7], [10, 12345678901], [99, 100]])
    assert ogb_csv.format_int_rows(ints) == b"0,7\n10,12345678901\n99,100\n"
    floats = np.array([[-9.9375, 0.0], [0.0625, 1.5], [-0.5, 9.9375]], dtype=np.float32)
    assert ogb_csv.format_sixteenths(floats) == b"-9.9375,0.0000\n0.0625,1.5000\n-0.5000,9.9375\n"
    with pytest.raises(ValueError, match="multiples of 1/16"):
        ogb_csv.format_sixteenths(np.array([[0.1]], dtype=np.float32))
    with pytest.raises(ValueError, match="non-negative"):
        ogb_csv.format_int_rows(np.array([[-1]]))


def test_chunked_gzip_is_deterministic_and_readable(tmp_path, monkeypatch, tiny):
    _, a = tiny
    monkeypatch.setattr(ogb_csv, "CHUNK_VALUES", 1000)  # many gzip members
    paths = [tmp_path / "one.csv.gz", tmp_path / "two.csv.gz"]
    for path in paths:
        ogb_csv.write_csv_gz(path, a.features, ogb_csv.format_sixteenths)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    back = pd.read_csv(paths[0], compression="gzip", header=None).values.astype(np.float32)
    assert np.array_equal(back, a.features)
    assert gzip.decompress(paths[0].read_bytes()).count(b"\n") == a.features.shape[0]
    assert [p.name for p in tmp_path.iterdir()] and not list(tmp_path.glob(".*tmp*"))
