"""Public op `node_dropout`: dropout whose keep mask is a hash of (row state, column), never stored.

``node_dropout(x, states, p)`` returns ``x * keep * 1 / (1 - p)`` where element ``(r, j)`` is kept iff
``mix32(states[r] ^ j) >= round(p * 2**32)`` (`cherry.ops.reference_dropout`; the states are per-row
32-bit hash words, e.g. `cherry.ops.reference_sampling.node_states` of the rows' node ids). It is
differentiable in ``x``: the gradient is ``grad * keep * 1 / (1 - p)``, the mask recomputed from the
states, so autograd keeps only the ``[R]`` states and the memory of a call is its output.

Inputs are validated here (host metadata only: no sync), then ``torch.ops.cherry.node_dropout`` runs
when the extension is in use, the device has a kernel and the dtype is float32/float64 (its autograd
is registered in `cherry.ops.registrations`); otherwise the chunked reference runs under
`_ReferenceDropout`, an autograd Function that saves the states only. Both give identical bits.
"""
from __future__ import annotations

import torch

from cherry.ops import reference_dropout as ref
from cherry.ops.aggregate import _describe, _native_ok

WORDS = 1 << 32  # hash words are 32-bit


def dropout_threshold(p: float) -> int:
    """The keep threshold of probability ``p``: a word in ``[0, 2**32)`` is kept iff it is at least this."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must be a number in [0, 1), got {p!r}")
    return int(round(p * WORDS))


def node_dropout(x: torch.Tensor, states: torch.Tensor, p: float) -> torch.Tensor:
    """``x [R, F]`` floating with rows dropped element-wise by the hash of ``states [R]`` (module docstring)."""
    threshold = dropout_threshold(p)
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.dim() != 2:
        raise TypeError(f"x must be a 2-D floating tensor [rows, features], got {_describe(x)}")
    if not isinstance(states, torch.Tensor) or states.dtype != torch.int64 or states.dim() != 1:
        raise TypeError(f"states must be a 1-D int64 tensor (one hash word per row), got {_describe(states)}")
    if states.numel() != x.shape[0]:
        raise ValueError(f"states must have one entry per row of x: {states.numel()} states for {x.shape[0]} rows")
    if states.device != x.device:
        raise ValueError(f"states and x must be on one device, got {states.device} and {x.device}")
    if x.shape[1] >= WORDS:
        raise ValueError(f"x must be narrower than 2**32 columns, got {x.shape[1]}")
    scale = 1.0 / (1.0 - float(p))
    if _native_ok("node_dropout", x) and hasattr(torch.ops.cherry, "node_dropout"):
        return torch.ops.cherry.node_dropout(x, states, threshold, scale)
    return _ReferenceDropout.apply(x, states, threshold, scale)


class _ReferenceDropout(torch.autograd.Function):
    """The reference under autograd: saves the ``[R]`` states, recomputes the mask in backward."""

    @staticmethod
    def forward(ctx, x, states, threshold, scale):
        ctx.save_for_backward(states)
        ctx.threshold, ctx.scale = threshold, scale
        return ref.node_dropout(x, states, threshold, scale)

    @staticmethod
    def backward(ctx, grad_out):
        (states,) = ctx.saved_tensors
        # the same function of the gradient, differentiable again (double backward)
        grad_x = _ReferenceDropout.apply(grad_out, states, ctx.threshold, ctx.scale) if ctx.needs_input_grad[0] else None
        return grad_x, None, None, None
