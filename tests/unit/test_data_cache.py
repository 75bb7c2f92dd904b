"""Cache integrity: bit flips are found by `data info` / `data verify`, a damaged manifest is refused at
load and rebuilt by `data prepare`, and data edited behind a re-hashed manifest fails at load (labels,
splits) or at `data verify` (non-finite features), each with one line naming the file or value."""
import json
import re
import shutil

import numpy as np
import pytest

from cherry.cli import main
from cherry.data import dataset_info, load_dataset, prepare_dataset, verify_dataset
from cherry.data import cache as cache_mod
from tests.unit.fake_ogb import flip_byte


@pytest.fixture
def cache_dir(synth_tiny, data_root, tmp_path):
    """A private copy of synth-tiny's dataset directory; returns its cache directory."""
    shutil.copytree(data_root / "synth_tiny", tmp_path / "synth_tiny")
    return tmp_path / "synth_tiny" / "cherry"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert err and err[-1].startswith("cherry: error: ") and all(line.startswith("[") for line in err[:-1])
    return err[-1]


def _rewrite(cache_dir, key, change):
    """Edit one array in place and re-hash it in the manifest, as a careless hand edit would."""
    path = cache_dir / f"{key}.npy"
    arr = np.load(path)
    change(arr)
    np.save(path, arr, allow_pickle=False)
    manifest_path = cache_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["files"][key]["sha256"] = cache_mod.sha256_file(path)
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("key", ["features", "indices", "indptr", "labels", "train_idx"])
@pytest.mark.parametrize("verb", ["info", "verify"])
def test_bit_flip_is_named_by_info_and_verify(key, verb, cache_dir, capsys):
    flip_byte(cache_dir / f"{key}.npy", -3)
    assert main(["data", verb, "synth-tiny", "--root", str(cache_dir.parents[1])]) == 2
    assert re.search(rf"{key}\.npy fails its sha256 check", _one_line_error(capsys))


def _json_cut(text):
    return text[: len(text) // 2]


def _edit(change):
    def apply(text):
        manifest = json.loads(text)
        change(manifest)
        return json.dumps(manifest)
    return apply


MANIFEST_DAMAGE = {  # id: (change to manifest.json's text, what the refusal says)
    "truncated": (_json_cut, r"not valid JSON"),
    "empty": (lambda text: "", r"not valid JSON"),
    "not-an-object": (lambda text: "[1, 2]", r"expected a cherry-dataset-cache manifest"),
    "wrong-format": (_edit(lambda m: m.update(format="other")), r"expected a cherry-dataset-cache manifest"),
    "field-missing": (_edit(lambda m: m.pop("num_nodes")), r"field 'num_nodes' must be an integer, got None"),
    "field-wrong-type": (_edit(lambda m: m.update(num_classes="5")), r"field 'num_classes' must be an integer, got '5'"),
    "file-list-short": (_edit(lambda m: m["files"].pop("labels")), r"'files' must list exactly"),
    "entry-wrong-type": (_edit(lambda m: m["files"]["labels"].update(bytes="many")), r"entry 'labels' must hold"),
    "entry-outside-cache": (_edit(lambda m: m["files"]["labels"].update(file="../../labels.npy")),
                            r"entry 'labels' names file '\.\./\.\./labels\.npy'; expected labels\.npy"),
    "not-utf8": (lambda text: "\udcff", r"not valid JSON"),
}


def _damage_manifest(cache_dir, case):
    path = cache_dir / "manifest.json"
    if case == "missing":
        path.unlink()
        return r"its manifest\.json is missing"
    change, expected = MANIFEST_DAMAGE[case]
    path.write_bytes(change(path.read_text()).encode("utf-8", "surrogateescape"))
    return expected


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE) + ["missing"])
def test_damaged_manifest_refused_at_load_rebuilt_by_prepare(case, cache_dir, capsys):
    root = cache_dir.parents[1]
    expected = _damage_manifest(cache_dir, case)
    for call in (load_dataset, dataset_info, verify_dataset):
        with pytest.raises(ValueError) as info:
            call("synth-tiny", root=root)
        message = str(info.value)
        assert "cannot be trusted" in message and re.search(expected, message), message
        assert "\n" not in message and "cherry data prepare synth-tiny" in message
    assert main(["data", "prepare", "synth-tiny", "--root", str(root)]) == 0
    assert "rebuilding the cache" in capsys.readouterr().err
    assert load_dataset("synth-tiny", root=root).graph.num_nodes == 2000


