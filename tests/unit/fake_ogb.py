"""A 6-node dataset in ogbn-arxiv's exact file layout (directed edges, one reciprocated), and ways to
damage it: the corrupted-file fixtures of the data-validation tests. Writing it takes milliseconds."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from cherry.data.ogb_csv import format_int_rows, format_sixteenths, write_csv_gz

FEATURES = np.arange(12, dtype=np.float32).reshape(6, 2) / 16
LABELS = [0, 39, 3, 3, 1, 0]
EDGES = [[0, 1], [1, 0], [2, 3], [4, 5], [5, 0]]


def write_fake_arxiv(directory: Path) -> Path:
    files = {
        "raw/edge.csv.gz": (np.array(EDGES), format_int_rows),
        "raw/num-node-list.csv.gz": (np.array([[6]]), format_int_rows),
        "raw/num-edge-list.csv.gz": (np.array([[len(EDGES)]]), format_int_rows),
        "raw/node-feat.csv.gz": (FEATURES, format_sixteenths),
        "raw/node-label.csv.gz": (np.array([[v] for v in LABELS]), format_int_rows),
        "raw/node_year.csv.gz": (np.full((6, 1), 2019), format_int_rows),
        "split/time/train.csv.gz": (np.array([[0], [1], [2]]), format_int_rows),
        "split/time/valid.csv.gz": (np.array([[3]]), format_int_rows),
        "split/time/test.csv.gz": (np.array([[4], [5]]), format_int_rows),
    }
    for rel, (values, formatter) in files.items():
        (directory / rel).parent.mkdir(parents=True, exist_ok=True)
        write_csv_gz(directory / rel, values, formatter)
    (directory / "RELEASE_v1.txt").write_text("v1\n")
    return directory


def write_text_gz(directory: Path, rel: str, text: str) -> None:
    """Replace ``rel`` by a valid gzip file holding ``text`` (bad content, good compression)."""
    (directory / rel).write_bytes(gzip.compress(text.encode(), mtime=0))


def truncate(directory: Path, rel: str, keep_bytes: int) -> None:
    path = directory / rel
    path.write_bytes(path.read_bytes()[:keep_bytes])


def flip_byte(path: Path, offset: int) -> None:
    """Same size, different content: a bit flip a checksum must catch."""
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x10
    path.write_bytes(bytes(raw))
