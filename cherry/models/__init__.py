"""GNN models on `Blocks`: GraphSAGE (mean, pool, lstm), GCN, GAT, and an MLP baseline.

Every model is called as ``model(blocks, x) -> logits [blocks.num_seeds, num_classes]`` with ``x`` the
features of ``blocks.input_nodes`` in order. Each destination's output depends only on its own input row
and its own in-edges (in order), so logits computed on sliced micro-batch blocks equal the full batch's.
"""
from cherry.models.base import BlockModel, count_parameters
from cherry.models.build import build_model
from cherry.models.gat import GATConv
from cherry.models.gcn import GCNConv
from cherry.models.mlp import MLP
from cherry.models.lstm_steps import lstm_aggregate_steps
from cherry.models.sage import SAGEConv, lstm_aggregate, lstm_aggregate_bucketed, reads_degree_layouts
from cherry.models.dropout import NodeDropout
from cherry.models.exact_dropout import ExactDropout, node_rows
from cherry.models.registry import known_models, register_model
from cherry.models.spec import MODELS, SAGE_AGGREGATORS, LayerDims, ModelSpec

__all__ = [
    "MODELS",
    "SAGE_AGGREGATORS",
    "BlockModel",
    "ExactDropout",
    "GATConv",
    "GCNConv",
    "LayerDims",
    "MLP",
    "ModelSpec",
    "NodeDropout",
    "SAGEConv",
    "build_model",
    "count_parameters",
    "known_models",
    "register_model",
    "lstm_aggregate",
    "node_rows",
    "lstm_aggregate_bucketed",
    "lstm_aggregate_steps",
    "reads_degree_layouts",
]
