"""Read a homogeneous CSV dataset in OGB's layout without the ``ogb`` package (where it is absent).

`CsvLayoutDataset` stands in for ``ogb.nodeproppred.NodePropPredDataset`` built from a ``meta_dict``
(the way generated datasets are read). It reads the same files, parsed the same way (pandas, no
header, gzip), with the same dtype rules (features int64 if pandas reads integers, else float32;
labels as parsed). It gives the same interleaved reverse edges when ``add_inverse_edge`` (edge ``i`` at column ``2i``, its reverse at
``2i + 1``) and the same split files. So `cherry.data.ogb_io.read_ogb` hands identical arrays to the
same checks with or without OGB, and a cache prepared either way has the same bytes (tested). Unlike
OGB it writes no ``processed/data_processed`` file, never prompts and never downloads. Binary
(npz) and heterogeneous layouts, and the real datasets' metadata, are OGB's alone.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cherry.extras import require


def _read_csv(path: Path) -> np.ndarray:
    pd = require("pandas")  # the data extra's: `import cherry.data` stays light

    return pd.read_csv(path, compression="gzip", header=None).values


def _int_or_float(values: np.ndarray) -> np.ndarray:
    return values.astype(np.int64) if "int" in str(values.dtype) else values.astype(np.float32)


class CsvLayoutDataset:
    """The parts of OGB's ``NodePropPredDataset`` that `read_ogb` uses: ``ds[0]`` -> ``(graph, labels)``
    (``graph`` a dict with ``edge_index``, ``node_feat``, ``num_nodes``), ``meta_info``, ``num_classes``,
    ``get_idx_split()``. ``meta_dict`` is OGB's (``dir_path``, ``split``, ``add_inverse_edge``, ...)."""

    def __init__(self, name: str, meta_dict: dict) -> None:
        if meta_dict.get("binary") == "True" or meta_dict.get("is hetero") == "True":
            raise ValueError(f"{name}: reading a binary or heterogeneous layout needs the ogb package; "
                             f"expected a homogeneous CSV layout, got binary={meta_dict.get('binary')!r}, "
                             f"is hetero={meta_dict.get('is hetero')!r}")
        self.name = name
        self.meta_info = meta_dict
        self.root = Path(meta_dict["dir_path"])
        self.num_classes = int(meta_dict["num classes"])
        raw = self.root / "raw"
        if not (raw / "edge.csv.gz").exists():
            raise FileNotFoundError(f"{name}: {raw / 'edge.csv.gz'} is missing")
        edge = _read_csv(raw / "edge.csv.gz").T.astype(np.int64)
        num_nodes = _read_csv(raw / "num-node-list.csv.gz").astype(np.int64)[:, 0].tolist()
        num_edges = _read_csv(raw / "num-edge-list.csv.gz").astype(np.int64)[:, 0].tolist()
        if len(num_nodes) != 1 or len(num_edges) != 1:
            raise ValueError(f"{name}: expected one graph in {raw}, got {len(num_nodes)} node counts and "
                             f"{len(num_edges)} edge counts")
        edge = edge[:, :num_edges[0]]  # as OGB: the declared count slices (the checks compare it)
        if meta_dict["add_inverse_edge"] == "True":
            both = np.repeat(edge, 2, axis=1)
            both[0, 1::2] = both[1, 0::2]
            both[1, 1::2] = both[0, 0::2]
            edge = both
        features_path = raw / "node-feat.csv.gz"
        features = _int_or_float(_read_csv(features_path))[:num_nodes[0]] if features_path.exists() else None
        self.graph = {"edge_index": edge, "node_feat": features, "edge_feat": None, "num_nodes": num_nodes[0]}
        self.labels = _read_csv(raw / "node-label.csv.gz")

    def get_idx_split(self) -> dict:
        split_dir = self.root / "split" / self.meta_info["split"]
        return {part: _read_csv(split_dir / f"{part}.csv.gz").T[0] for part in ("train", "valid", "test")}

    def __getitem__(self, idx: int):
        if idx != 0:
            raise IndexError(f"{self.name} has one graph; got index {idx}")
        return self.graph, self.labels
