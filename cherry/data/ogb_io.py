"""OGB's on-disk layout: write generated datasets into it, read any dataset through OGB's own loader.

`read_ogb` reads through ``ogb.nodeproppred.NodePropPredDataset`` (real datasets; generated layouts
too when asked, as the tests do). `cherry data prepare` reads generated layouts, and real CSV datasets
whose raw files are present (`real_csv_meta_dict`), in bounded memory with `cherry.data.bounded`
instead, which gives the same cache bytes. OGB may prompt (``input()``) when ``RELEASE_v1.txt`` is missing and may try to download
when raw files are missing; both would hang or crash a batch job, so `check_ogb_files` runs first and
`read_ogb` additionally disables OGB's download and prompt while it runs. OGB's own console output is
captured (the data layer never prints). OGB's loader unpickles its cached ``processed/`` files itself,
and while it runs its ``torch.load`` is `cherry.safe_load.load_arrays` (tensors and numeric numpy
arrays only), so a crafted file is refused in one line and runs no code.

What OGB's loader lets through is checked here. A file it cannot read (truncated or corrupt gzip,
unparsable CSV) is named in a one-line ValueError. It is found by re-reading each input file only
after the loader failed, so a good dataset pays nothing. The arrays the loader returns must pass
`cherry.data.checks` (one feature row and label per node, the declared edge count, finite features,
labels in range, disjoint in-range splits), since OGB silently slices a short file.

``ogb.nodeproppred``'s package ``__init__`` also imports PyG, scikit-learn and (failing on this torch)
DGL, which costs seconds and leaves half-imported DGL modules behind; `_ogb_dataset_module` therefore
loads OGB's ``nodeproppred/dataset.py`` source file on its own (the same class, unmodified), unless
the package is already imported.

Without the ``ogb`` package (the GPU machine has none) generated datasets are read by
`cherry.data.ogb_csv_reader.CsvLayoutDataset`, which parses the same files into the same arrays, and
pass the same checks; real OGB datasets then raise a one-line ModuleNotFoundError.
"""
from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.util
import io
import sys
import warnings
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from cherry.data import checks
from cherry.data.checks import SPLITS, UNLABELLED
from cherry.data.ogb_files import check_edge_rows, declared_edges, source_files, unreadable_error
from cherry.data.ogb_csv import format_int_rows, format_sixteenths, write_csv_gz_blocks
from cherry.data.registry import OGB_SPECS, SynthSpec
from cherry.data.synthetic import SynthArrays

SYNTH_SPLIT = "random"
_OGB_URL = "http://snap.stanford.edu/ogb/data/nodeproppred/{}.zip"
_REAL_LAYOUT = {  # download name, split name, binary, additional node files
    "ogbn-arxiv": ("arxiv", "time", False, ["node_year"]),
    "ogbn-products": ("products", "sales_ranking", False, []),
    "ogbn-papers100M": ("papers100M-bin", "time", True, []),
}
Progress = Optional[Callable[[str, float], None]]


def synth_meta_dict(directory: Path, spec: SynthSpec) -> dict:
    """The ``meta_dict`` that makes OGB read a generated dataset from ``directory``."""
    return {
        "dir_path": str(directory), "version": 1, "download_name": directory.name, "url": "",
        "num tasks": 1, "num classes": spec.num_classes, "eval metric": "acc",
        "task type": "multiclass classification",
        "add_inverse_edge": "True",  # stored once per undirected edge; OGB adds the reverse
        "has_node_attr": "True", "has_edge_attr": "False", "split": SYNTH_SPLIT,
        "additional node files": "None", "additional edge files": "None",
        "is hetero": "False", "binary": "False",
    }


def write_synth_layout(directory: Path, arrays: SynthArrays, progress: Progress = None) -> None:
    """Write ``arrays`` under ``directory`` in OGB's CSV layout (directory must be new or empty)."""
    write_synth_layout_blocks(directory, arrays.labels, [arrays.edges], [arrays.features],
                              (arrays.train_idx, arrays.valid_idx, arrays.test_idx),
                              num_edges=arrays.edges.shape[0], feature_dim=arrays.features.shape[1],
                              progress=progress)


