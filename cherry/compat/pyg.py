"""Whether PyTorch Geometric's sampling works on this install.

PyG's ``nn`` layers (SAGEConv incl. ``aggr='lstm'``, GATConv, GCNConv) run on torch's own scatter ops
and need nothing extra. ``NeighborLoader`` fails at its first batch unless ``pyg-lib`` (not on PyPI)
or ``torch-sparse`` (source-only; ``MAX_JOBS=2 pip install --no-build-isolation torch-scatter
torch-sparse``, about 15 minutes) imports. The check reads PyG's own import-time flags, so it agrees
with the branch ``NeighborSampler`` takes; it samples nothing.
"""
from __future__ import annotations

import torch

def pyg_available() -> tuple[bool, str]:
    """(True, version) when ``torch_geometric`` imports (its nn layers then work); never raises."""
    try:
        import torch_geometric
    except Exception as exc:  # any import failure is reported, not raised
        return False, f"torch_geometric cannot be imported: {type(exc).__name__}: {exc}".splitlines()[0]
    return True, f"torch_geometric {torch_geometric.__version__}"


def pyg_sampling_available() -> tuple[bool, str]:
    """(True, backend) when pyg-lib or torch-sparse makes ``NeighborLoader`` work; (False, reason) else.

    Never raises. The reason names the missing packages and how to get one.
    """
    ok, reason = pyg_available()
    if not ok:
        return False, reason
    import torch_geometric.typing as pyg_typing

    if getattr(pyg_typing, "WITH_PYG_LIB", False):
        return True, "pyg-lib"
    if getattr(pyg_typing, "WITH_TORCH_SPARSE", False):
        return True, "torch-sparse"
    return False, (
        "NeighborLoader needs pyg-lib or torch-sparse, neither imports "
        "(install: MAX_JOBS=2 pip install --no-build-isolation torch-scatter torch-sparse)"
    )


def pyg_data(graph):
    """A ``torch_geometric.data.Data`` holding only the edges of a Cherry CSC `Graph` (sorted by
    destination, which lets PyG build its CSC without sorting)."""
    from torch_geometric.data import Data

    dst = torch.repeat_interleave(torch.arange(graph.num_nodes), graph.in_degrees())
    return Data(edge_index=torch.stack([graph.indices, dst]), num_nodes=graph.num_nodes)
