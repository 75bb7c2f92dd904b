"""`BlockModel`: a stack of graph layers run over `Blocks`, and `count_parameters`.

Interface shared by every model: ``model(blocks, x) -> logits [blocks.num_seeds, num_classes]``, where
``x`` is ``[blocks.layers[0].num_src, in_dim]``, the features of the input nodes in their order.

Each layer maps ``h [block.num_src, d_in]`` to ``[block.num_dst, d_out]``. The exactness invariant that
micro-batching relies on: a destination's output depends only on its own input row and on the rows of
its own in-edges in the block, in their order. So the logits of any subset of seeds computed from the
sub-blocks sliced for that subset equal the corresponding rows of the full batch's logits (no
BatchNorm). Dropout keeps it: `NodeDropout` draws each row's mask from the row's global node id, the
layer and the step seed, so a node's mask is the same in every micro-batch that holds it.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.models.dropout import NodeDropout
from cherry.models.exact_dropout import node_rows
from cherry.models.spec import ModelSpec
from cherry.sampling.blocks import Block, Blocks


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of scalar parameters of ``model`` (trainable ones only by default)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def check_features(x: object, num_rows: int, in_dim: int) -> None:
    """Raise unless ``x`` is a floating ``[num_rows, in_dim]`` tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got dtype {x.dtype}")
    if x.dim() != 2 or x.shape[0] != num_rows or x.shape[1] != in_dim:
        raise ValueError(f"x must have shape [{num_rows}, {in_dim}] (input nodes x in_dim), got {tuple(x.shape)}")


class BlockModel(nn.Module):
    """Graph layers, one per block, with ReLU + dropout between layers and nothing after the last."""

    def __init__(self, spec: ModelSpec, layers: list[nn.Module]) -> None:
        super().__init__()
        if len(layers) != spec.num_layers:
            raise ValueError(f"expected {spec.num_layers} layers for {spec}, got {len(layers)}")
        self.spec = spec
        self.layers = nn.ModuleList(layers)
        self.dropout = NodeDropout(spec.dropout)
        # layer -1: its masks are independent of the hidden layers' (cherry.models.dropout.layer_seed)
        self.input_dropout = NodeDropout(getattr(spec, "input_dropout", 0.0))
        self._out_dims = tuple(d.out_dim for d in spec.layer_dims())

    def forward_input(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        """What the first layer reads: ``x`` after input dropout. Exposed with `forward_layer` so that a
        path running the layers one at a time (recomputation) applies the same input dropout."""
        return self.input_dropout(x, blocks.input_nodes, -1)

    def forward_layer(self, index: int, block: Block, h: torch.Tensor) -> torch.Tensor:
        """Layer ``index`` on one block, with the activation that follows it (none for the last).

        Exposed for layer-wise full-neighbour inference, which runs one layer over all nodes at a time.
        """
        with node_rows(block, index):  # tells a user layer's ExactDropout which nodes its rows are
            out = self.layers[index](block, h)
        self._check_output(index, block, out)
        if index < len(self.layers) - 1:
            out = self.dropout(torch.relu(out), block.dst_nodes, index)
        return out

    def _check_output(self, index: int, block: Block, out: object) -> None:
        """The layer contract, checked where a layer returns (shapes only: no device sync), so a user
        layer's wrong shape is named here rather than by a torch op two layers on."""
        want = (block.num_dst, self._out_dims[index])
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or tuple(out.shape) != want:
            layer = self.layers[index]
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(f"layer {index} ({type(layer).__name__}) returned {got}; the layer contract is "
                             f"layer(block, h) -> [block.num_dst, out_dim] = {list(want)} (docs/library.md)")

    def forward(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be cherry.sampling.Blocks, got {type(blocks).__name__}")
        if blocks.num_layers != self.spec.num_layers:
            raise ValueError(
                f"blocks has {blocks.num_layers} layers but the model has {self.spec.num_layers}; they must be equal"
            )
        check_features(x, blocks.layers[0].num_src, self.spec.in_dim)
        h = self.forward_input(blocks, x)
        for index, block in enumerate(blocks.layers):
            h = self.forward_layer(index, block, h)
        return h
