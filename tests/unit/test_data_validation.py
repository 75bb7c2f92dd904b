"""`data prepare` validates what it reads: each corrupted input file gives a one-line ValueError that
names the file and the bad value, writes no cache and leaves no OGB processed file behind."""
import re

import numpy as np
import pytest

from cherry.cli import main
from cherry.data import load_dataset, prepare_dataset
from tests.unit.fake_ogb import flip_byte, truncate, write_fake_arxiv, write_text_gz

EDGES_OK = "0,1\n1,0\n2,3\n4,5\n5,0\n"
FEAT_ROWS = ["0,0.0625", "0.125,0.1875", "0.25,0.3125", "0.375,0.4375", "0.5,0.5625", "0.625,0.6875"]


def _feat(row, value):
    rows = list(FEAT_ROWS)
    rows[row] = value
    return "\n".join(rows) + "\n"


def _gz(rel, text):
    return lambda d: write_text_gz(d, rel, text)


CASES = {  # id: (damage, what the message must say)
    "edge-truncated-tail": (lambda d: truncate(d, "raw/edge.csv.gz", -4),
                            r"raw/edge\.csv\.gz is truncated"),
    "edge-truncated-half": (lambda d: truncate(d, "raw/edge.csv.gz", 15), r"raw/edge\.csv\.gz is truncated"),
    "edge-bit-flip": (lambda d: flip_byte(d / "raw/edge.csv.gz", 12), r"raw/edge\.csv\.gz is not a valid gzip file"),
    "edge-not-gzip": (lambda d: (d / "raw/edge.csv.gz").write_text(EDGES_OK),
                      r"raw/edge\.csv\.gz is not a valid gzip file"),
    "edge-empty": (_gz("raw/edge.csv.gz", ""), r"raw/edge\.csv\.gz cannot be parsed"),
    "edge-fewer-than-declared": (_gz("raw/edge.csv.gz", "0,1\n1,0\n2,3\n"),
                                 r"raw/edge\.csv\.gz\): 3 edges read, the dataset declares 5"),
    "edge-more-than-declared": (_gz("raw/edge.csv.gz", EDGES_OK + "3,4\n"),
                                r"raw/edge\.csv\.gz has 6 edge rows, the dataset declares 5"),
    "edge-fractional-id": (_gz("raw/edge.csv.gz", "0,1\n1.5,0\n2,3\n4,5\n5,0\n"),
                           r"raw/edge\.csv\.gz holds 1\.5 at row 1, column 0; expected integer node ids"),
    "edge-three-columns": (_gz("raw/edge.csv.gz", "0,1,1\n1,0,1\n2,3,1\n4,5,1\n5,0,1\n"),
                           r"edge\.csv\.gz\) must be pairs 'src,dst' \(\[2, E\]\), got rows of 3 columns"),
    "edge-node-out-of-range": (_gz("raw/edge.csv.gz", "0,1\n1,0\n2,3\n4,5\n5,9\n"),
                               r"edge\.csv\.gz\) name node 9; expected node ids in \[0, 6\)"),
    "edge-negative-node": (_gz("raw/edge.csv.gz", "0,1\n1,0\n2,3\n4,5\n-2,0\n"), r"edge\.csv\.gz\) name node -2"),
    "feat-fewer-rows": (_gz("raw/node-feat.csv.gz", "0,0\n1,1\n"),
                        r"node-feat\.csv\.gz\) have 2 rows for 6 nodes; expected one row per node"),
    "feat-nan": (_gz("raw/node-feat.csv.gz", _feat(1, "0.125,nan")),
                 r"node-feat\.csv\.gz\) must be finite; node 1, column 1 is nan"),
    "feat-inf": (_gz("raw/node-feat.csv.gz", _feat(5, "inf,0")), r"must be finite; node 5, column 0 is inf"),
    "feat-ragged-row": (_gz("raw/node-feat.csv.gz", _feat(3, "0.375")), r"must be finite; node 3, column 1 is nan"),
    "feat-text": (_gz("raw/node-feat.csv.gz", _feat(2, "0.25,abc")),
                  r"node-feat\.csv\.gz holds 'abc' at row 2, column 1; expected numbers"),
    "label-too-large": (_gz("raw/node-label.csv.gz", "0\n40\n3\n3\n1\n0\n"),
                        r"node-label\.csv\.gz\): node 1 has label 40; expected a class in \[0, 40\)"),
    "label-negative": (_gz("raw/node-label.csv.gz", "0\n1\n3\n-3\n1\n0\n"), r"node 3 has label -3"),
    "label-fractional": (_gz("raw/node-label.csv.gz", "0\n1.5\n3\n3\n1\n0\n"),
                         r"node-label\.csv\.gz holds 1\.5 at row 1; expected integer labels"),
    "label-fewer-rows": (_gz("raw/node-label.csv.gz", "0\n1\n"), r"node-label\.csv\.gz\) have 2 labels for 6 nodes; expected one label per node"),
    "label-missing-on-train-node": (_gz("raw/node-label.csv.gz", "0\nnan\n3\n3\n1\n0\n"),
                                    r"train split \(.*train\.csv\.gz\) holds node 1, which is unlabelled"),
    "split-out-of-range": (_gz("split/time/train.csv.gz", "0\n1\n9\n"),
                           r"train split \(.*train\.csv\.gz\) names node 9; expected node ids in \[0, 6\)"),
    "split-duplicate": (_gz("split/time/train.csv.gz", "0\n1\n1\n"), r"lists node 1 2 times; expected distinct"),
    "split-overlap": (_gz("split/time/valid.csv.gz", "0\n3\n"),
                      r"valid split \(.*valid\.csv\.gz\) shares node 0 with the train split; expected disjoint"),
    "split-empty-file": (_gz("split/time/train.csv.gz", ""), r"train\.csv\.gz cannot be parsed"),
    "split-truncated": (lambda d: truncate(d, "split/time/test.csv.gz", 12), r"test\.csv\.gz is truncated"),
    "num-nodes-text": (_gz("raw/num-node-list.csv.gz", "x\n"), r"num-node-list\.csv\.gz holds 'x' at row 0"),
    "num-nodes-too-many": (_gz("raw/num-node-list.csv.gz", "10\n"), r"have 6 rows for 10 nodes"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupted_file_is_named_at_prepare(case, tmp_path):
    damage, expected = CASES[case]
    directory = write_fake_arxiv(tmp_path / "ogbn_arxiv")
    damage(directory)
    with pytest.raises(ValueError) as info:
        prepare_dataset("ogbn-arxiv", root=tmp_path)
    message = str(info.value)
    assert re.search(expected, message), message
    assert "\n" not in message and str(directory) in message
    assert not (directory / "cherry").exists()  # no cache of invalid data
    assert not (directory / "processed" / "data_processed").exists()  # OGB's pickle would hide a repair


def test_repaired_file_is_read_afresh(tmp_path):
    directory = write_fake_arxiv(tmp_path / "ogbn_arxiv")
    write_text_gz(directory, "raw/node-feat.csv.gz", _feat(1, "0.125,nan"))
    with pytest.raises(ValueError, match="must be finite"):
        load_dataset("ogbn-arxiv", root=tmp_path)
    write_fake_arxiv(directory)
    ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert bool(ds.features.isfinite().all()) and ds.graph.num_nodes == 6


def test_unlabelled_node_outside_the_split_is_kept(tmp_path):
    directory = write_fake_arxiv(tmp_path / "ogbn_arxiv")
    write_text_gz(directory, "raw/node-label.csv.gz", "0\n39\n3\n3\n1\nnan\n")  # OGB's missing label
    write_text_gz(directory, "split/time/test.csv.gz", "4\n")
    ds = load_dataset("ogbn-arxiv", root=tmp_path)
    assert ds.labels.tolist() == [0, 39, 3, 3, 1, -1] and ds.test_idx.tolist() == [4]


@pytest.mark.parametrize("case", ["edge-truncated-tail", "feat-fewer-rows", "label-too-large"])
def test_cli_prepare_reports_one_line(case, tmp_path, capsys):
    damage, expected = CASES[case]
    damage(write_fake_arxiv(tmp_path / "ogbn_arxiv"))
    assert main(["data", "prepare", "ogbn-arxiv", "--root", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    *progress, error = captured.err.splitlines()
    assert all(line.startswith("[") for line in progress)  # progress lines, then the one-line error
    assert error.startswith("cherry: error: ") and re.search(expected, error) and captured.out == ""


def test_generated_dataset_passes_its_own_checks(synth_tiny):
    assert synth_tiny.labels.min() >= 0 and bool(np.isfinite(synth_tiny.features.numpy()).all())