def test_cli_train_path_refuses_damaged_manifest(cache_dir, capsys):
    _damage_manifest(cache_dir, "truncated")
    assert main(["data", "info", "synth-tiny", "--root", str(cache_dir.parents[1])]) == 2
    assert "cannot be trusted" in _one_line_error(capsys)


def test_other_format_version_is_rebuilt_silently(cache_dir):
    path = cache_dir / "manifest.json"
    path.write_text(_edit(lambda m: m.update(format_version=0))(path.read_text()))
    assert load_dataset("synth-tiny", root=cache_dir.parents[1]).graph.num_nodes == 2000
    assert json.loads(path.read_text())["format_version"] == cache_mod.FORMAT_VERSION


EDITS = {  # id: (array, change, what the load error says)
    "label-too-large": ("labels", lambda a: a.__setitem__(7, 9),
                        r"labels: node 7 has label 9; expected a class in \[0, 5\) or -1"),
    "label-negative": ("labels", lambda a: a.__setitem__(3, -4), r"node 3 has label -4"),
    "split-out-of-range": ("test_idx", lambda a: a.__setitem__(0, 2000),
                           r"test split names node 2000; expected node ids in \[0, 2000\)"),
}


@pytest.mark.parametrize("case", sorted(EDITS))
def test_edited_cache_fails_at_load_not_in_training(case, cache_dir):
    key, change, expected = EDITS[case]
    _rewrite(cache_dir, key, change)
    with pytest.raises(ValueError) as info:
        load_dataset("synth-tiny", root=cache_dir.parents[1])
    assert re.search(expected, str(info.value)) and str(cache_dir) in str(info.value)


def test_overlapping_split_in_cache_fails_at_load(cache_dir):
    train_node = int(np.load(cache_dir / "train_idx.npy")[0])
    _rewrite(cache_dir, "valid_idx", lambda a: a.__setitem__(0, train_node))
    with pytest.raises(ValueError, match=rf"valid split shares node {train_node} with the train split"):
        load_dataset("synth-tiny", root=cache_dir.parents[1])


def test_unverified_load_still_checks_labels(cache_dir):
    path = cache_dir / "labels.npy"
    arr = np.load(path)
    arr[11] = 5  # same size: only the skipped sha256 would see it
    np.save(path, arr)
    with pytest.raises(ValueError, match=r"node 11 has label 5"):
        load_dataset("synth-tiny", root=cache_dir.parents[1], verify=False)


def test_verify_finds_non_finite_features(cache_dir, capsys):
    _rewrite(cache_dir, "features", lambda a: a.__setitem__((4, 2), np.inf))
    root = str(cache_dir.parents[1])
    assert load_dataset("synth-tiny", root=root).graph.num_nodes == 2000  # not scanned at load
    assert main(["data", "verify", "synth-tiny", "--root", root]) == 2
    assert re.search(r"features\.npy\) must be finite; node 4, column 2 is inf", _one_line_error(capsys))


def test_training_on_non_finite_features_stops_as_diverged(cache_dir, capsys):
    # not scanned at load (above), but never trained silently: the loss becomes NaN, exit 4
    _rewrite(cache_dir, "features", lambda a: a.fill(np.nan))
    root = str(cache_dir.parents[1])
    assert main(["train", "--dataset", "synth-tiny", "--root", root, "--fanouts", "5,10", "--hidden", "16",
                 "--batch-size", "128", "--max-steps", "2", "--no-eval", "--quiet"]) == 4
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("cherry: error: training diverged: the loss became nan at step 1"), err


def test_verify_reports_what_it_checked(cache_dir, capsys):
    assert main(["data", "verify", "synth-tiny", "--root", str(cache_dir.parents[1])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["files_verified"] == 7 and report["labels_checked"] == 2000
    assert report["features_checked"] == 2000 * 24


def test_verify_does_not_prepare(tmp_path, capsys):
    assert main(["data", "verify", "synth-tiny", "--root", str(tmp_path)]) == 2
    assert "no dataset cache at" in _one_line_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_prepare_keeps_a_current_cache(cache_dir):
    before = (cache_dir / "manifest.json").stat().st_mtime_ns
    prepare_dataset("synth-tiny", root=cache_dir.parents[1])
    assert (cache_dir / "manifest.json").stat().st_mtime_ns == before
