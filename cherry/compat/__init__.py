"""Compatibility shims that make the baselines' libraries usable on this torch.

- `cherry.compat.dgl`: `import_dgl()`, `dgl_available()` (DGL 2.1.0 on torch newer than 2.2.1).
- `cherry.compat.pyg`: `pyg_available()`, `pyg_sampling_available()` (NeighborLoader needs pyg-lib or
  torch-sparse; PyG's nn layers work without them).

Importing this package imports neither DGL nor PyG.
"""
from cherry.compat.dgl import dgl_available, import_dgl
from cherry.compat.pyg import pyg_available, pyg_sampling_available

__all__ = ["dgl_available", "import_dgl", "pyg_available", "pyg_sampling_available"]
