"""Python-side registrations of the native ops, done once when the extension loads.

- Autograd (`torch.library.register_autograd`): ``csr_aggregate_forward``, ``edge_softmax_forward`` and
  ``attention_aggregate_forward`` differentiate through their ``*_backward`` ops (first order only: the
  backward ops have no autograd), so `cherry.ops.aggregate` and `cherry.ops.attention` call the ops
  directly instead of wrapping them in an autograd.Function. ``node_dropout`` differentiates through
  itself (the gradient is the same mask applied to the output's gradient), saving only its ``[R]``
  states; that backward is differentiable again.
- Fake (meta) kernels (`torch.library.register_fake`) for the ops whose output shapes follow from their
  inputs' shapes (aggregation, edge softmax, attention aggregation, the LSTM cell's backward, node
  dropout), so they trace under ``torch.compile`` and pass `torch.library.opcheck`'s fake-tensor tests. The sampling and planning ops
  have data-dependent output sizes and run eagerly only (no fake kernel).
"""
from __future__ import annotations

import torch

_done = False


def _aggregate_setup_context(ctx, inputs, output) -> None:
    indptr, indices, x_src, reduce = inputs
    _, argmax = output
    ctx.save_for_backward(indptr, indices, argmax)
    ctx.reduce, ctx.num_src = reduce, x_src.shape[0]
    # The int64 arg-max output never has a gradient: without this, autograd fills a [D, F] zero tensor
    # for it on every backward (a pass over D x F int64 that the max aggregation's time paid).
    ctx.set_materialize_grads(False)


def _aggregate_backward(ctx, grad_out, _grad_argmax):
    indptr, indices, argmax = ctx.saved_tensors
    grad_x = None
    if ctx.needs_input_grad[2] and grad_out is not None:
        grad_x = torch.ops.cherry.csr_aggregate_backward(indptr, indices, grad_out.contiguous(), argmax,
                                                         ctx.num_src, ctx.reduce)
    return None, None, grad_x, None


def _softmax_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0], output)


def _softmax_backward(ctx, grad_out):
    indptr, out = ctx.saved_tensors
    return None, torch.ops.cherry.edge_softmax_backward(indptr, out, grad_out.contiguous())


def _dropout_setup_context(ctx, inputs, output) -> None:
    _, states, threshold, scale = inputs
    ctx.save_for_backward(states)  # the mask is recomputed from the states, never stored
    ctx.threshold, ctx.scale = threshold, scale


def _dropout_backward(ctx, grad_out):
    (states,) = ctx.saved_tensors
    return torch.ops.cherry.node_dropout(grad_out, states, ctx.threshold, ctx.scale), None, None, None


def _fake_node_dropout(x, states, threshold, scale):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _attention_setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _attention_backward(ctx, grad_out):
    indptr, indices, z, alpha = ctx.saved_tensors
    grad_z, grad_alpha = torch.ops.cherry.attention_aggregate_backward(indptr, indices, grad_out.contiguous(), z, alpha)
    return (None, None, grad_z if ctx.needs_input_grad[2] else None,
            grad_alpha if ctx.needs_input_grad[3] else None)


def _fake_attention_forward(indptr, indices, z, alpha):
    return z.new_empty((indptr.shape[0] - 1, z.shape[1], z.shape[2]))


def _fake_attention_backward(indptr, indices, grad_out, z, alpha):
    return torch.empty_like(z), torch.empty_like(alpha)


def _fake_aggregate_forward(indptr, indices, x_src, reduce):
    shape = (indptr.shape[0] - 1, x_src.shape[1])
    argmax_shape = shape if reduce == "max" else (0,)
    return x_src.new_empty(shape), x_src.new_empty(argmax_shape, dtype=torch.int64)


def _fake_aggregate_backward(indptr, indices, grad_out, argmax, num_src, reduce):
    return grad_out.new_empty((num_src, grad_out.shape[1]))


def _fake_softmax_forward(indptr, scores):
    return torch.empty_like(scores)


def _fake_softmax_backward(indptr, out, grad_out):
    return torch.empty_like(out)


def _fake_lstm_cell_backward_(act, c_prev, tanh_c, dh, dc, has_prev) -> None:
    return None


# op -> its fake kernel (output shapes from input shapes only)
FAKE_OPS = {
    "csr_aggregate_forward": _fake_aggregate_forward,
    "csr_aggregate_backward": _fake_aggregate_backward,
    "edge_softmax_forward": _fake_softmax_forward,
    "attention_aggregate_forward": _fake_attention_forward,
    "attention_aggregate_backward": _fake_attention_backward,
    "edge_softmax_backward": _fake_softmax_backward,
    "lstm_cell_backward_": _fake_lstm_cell_backward_,
    "node_dropout": _fake_node_dropout,
}


def _has_op(name: str) -> bool:
    return hasattr(torch.ops.cherry, name)


def register() -> None:
    """Register the autograd formulas and fake kernels (idempotent; needs the extension loaded)."""
    global _done
    if _done:
        return
    lib = "cherry::"
    torch.library.register_autograd(lib + "csr_aggregate_forward", _aggregate_backward,
                                    setup_context=_aggregate_setup_context)
    torch.library.register_autograd(lib + "edge_softmax_forward", _softmax_backward,
                                    setup_context=_softmax_setup_context)
    if _has_op("node_dropout"):  # a build older than these sources lacks it (cherry.ops.dropout falls back)
        torch.library.register_autograd(lib + "node_dropout", _dropout_backward, setup_context=_dropout_setup_context)
    if _has_op("attention_aggregate_forward"):
        torch.library.register_autograd(lib + "attention_aggregate_forward", _attention_backward,
                                        setup_context=_attention_setup_context)
    for name, fake in FAKE_OPS.items():
        if _has_op(name):
            torch.library.register_fake(lib + name, fake)
    _done = True
