"""Dataset layer: CSC graphs, OGB loaders, generated OGB-format datasets, checksummed cache."""
from cherry.data.graph import Dataset, Graph

__all__ = ["Dataset", "Graph"]
