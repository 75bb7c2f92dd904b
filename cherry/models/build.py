"""`build_model`: a `ModelSpec` -> the ``nn.Module`` it describes (one layer per `LayerDims`)."""
from __future__ import annotations

from torch import nn

from cherry.models.base import BlockModel
from cherry.models.gat import GATConv
from cherry.models.gcn import GCNConv
from cherry.models.mlp import MLP
from cherry.models.sage import SAGEConv
from cherry.models.registry import registered_builder
from cherry.models.spec import ModelSpec


def build_model(spec: ModelSpec) -> nn.Module:
    """Build the model of ``spec``; parameters are drawn from torch's global RNG (seed it to reproduce).

    Every returned model is called as ``model(blocks, x) -> [blocks.num_seeds, spec.num_classes]``.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec must be a ModelSpec, got {type(spec).__name__}")
    if spec.model == "mlp":
        return MLP(spec)
    if spec.model not in ("sage", "gcn", "gat"):
        return build_registered(spec)
    layers: list[nn.Module] = []
    for dims in spec.layer_dims():
        if spec.model == "sage":
            layers.append(SAGEConv(dims.in_dim, dims.out_dim, spec.aggr, spec.lstm_impl))
        elif spec.model == "gcn":
            layers.append(GCNConv(dims.in_dim, dims.out_dim))
        else:
            layers.append(GATConv(dims.in_dim, dims.head_dim, dims.heads, concat=not dims.is_last))
    return BlockModel(spec, layers)


def build_registered(spec) -> nn.Module:
    """The module of registered model ``spec.model`` (a `cherry.models.ModelSpec`)."""
    kind, factory = registered_builder(spec.model)
    if kind == "layer":
        layers = [factory(dims) for dims in spec.layer_dims()]
        for i, layer in enumerate(layers):
            if not isinstance(layer, nn.Module):
                raise TypeError(f"the layer factory of model {spec.model!r} returned {type(layer).__name__} for "
                                f"layer {i}; expected a torch.nn.Module called as layer(block, h)")
        return BlockModel(spec, layers)
    model = factory(spec)
    if not isinstance(model, nn.Module):
        raise TypeError(f"the builder of model {spec.model!r} returned {type(model).__name__}; expected a "
                        "torch.nn.Module called as model(blocks, x)")
    return model
