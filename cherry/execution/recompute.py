"""Recomputation as a wrapper of the one model forward.

`recomputed(model)` runs ``model(blocks, x)``, the same forward as every other path, with each of its
layer units under activation checkpointing (`torch.utils.checkpoint`, non-reentrant): forward keeps
only each unit's inputs, backward recomputes one unit at a time. Nothing the model does before,
between or after its layer units (input dropout, a user's pre-processing) can be skipped, because
the wrapper never re-implements the model's loop: it replaces, for the duration of the call, the
bound ``forward_layer`` the model's own forward calls.

A layer unit is ``forward_layer(index, block, h)`` (`cherry.models.BlockModel`: the layer with the
activation and dropout that follow it). Exact: dropout masks are a function of node, layer and step
(`cherry.models.dropout`), not of an RNG stream, so the recomputed forward draws the same masks.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch.utils.checkpoint import checkpoint


def can_recompute(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward runs layer units that `recomputed` can checkpoint."""
    return callable(getattr(model, "forward_layer", None)) and hasattr(getattr(model, "spec", None), "num_layers")


@contextmanager
def recomputed(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """``model`` whose forward checkpoints each layer unit until the block exits (see module docstring).
    Raises ValueError for a model without layer units."""
    if not can_recompute(model):
        raise ValueError(f"{type(model).__name__} exposes no layer units (forward_layer): it cannot recompute")
    unit = model.forward_layer  # the bound method the model's forward would call
    calls = [0]

    def checkpointed(index, block, h):
        calls[0] += 1
        return checkpoint(unit, index, block, h, use_reentrant=False)

    model.forward_layer = checkpointed  # an instance attribute shadows the method for this call only
    try:
        yield model
    finally:
        del model.forward_layer
    if calls[0] == 0:  # a forward that loops its layers itself would silently recompute nothing
        raise ValueError(f"{type(model).__name__}.forward never called forward_layer: recomputation needs the "
                         "model's forward to run each layer through self.forward_layer(index, block, h)")
