"""One parsing layer (`cherry.data.values`) for the integers that enter: integer where an integer is
meant, range-checked before any cast, the value as read named with its file, row and column; the
prepared cache of a dataset directory is stale when a source's content changed, whatever its stat."""
from __future__ import annotations

import gzip
import os
import shutil

import numpy as np
import pytest
import torch

from cherry.cli import main
from cherry.data import Dataset, load_dataset
from cherry.data.values import integer_array, integer_column, integer_scalar

BIG_U64 = np.uint64(2**63 + 5)

REFUSED = {
    "fraction": (np.array([0.0, 1.5]), "1.5 at row 1", "not an integer"),
    "negative-fraction": (np.array([[0.0, -0.5]]), "-0.5 at row 0, column 1", "not an integer"),
    "huge-float": (np.array([1e20]), "1e+20 at row 0", "beyond int64"),
    "nan-not-missing": (np.array([np.nan]), "nan at row 0", "missing"),
    "inf": (np.array([3.0, -np.inf]), "-inf at row 1", "not finite"),
    "uint64-above-int64": (np.array([1, BIG_U64], dtype=np.uint64), "9223372036854775813 at row 1", "beyond int64"),
    "text": (np.array([["src", "dst"], [0, 1]], dtype=object), "'src' at row 0, column 0", "text"),
    "python-int-beyond-int64": (np.array([2**70], dtype=object), f"{2**70} at row 0", "beyond int64"),
    "bool": (np.array([True, False]), "booleans", ""),
    "torch-float": (torch.tensor([2.0, 2.25]), "2.25 at row 1", "not an integer"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_values_are_named_as_read(case):
    values, says, why = REFUSED[case]
    with pytest.raises(ValueError) as info:
        integer_array(values, "node id", "ids.csv.gz")
    message = str(info.value)
    assert message.startswith("ids.csv.gz holds ") and says in message and why in message and "\n" not in message


ACCEPTED = {
    "int32": (np.array([1, 2], dtype=np.int32), [1, 2]),
    "uint64-in-range": (np.array([0, 2**63 - 1], dtype=np.uint64), [0, 2**63 - 1]),
    "integral-floats": (np.array([3.0, -1.0]), [3, -1]),
    "nan-as-missing": (np.array([np.nan, 4.0]), [-1, 4]),
    "python-ints": ([5, 6], [5, 6]),
    "empty": (np.array([], dtype=np.float64), []),
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_exact_integers_pass_unchanged(case):
    values, expected = ACCEPTED[case]
    out = integer_array(values, "label", "y", missing=-1)
    assert out.dtype == np.int64 and out.tolist() == expected


def test_a_two_column_file_is_not_a_flat_list():
    with pytest.raises(ValueError, match=r"has rows of 2 columns .*expected one node id per row"):
        integer_column(np.array([[1, 2], [3, 4]]), "node id", "train.csv.gz")
    assert integer_column(np.array([[1], [3]]), "node id").tolist() == [1, 3]


@pytest.mark.parametrize("value", [4.5, "4", True, None, 4.0, np.float32(4)])
def test_a_count_is_an_integer(value):
    with pytest.raises(TypeError, match="num_classes must be an integer"):
        integer_scalar(value, "num_classes")
    assert integer_scalar(np.int64(4), "num_classes", low=1) == 4


def _arrays():
    ei = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])
    return ei, np.ones((4, 2), np.float32), np.array([0, 1, 0, 1]), np.array([0, 1]), np.array([2]), np.array([3])


@pytest.mark.parametrize("num_classes", [4.5, "4", True])
def test_from_arrays_refuses_a_count_that_is_not_an_integer(num_classes):
    with pytest.raises(TypeError, match="num_classes must be an integer"):
        Dataset.from_arrays("ring", *_arrays(), num_classes=num_classes)


def test_from_arrays_names_an_uint64_id_as_it_is():
    ei, *rest = _arrays()
    ei = ei.astype(np.uint64)
    ei[0, 1] = BIG_U64
    with pytest.raises(ValueError, match="holds 9223372036854775813 at row 0, column 1"):
        Dataset.from_arrays("ring", ei, *rest)


@pytest.fixture
def user_dir(synth_tiny, data_root, tmp_path):
    target = tmp_path / "my_graph"
    shutil.copytree(data_root / "synth_tiny", target, ignore=shutil.ignore_patterns("cherry", "processed"))
    return target


def _rewrite(path, edit) -> None:
    rows = gzip.decompress(path.read_bytes()).decode().splitlines()
    path.write_bytes(gzip.compress(("\n".join(edit(rows)) + "\n").encode()))


DIRECTORY_FAULTS = {
    "label-fraction": ("raw/node-label.csv.gz", lambda r: ["1.5"] + r[1:], "holds 1.5 at row 0; expected integer labels"),
    "label-negative-fraction": ("raw/node-label.csv.gz", lambda r: r[:2] + ["-0.5"] + r[3:], "holds -0.5 at row 2"),
    "label-huge": ("raw/node-label.csv.gz", lambda r: ["1e20"] + r[1:], "holds 1e20 at row 0"),
    "split-fraction": ("split/random/train.csv.gz", lambda r: ["1.5"] + r[1:], "holds 1.5 at row 0; expected integer node ids"),
    "split-two-columns": ("split/random/train.csv.gz", lambda r: [x + ",1" for x in r], "has rows of 2 columns"),
    "edge-header-row": ("raw/edge.csv.gz", lambda r: ["src,dst"] + r, "holds 'src' at row 0, column 0"),
    "edge-uint64": ("raw/edge.csv.gz", lambda r: [f"{2**63 + 5},0"] + r[1:], "holds 9223372036854775813 at row 0"),
    "edge-fraction": ("raw/edge.csv.gz", lambda r: r[:3] + ["2.5,1"] + r[4:], "holds 2.5 at row 3, column 0"),
}


@pytest.mark.parametrize("case", sorted(DIRECTORY_FAULTS))
def test_a_directory_value_is_refused_with_file_row_and_text(case, user_dir, capsys):
    rel, edit, says = DIRECTORY_FAULTS[case]
    split = next((user_dir / "split").iterdir()).name
    path = user_dir / rel.replace("random", split)
    _rewrite(path, edit)
    assert main(["data", "prepare", str(user_dir)]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("[")]  # progress
    assert len(err) == 1 and err[0].startswith("cherry: error: ") and says in err[0] and path.name in err[0], err
    assert not (user_dir / "cherry").exists()


def test_an_edit_with_its_mtime_restored_is_converted_again(user_dir):
    assert load_dataset(str(user_dir)).num_classes == 5
    labels = user_dir / "raw" / "node-label.csv.gz"
    before = labels.stat()
    rows = gzip.decompress(labels.read_bytes()).decode().splitlines()
    rows[0] = "7"  # same length as the label it replaces
    data = gzip.compress(("\n".join(rows) + "\n").encode(), mtime=0)
    labels.write_bytes(data)
    os.utime(labels, ns=(before.st_atime_ns, before.st_mtime_ns))  # what cp -p or tar do
    assert labels.stat().st_mtime_ns == before.st_mtime_ns
    assert load_dataset(str(user_dir)).num_classes == 8


def test_a_copied_directory_keeps_its_cache(user_dir, tmp_path):
    load_dataset(str(user_dir))
    copy = tmp_path / "copied"
    shutil.copytree(user_dir, copy)  # new inodes and times, same contents
    manifest = copy / "cherry" / "manifest.json"
    stamp = manifest.stat().st_mtime_ns
    load_dataset(str(copy))
    assert manifest.stat().st_mtime_ns == stamp  # not converted again
