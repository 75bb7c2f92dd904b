"""The input projections of a DGL or PyG model's first stock layer, for the streamed input layer.

`cherry.execution.stream` streams a first layer that maps its input rows to a narrower width. An
adapted model (`from_dgl`, `from_pyg`) has no layer contract, so its adapter names that layer here:
the first module of the user's model from ``dgl.nn`` or ``torch_geometric.nn``, taken where the stock
module's forward is known (the versions in this environment: DGL 2.1, PyG 2.8) and its projection
narrows. The streamed wrapper checks at run time that this module is what reads the model's input.

- DGL ``GraphConv`` with ``in_feats > out_feats``: ``weight`` (``[in, out]``), applied by a matmul to
  all source rows before aggregation (``matmul``: the module then runs on ``P`` with its weight hidden,
  the same function since a row scaling and a sum commute with it).
- DGL ``GATConv`` (one ``fc``, no input dropout): ``fc`` on the source rows; a linear residual
  ``res_fc`` on the destination rows.
- DGL ``SAGEConv`` mean with ``in > out`` (no input dropout): ``fc_neigh`` (applied before
  aggregation there) on the source rows, ``fc_self`` on the destination rows.
- PyG ``GCNConv``: ``lin`` on the rows it is called with. PyG ``GATConv``: ``lin`` (or ``lin_src`` and
  ``lin_dst``) on the source and destination rows; no residual.

Declined, with the reason: PyG ``SAGEConv`` (``lin_l`` runs after propagation, which would read every
input row), other aggregators and modules, an input dropout inside the layer, a projection that does
not narrow.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import nn

_STOCK_PREFIXES = ("dgl.nn.", "torch_geometric.nn.conv")


@dataclass(frozen=True)
class InputLayer:
    """Layer 0 of an adapted model: ``module``, its projections ``{child name: "src" | "dst"}`` (each
    child has a ``[out, in]`` ``weight`` and an optional ``bias``), or ``matmul``: the name of a
    ``[in, out]`` parameter the module multiplies all its source rows by."""

    module: nn.Module
    label: str
    projections: dict = field(default_factory=dict)
    matmul: Optional[str] = None

    @property
    def width(self) -> int:
        """The input rows' width."""
        if self.matmul is not None:
            return int(getattr(self.module, self.matmul).shape[0])
        return int(getattr(self.module, next(iter(self.projections))).weight.shape[1])


def _stock(module: nn.Module) -> bool:
    return type(module).__module__.startswith(_STOCK_PREFIXES)


def _label(module: nn.Module) -> str:
    prefix = "dgl.nn" if type(module).__module__.startswith("dgl.") else "torch_geometric.nn"
    return f"{prefix}.{type(module).__name__}"


def _narrows(linear: Optional[nn.Module]) -> bool:
    weight = getattr(linear, "weight", None)
    return isinstance(weight, torch.Tensor) and not isinstance(weight, nn.parameter.UninitializedParameter) \
        and weight.dim() == 2 and weight.shape[0] < weight.shape[1]


def _no_input_dropout(module: nn.Module) -> bool:
    drop = getattr(module, "feat_drop", None)
    return drop is None or float(getattr(drop, "p", 0.0)) == 0.0


def _dgl(module: nn.Module) -> tuple[dict, Optional[str], str]:
    name = type(module).__name__
    if name == "GraphConv":
        weight = getattr(module, "weight", None)
        if weight is None or not module._in_feats > module._out_feats:
            return {}, None, "its weight does not narrow its rows (in_feats <= out_feats, or weight=False)"
        return {}, "weight", ""
    if not _no_input_dropout(module):
        return {}, None, "its feat_drop drops its input rows"
    if name == "GATConv":
        res = getattr(module, "res_fc", None)
        if not isinstance(getattr(module, "fc", None), nn.Linear) or not _narrows(module.fc):
            return {}, None, "no single fc narrowing its rows"
        if res is not None and not isinstance(res, nn.Linear):
            return {}, None, "its identity residual reads its input rows"
        return ({"fc": "src", "res_fc": "dst"} if res is not None else {"fc": "src"}), None, ""
    if name == "SAGEConv":
        if module._aggre_type != "mean" or not module._in_src_feats > module._out_feats:
            return {}, None, f"aggregator {module._aggre_type!r} (only 'mean' with in_feats > out_feats streams)"
        return {"fc_neigh": "src", "fc_self": "dst"}, None, ""
    return {}, None, "a module whose input projection is not known"


def _pyg(module: nn.Module) -> tuple[dict, Optional[str], str]:
    name = type(module).__name__
    if name == "GCNConv":
        return ({"lin": "src"}, None, "") if _narrows(module.lin) else ({}, None, "its lin does not narrow its rows")
    if name == "GATConv":
        if getattr(module, "res", None) is not None:
            return {}, None, "its residual reads its input rows"
        found = {"lin": "src"} if module.lin is not None else {"lin_src": "src", "lin_dst": "dst"}
        if not all(_narrows(getattr(module, n)) for n in found):
            return {}, None, "its lin does not narrow its rows"
        return found, None, ""
    if name == "SAGEConv":
        return {}, None, "lin_l runs after propagation, on aggregated input rows"
    return {}, None, "a module whose input projection is not known"


def first_stock_layer(model: nn.Module) -> Optional[nn.Module]:
    """The first module of ``model`` (registration order) from ``dgl.nn`` or ``torch_geometric.nn``."""
    return next((m for m in model.modules() if _stock(m) and m is not model), None)


def input_layer(model: nn.Module) -> tuple[Optional[InputLayer], str]:
    """``model``'s first stock layer as an `InputLayer` and its label, or None and the reason it does
    not stream (module docstring)."""
    module = first_stock_layer(model)
    if module is None:
        return None, f"{type(model).__name__} has no dgl.nn or torch_geometric.nn layer"
    label = _label(module)
    projections, matmul, why = (_dgl if label.startswith("dgl.") else _pyg)(module)
    if not projections and matmul is None:
        return None, f"{label}: {why}"
    return InputLayer(module, label, projections, matmul), label