def write_synth_layout_blocks(directory: Path, labels: np.ndarray, edge_blocks, feature_blocks, splits,
                              *, num_edges: int, feature_dim: int, progress: Progress = None) -> None:
    """`write_synth_layout` from per-node ``labels``, the (train, valid, test) ``splits`` and
    iterables of ``[k, 2]`` edge and ``[k, F]`` feature blocks (never held whole); the same bytes as
    writing the concatenated arrays."""
    directory = Path(directory)
    (directory / "raw").mkdir(parents=True, exist_ok=True)
    (directory / "processed").mkdir(exist_ok=True)
    split_dir = directory / "split" / SYNTH_SPLIT
    split_dir.mkdir(parents=True, exist_ok=True)
    n = labels.shape[0]
    train_idx, valid_idx, test_idx = splits
    files = [
        ("raw/num-node-list.csv.gz", [np.array([[n]])], 1, 1, format_int_rows),
        ("raw/num-edge-list.csv.gz", [np.array([[num_edges]])], 1, 1, format_int_rows),
        ("raw/node-label.csv.gz", [labels[:, None]], 1, n, format_int_rows),
        ("raw/edge.csv.gz", edge_blocks, 2, num_edges, format_int_rows),
        ("raw/node-feat.csv.gz", feature_blocks, feature_dim, n, format_sixteenths),
        (f"split/{SYNTH_SPLIT}/train.csv.gz", [train_idx[:, None]], 1, train_idx.size, format_int_rows),
        (f"split/{SYNTH_SPLIT}/valid.csv.gz", [valid_idx[:, None]], 1, valid_idx.size, format_int_rows),
        (f"split/{SYNTH_SPLIT}/test.csv.gz", [test_idx[:, None]], 1, test_idx.size, format_int_rows),
    ]
    for rel, blocks, columns, rows, formatter in files:
        stage = f"writing {rel}"
        cb = None if progress is None else (lambda frac, stage=stage: progress(stage, frac))
        write_csv_gz_blocks(directory / rel, blocks, columns, formatter, total_rows=rows, progress=cb)
    # Last, so an OGB directory that has its release marker is complete.
    (directory / "RELEASE_v1.txt").write_text("Generated by cherry.data.synthetic in OGB's layout (v1).\n")


def real_dir_hint(name: str, directory: Path) -> str:
    download, _, _, _ = _REAL_LAYOUT[name]
    return f"populate {directory} with the contents of OGB's {download}.zip ({_OGB_URL.format(download)})"


def real_csv_meta_dict(name: str, directory: Path) -> dict | None:
    """OGB's ``meta_dict`` of a real CSV dataset (ogbn-arxiv, ogbn-products) whose raw and split CSV
    files are all in ``directory`` (what `cherry.data.bounded.convert_layout` reads, without the ``ogb``
    package); None for the binary layout or where a raw file is missing (OGB's loader then reads its
    ``processed/`` file, or says what is missing)."""
    if name not in _REAL_LAYOUT:
        raise ValueError(f"{name!r} is not a real OGB dataset; expected one of {', '.join(OGB_SPECS)}")
    _, split, binary, extra = _REAL_LAYOUT[name]
    if binary:
        return None
    files = source_files(Path(directory), split, False, extra, raw_only=True)
    if not all(p.is_file() for k, v in files.items() for p in (v if k == "extra" else (v,))):
        return None
    return {"dir_path": str(directory), "num classes": OGB_SPECS[name].num_classes, "split": split,
            "add_inverse_edge": "True" if name == "ogbn-products" else "False",  # OGB's master.csv
            "additional node files": ",".join(extra) or "None", "is hetero": "False", "binary": "False"}


def real_npz_streamable(name: str, directory: Path) -> bool:
    """Whether the real binary dataset ``name`` (ogbn-papers100M) can be streamed from ``directory`` as
    `cherry.data.ogb_dir` streams an npz layout by path, giving what OGB's loader gives: its raw npz
    files and split CSV files present (no ``split_dict.pt``, one split directory), one graph whose
    declared counts equal the arrays' rows (OGB slices to them; the stream reads every row)."""
    from cherry.data import npz_stream

    _, split, binary, _ = _REAL_LAYOUT[name]
    directory = Path(directory)
    raw, split_root = directory / "raw", directory / "split"
    if not binary or not ((raw / "data.npz").is_file() and (raw / "node-label.npz").is_file()):
        return False
    if sorted(p.name for p in split_root.iterdir() if p.is_dir()) != [split] or \
            (split_root / split / "split_dict.pt").exists() or \
            not all((split_root / split / f"{s}.csv.gz").is_file() for s in SPLITS):
        return False
    try:
        with np.load(raw / "data.npz") as npz:
            nodes, edges = (np.asarray(npz[k]).reshape(-1) for k in ("num_nodes_list", "num_edges_list"))
        with np.load(raw / "node-label.npz") as npz:
            if npz.files != ["node_label"]:
                return False
        edge_shape = npz_stream.header(raw / "data.npz", "edge_index")[0]
        feat_shape = npz_stream.header(raw / "data.npz", "node_feat")[0]
    except (KeyError, ValueError, OSError):  # OGB's loader reads it, or names what is wrong
        return False
    return (nodes.size == 1 and edges.size == 1 and tuple(edge_shape) == (2, int(edges[0]))
            and len(feat_shape) == 2 and feat_shape[0] == int(nodes[0]))


