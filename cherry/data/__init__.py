"""Dataset layer: CSC graphs, OGB loaders, generated OGB-format datasets, checksummed cache.

``load_dataset(name)`` returns a `Dataset` for any name in `DATASET_NAMES`, preparing it on first
use (generated names are written in OGB's layout and read back through OGB's loader; real OGB names
are read from files the user places under ``<root>/<ogbn_name>``). Data is validated when prepared
(`cherry.data.checks`) and checked against the cache's manifest when loaded; `verify_dataset` checks
a cache in full. See `cherry.data.datasets`. A user's data: `Dataset.from_arrays`, any directory in
OGB's layout by its path, and `register_dataset` (`cherry.data.sources`).
"""
from cherry.data.datasets import dataset_dir
from cherry.data.graph import Dataset, Graph
from cherry.data.registry import DATASET_NAMES, default_root
from cherry.data.sources import (dataset_info, load_dataset, prepare_dataset, register_dataset,
                                 registered_datasets, verify_dataset)

__all__ = [
    "DATASET_NAMES",
    "Dataset",
    "Graph",
    "dataset_dir",
    "dataset_info",
    "default_root",
    "load_dataset",
    "prepare_dataset",
    "register_dataset",
    "registered_datasets",
    "verify_dataset",
]
