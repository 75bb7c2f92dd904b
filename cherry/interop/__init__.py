"""Users' DGL and PyG models under Cherry's micro-batching executor, exactly.

- `from_dgl(model)`: a model of ``dgl.nn`` layers called as ``model(blocks, x)`` on a list of DGL blocks
  (DGL's ``dgl.dataloading`` form). Each Cherry `Block` becomes a DGL block with the same CSC adjacency
  (``dgl.create_block(("csc", ...))``, edges in Cherry's order), the destination nodes first.
- `from_pyg(model)`: a model of PyG layers in the per-hop bipartite form of PyG's
  ``NeighborSampler`` examples, called as ``model(x, adjs)`` with ``adjs[l] = (edge_index, e_id, size)``
  for layer ``l`` (input layer first), ``edge_index`` local ``[2, E]`` (row 0 sources, row 1
  destinations), ``size = (num_src, num_dst)`` and the destinations the first ``num_dst`` rows of ``x``.
  Not supported: ``forward(x, edge_index)`` over one sampled subgraph (``NeighborLoader``), whose layers
  all read the union of every hop's edges: restricted to a micro-batch's seeds that union loses edges
  other seeds' hops contributed, so the micro-batch would not compute the whole batch's function.

Both wrappers are ``nn.Module`` s with the user's model as ``.inner`` (its parameters are theirs), called
as ``wrapper(blocks, x)`` like every Cherry model, so `Trainer(dataset, spec, model=wrapper)`,
`check_exact` and the executor take them. Their ``nn.Dropout`` s are made exact by the guard: a
dropout's rows are identified by their count (every layer's source and destination counts are prefixes
of the input nodes), `cherry.models.exact_dropout`. BatchNorm in training mode is refused. Their
``input_layer()`` names the first stock layer's input projections, so the streamed input layer can
stream it (`cherry.interop.projections`).
"""
from cherry.interop.dgl import DGLModel, from_dgl, to_dgl_blocks
from cherry.interop.pyg import PyGModel, from_pyg, to_pyg_adjs

__all__ = ["DGLModel", "PyGModel", "from_dgl", "from_pyg", "to_dgl_blocks", "to_pyg_adjs"]