def check_ogb_files(name: str, directory: Path) -> None:
    """Raise FileNotFoundError (one line, naming ``directory``) if a real OGB dataset is incomplete."""
    if name not in _REAL_LAYOUT:
        raise ValueError(f"{name!r} is not a real OGB dataset; expected one of {', '.join(OGB_SPECS)}")
    directory = Path(directory)
    _, split, binary, extra = _REAL_LAYOUT[name]
    required = ["RELEASE_v1.txt"]
    if not (directory / "processed" / "data_processed").exists():
        raw = ["raw/data.npz", "raw/node-label.npz"] if binary else [
            "raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz",
            "raw/node-feat.csv.gz", "raw/node-label.csv.gz"] + [f"raw/{f}.csv.gz" for f in extra]
        required += raw
    if not (directory / "split" / split / "split_dict.pt").exists():
        required += [f"split/{split}/{part}.csv.gz" for part in ("train", "valid", "test")]
    if not directory.is_dir():
        raise FileNotFoundError(f"{name} is not available offline: {real_dir_hint(name, directory)}; "
                                "that directory does not exist")
    missing = [rel for rel in required if not (directory / rel).exists()]
    if missing:
        raise FileNotFoundError(
            f"{name} is not available offline: {real_dir_hint(name, directory)}; "
            f"missing {', '.join(missing)}"
        )


def _refuse_download(*_args, **_kwargs):
    raise FileNotFoundError("OGB tried to download a dataset; Cherry reads local files only")


def _refuse_prompt(*_args, **_kwargs):
    raise FileNotFoundError("OGB asked an interactive question; its RELEASE_v1.txt is missing")


def ogb_available() -> bool:
    """Whether the ``ogb`` package can be imported here."""
    return _ogb_dataset_module() is not None


