"""`LibraryModel`: what the DGL and PyG adapters share (see `cherry.interop`).

A library model is called as ``wrapper(cherry_blocks, x)``: the wrapper turns Cherry's `Blocks` into the
library's layer graphs (`LibraryModel.layer_graphs`, input layer first) and calls the user's model with
them (`LibraryModel.call_inner`) inside the node-row context that makes its dropouts exact.
"""
from __future__ import annotations

import torch
from torch import nn

from cherry.models.exact_dropout import node_rows
from cherry.sampling.blocks import Blocks


class LibraryModel(nn.Module):
    """A library's ``nn.Module`` (``.inner``) called as ``wrapper(cherry_blocks, x)``.

    A subclass names its wrapping function and call form (``WRAPPED_BY``, ``CALLED_AS``, for the
    constructor's error) and defines `layer_graphs` and `call_inner`.
    """

    _cherry_node_rows = True  # it enters the node-row context itself (the guard adds no hooks)
    WRAPPED_BY = "a library adapter"
    CALLED_AS = "model(...)"

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(model, nn.Module):
            raise TypeError(f"{self.WRAPPED_BY} needs a torch.nn.Module called as {self.CALLED_AS}, "
                            f"got {type(model).__name__}")
        self.inner = model

    def layer_graphs(self, blocks: Blocks) -> list:
        """The library's layer graphs of ``blocks``, input layer first."""
        raise NotImplementedError

    def call_inner(self, graphs: list, x: torch.Tensor) -> torch.Tensor:
        """The inner model called with the layer graphs ``graphs`` and input features ``x``."""
        raise NotImplementedError

    def input_layer(self):
        """Layer 0's stock module and its input projections, or None and the reason it does not
        stream (`cherry.interop.projections`): what the streamed input layer takes."""
        from cherry.interop.projections import input_layer

        return input_layer(self.inner)

    def forward(self, blocks: Blocks, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(blocks, Blocks):
            raise TypeError(f"blocks must be cherry.sampling.Blocks, got {type(blocks).__name__}")
        with node_rows(blocks):
            return self.call_inner(self.layer_graphs(blocks), x)
