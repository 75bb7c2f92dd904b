"""Models the analytic memory model does not know, priced by probes (`cherry.execution.memory_probe`).

For `cherry bench budget` and the tests of memory control on users' models:
- ``gin-layer``: a registered layer (`cherry.models.register_model`, GIN: an MLP of the node's row plus
  the sum of its in-neighbours'), stacked by Cherry, with the spec's input dropout;
- ``dgl-gat``: ``dgl.nn.GATConv`` with 4 heads (one head at the last layer) through `cherry.interop.from_dgl`;
- ``dgl-sage-pool``: ``dgl.nn.SAGEConv`` with the pool aggregator (an ``in x in`` pool weight) through ``from_dgl``;
- ``pyg-gat``: ``torch_geometric.nn.GATConv`` in the per-hop bipartite form through `cherry.interop.from_pyg`.
The DGL and PyG models apply ``nn.Dropout`` to their input rows (the exactness guard makes it exact).
`available` says whether a model's library imports here; its rows and tests skip where it does not.
"""
from __future__ import annotations

import importlib.util

import torch
from torch import nn
from torch.nn import functional as F

USER_MODELS = ("gin-layer", "dgl-gat", "dgl-sage-pool", "pyg-gat")
GIN_NAME = "bench-gin"  # the registered name of the GIN layer
HEADS = 4


def available(name: str) -> tuple[bool, str]:
    """``(True, "")`` when model ``name``'s library imports here, else ``(False, why)``."""
    if name not in USER_MODELS:
        raise ValueError(f"user model must be one of {USER_MODELS}, got {name!r}")
    if name.startswith("dgl-"):
        from cherry.compat import dgl_available

        ok, reason = dgl_available()
        return (True, "") if ok else (False, f"DGL does not import: {reason}")
    if name.startswith("pyg-") and importlib.util.find_spec("torch_geometric") is None:
        return False, "torch_geometric is not installed"
    return True, ""


class GINLayer(nn.Module):
    """GIN: ``MLP(h_dst + sum of in-neighbours' rows)``, a layer as `register_model` takes it."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))

    def forward(self, block, h):
        from cherry.ops import aggregate_block

        return self.mlp(h[: block.num_dst] + aggregate_block(block, h, "sum"))


def register_gin() -> str:
    """Register the GIN layer (idempotent; a spawned worker registers it again) and return its name."""
    from cherry.models import register_model

    register_model(GIN_NAME, layer=_gin_layer, replace=True)
    return GIN_NAME


def _gin_layer(dims) -> nn.Module:
    return GINLayer(dims.in_dim, dims.out_dim)


def _dims(in_dim: int, hidden: int, classes: int, num_layers: int) -> list[tuple[int, int]]:
    widths = [in_dim] + [hidden] * (num_layers - 1) + [classes]
    return list(zip(widths[:-1], widths[1:]))


class _DGLStack(nn.Module):
    """``model(dgl_blocks, x)``: input dropout, then the layers with ELU between them."""

    def __init__(self, layers: list[nn.Module], input_dropout: float) -> None:
        super().__init__()
        self.drop = nn.Dropout(input_dropout)
        self.layers = nn.ModuleList(layers)

    def forward(self, blocks, x):
        h = self.drop(x)
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            h = layer(block, h)
            h = h.flatten(1) if i < len(self.layers) - 1 else (h.mean(1) if h.dim() == 3 else h)
            if i < len(self.layers) - 1:
                h = F.elu(h)
        return h


class _PyGGAT(nn.Module):
    """``model(x, adjs)`` of PyG GATConv layers in the per-hop bipartite form, input dropout first."""

    def __init__(self, dims: list[tuple[int, int]], input_dropout: float) -> None:
        super().__init__()
        from torch_geometric.nn import GATConv

        self.drop = nn.Dropout(input_dropout)
        last = len(dims) - 1
        self.layers = nn.ModuleList([
            GATConv(a, b if i == last else b // HEADS, heads=1 if i == last else HEADS, add_self_loops=False)
            for i, (a, b) in enumerate(dims)])

    def forward(self, x, adjs):
        h = self.drop(x)
        for i, (layer, (edge_index, _, size)) in enumerate(zip(self.layers, adjs)):
            h = layer((h, h[: size[1]]), edge_index)
            if i < len(self.layers) - 1:
                h = F.elu(h)
        return h


def build_user_model(name: str, in_dim: int, hidden: int, classes: int, num_layers: int,
                     input_dropout: float) -> nn.Module:
    """The DGL or PyG model ``name`` wrapped for Cherry (``gin-layer`` is built from its spec instead:
    `register_gin`). ``hidden`` must be a multiple of `HEADS` for the GATs."""
    ok, why = available(name)
    if not ok:
        raise RuntimeError(f"user model {name!r} is not available here: {why}")
    dims = _dims(in_dim, hidden, classes, num_layers)
    if name == "pyg-gat":
        from cherry.interop import from_pyg

        return from_pyg(_PyGGAT(dims, input_dropout))
    from cherry.compat import import_dgl
    from cherry.interop import from_dgl

    dglnn = import_dgl().nn
    last = len(dims) - 1
    if name == "dgl-gat":
        layers = [dglnn.GATConv(a, b if i == last else b // HEADS, 1 if i == last else HEADS,
                                allow_zero_in_degree=True) for i, (a, b) in enumerate(dims)]
    elif name == "dgl-sage-pool":
        layers = [dglnn.SAGEConv(a, b, "pool") for a, b in dims]
    else:
        raise ValueError(f"{name!r} is a registered layer: build it from its spec (register_gin)")
    return from_dgl(_DGLStack(layers, input_dropout))


def seeded_user_model(name: str, seed: int, *args) -> nn.Module:
    """`build_user_model` under ``torch.manual_seed(seed)`` (the same weights in every process),
    leaving torch's global random state as it was."""
    state = torch.get_rng_state()
    try:
        torch.manual_seed(seed)
        return build_user_model(name, *args)
    finally:
        torch.set_rng_state(state)