def _ogb_dataset_module():
    """The module defining ``NodePropPredDataset`` (see the module docstring for why standalone), or
    None without the ``ogb`` package."""
    if "ogb.nodeproppred.dataset" in sys.modules:
        return sys.modules["ogb.nodeproppred.dataset"]
    alias = "cherry.data._ogb_nodeproppred_dataset"
    if alias in sys.modules:
        return sys.modules[alias]
    try:
        import ogb
    except ImportError:
        return None
    try:
        path = Path(ogb.__file__).parent / "nodeproppred" / "dataset.py"
        spec = importlib.util.spec_from_file_location(alias, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception:  # an OGB release with relative imports: fall back to the package import
        return importlib.import_module("ogb.nodeproppred.dataset")
    sys.modules[alias] = module
    return module


@contextlib.contextmanager
def _ogb_guard():
    ogb_dataset = _ogb_dataset_module()
    if ogb_dataset is None:  # our own reader neither prompts nor downloads; OGB's output is not there
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
        return
    from cherry.safe_load import data_only_torch

    saved_download, saved_input, saved_torch = ogb_dataset.decide_download, builtins.input, ogb_dataset.torch
    sink = io.StringIO()
    ogb_dataset.decide_download, builtins.input = _refuse_download, _refuse_prompt
    ogb_dataset.torch = data_only_torch()  # its torch.load of the processed files: data only
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        ogb_dataset.decide_download, builtins.input, ogb_dataset.torch = saved_download, saved_input, saved_torch


def _source_files(name: str, directory: Path, meta_dict: dict | None) -> dict[str, Path]:
    if meta_dict is None:
        _, split, binary, extra = _REAL_LAYOUT[name]
    else:
        split, binary = meta_dict["split"], meta_dict["binary"] == "True"
        listed = meta_dict["additional node files"]
        extra = [] if listed == "None" else listed.split(",")
    return source_files(Path(directory), split, binary, extra)


def _as_int64(values, path: Path, what: str) -> np.ndarray:
    """``values`` (one column) as int64 through `cherry.data.values`: a fractional, huge or textual
    value is refused, not cast; a missing (NaN) label is `UNLABELLED`."""
    from cherry.data.values import integer_column

    return integer_column(values, what, str(path), missing=UNLABELLED if what == "label" else None,
                          source=Path(path))


def read_ogb(name: str, directory: Path, meta_dict: dict | None = None) -> dict:
    """Read a node-property dataset with OGB's loader (generated data without OGB: `CsvLayoutDataset`,
    the same arrays); return validated numpy arrays.

    Returns ``edge_index`` ([2, E] int64, with reverse edges if the dataset's ``add_inverse_edge``),
    ``features`` (float32), ``labels`` (int64, -1 where OGB has NaN: unlabelled), ``train_idx``,
    ``valid_idx``, ``test_idx`` (int64), ``num_nodes``, ``num_classes``, ``inverse_added`` (bool).
    For a real name ``directory`` is ``<root>/<ogbn_name>``; for generated data pass ``meta_dict``.
    A file OGB cannot read, or data breaking `cherry.data.checks`, raises a one-line ValueError naming
    the file; OGB's ``processed/data_processed`` is then removed again if this call wrote it, so a
    repaired raw file is read afresh next time.
    """
    module = _ogb_dataset_module()
    if module is None and meta_dict is None:
        raise ModuleNotFoundError(f"reading the real dataset {name} needs the ogb package (pip install ogb); "
                                  "generated datasets are read without it")
    NodePropPredDataset = module.NodePropPredDataset if module is not None else None
    directory = Path(directory)
    if meta_dict is None:
        check_ogb_files(name, directory)
    (directory / "processed").mkdir(exist_ok=True)  # OGB saves there and fails if it is absent
    processed = directory / "processed" / "data_processed"
    wrote_processed = not processed.exists()
    files = _source_files(name, directory, meta_dict)
    try:
        with _ogb_guard():
            try:
                if meta_dict is None:
                    ds = NodePropPredDataset(name, root=str(directory.parent))
                elif NodePropPredDataset is None:
                    from cherry.data.ogb_csv_reader import CsvLayoutDataset

                    ds = CsvLayoutDataset(name, meta_dict)
                else:
                    ds = NodePropPredDataset(name, meta_dict=meta_dict)
                split = ds.get_idx_split()
            except FileNotFoundError:
                raise
            except Exception as exc:
                raise unreadable_error(directory, files, exc) from None
        declared = declared_edges(files)
        read = _validated(ds, split, files, declared)  # OGB parsed that file already
        if declared is not None and meta_dict is None:  # a user's raw files (generated ones are ours)
            check_edge_rows(files["edges"], declared)
    except BaseException:
        if wrote_processed:
            processed.unlink(missing_ok=True)
        raise
    return read


def _validated(ds, split: dict, files: dict, declared_edges: int | None) -> dict:
    graph, labels = ds[0]
    n = int(graph["num_nodes"])
    inverse_added = ds.meta_info["add_inverse_edge"] == "True"
    labels = _as_int64(labels, files["labels"], "label")
    if labels.dtype.kind == "f":
        labels = np.where(np.isnan(labels), UNLABELLED, labels)
    read = {
        "edge_index": np.asarray(graph["edge_index"], dtype=np.int64),
        "features": np.asarray(graph["node_feat"], dtype=np.float32),
        "labels": labels.astype(np.int64),
        **{f"{s}_idx": _as_int64(split[s], files[s], "node id").astype(np.int64) for s in SPLITS},
        "num_nodes": n, "num_classes": int(ds.num_classes), "inverse_added": inverse_added,
    }
    if declared_edges is not None:
        declared_edges *= 2 if inverse_added else 1
    checks.check_edges(read["edge_index"], n, declared_edges, where=str(files["edges"]))
    checks.check_features(read["features"], n, where=str(files["features"]))
    checks.check_labels(read["labels"], n, read["num_classes"], where=str(files["labels"]))
    checks.check_splits({s: read[f"{s}_idx"] for s in SPLITS}, n, read["labels"],
                        where={s: str(files[s]) for s in SPLITS})
    return read
