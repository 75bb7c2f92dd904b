"""Stock DGL mini-batch training (``dgl.dataloading.NeighborSampler`` + ``dgl.nn`` layers).

``SYSTEM`` is the `cherry.systems.contract.System` subclass the runner builds. Importing this package
does not import DGL; the constructor does, and raises ``SystemUnavailable`` when it cannot.
"""
from baselines.dgl.system import DglSystem

SYSTEM = DglSystem

__all__ = ["DglSystem", "SYSTEM"]
