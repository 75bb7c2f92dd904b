"""Stock PyG mini-batch training (``NeighborLoader`` + ``torch_geometric.nn`` layers).

``SYSTEM`` is the `cherry.systems.contract.System` subclass the runner builds. Its constructor raises
``SystemUnavailable`` when PyG's sampler has no backend (pyg-lib or torch-sparse).
"""
from baselines.pyg.system import PygSystem

SYSTEM = PygSystem

__all__ = ["PygSystem", "SYSTEM"]
