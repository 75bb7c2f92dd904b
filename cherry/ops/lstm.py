"""`lstm_cell_backward_`: the fused backward of one LSTM time step, in place (native on the CPU).

Inputs: a step's gate activations ``act [n, 4H]`` (order i, f, o, g: sigmoid, sigmoid, sigmoid,
tanh); the previous cell state ``c_prev [n, H]`` (``None`` at the first step: zeros);
``tanh_c = tanh(c_t)``; the gradient ``dh`` reaching ``h_t = o * tanh(c_t)``; and the carry ``dc``
reaching ``c_t`` from the next step. Outputs, in place: ``act`` becomes the gradient of the pre-activations and ``dc`` the carry into the previous
step (``dc_t * f``). Used by `cherry.models.lstm_steps`. The native kernel (one pass over the rows,
float32/float64, CPU) and the ATen reference here compute the same values; the reference is the test
oracle and runs on every other device. Callers pass contiguous row blocks; nothing is read back.
"""
from __future__ import annotations

from typing import Optional

import torch

from cherry.ops.extension import extension_available

NATIVE_DTYPES = (torch.float32, torch.float64)


def lstm_cell_backward_reference_(act: torch.Tensor, c_prev: Optional[torch.Tensor], tanh_c: torch.Tensor,
                                  dh: torch.Tensor, dc: torch.Tensor) -> None:
    """ATen composite of `lstm_cell_backward_` (same contract)."""
    i, f, o, g = act.split(act.shape[1] // 4, 1)
    dc.add_(torch.ops.aten.tanh_backward(dh * o, tanh_c))
    d_o = dh * tanh_c
    d_i = dc * g
    d_f = dc * c_prev if c_prev is not None else torch.zeros_like(dc)
    d_g = dc * i
    dc.mul_(f)
    ifo = act[:, : 3 * i.shape[1]]
    torch.ops.aten.sigmoid_backward.grad_input(torch.cat([d_i, d_f, d_o], 1), ifo, grad_input=ifo)
    torch.ops.aten.tanh_backward.grad_input(d_g, g, grad_input=g)


def lstm_cell_backward_(act: torch.Tensor, c_prev: Optional[torch.Tensor], tanh_c: torch.Tensor,
                        dh: torch.Tensor, dc: torch.Tensor) -> None:
    """In place: ``act`` <- d(pre-activations), ``dc`` <- carry into the previous step (see module)."""
    if not isinstance(act, torch.Tensor) or act.dim() != 2 or act.shape[1] % 4 != 0:
        raise TypeError(f"act must be a [n, 4H] tensor, got {getattr(act, 'shape', type(act).__name__)}")
    hidden = act.shape[1] // 4
    for name, t in (("c_prev", c_prev), ("tanh_c", tanh_c), ("dh", dh), ("dc", dc)):
        if t is None and name == "c_prev":
            continue
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (act.shape[0], hidden) or t.dtype != act.dtype:
            raise ValueError(f"{name} must be a [{act.shape[0]}, {hidden}] {act.dtype} tensor, "
                             f"got {getattr(t, 'shape', type(t).__name__)}")
    native = (act.device.type == "cpu" and act.dtype in NATIVE_DTYPES and extension_available()
              and all(t is None or t.is_contiguous() for t in (act, c_prev, tanh_c, dh, dc)))
    if native:
        torch.ops.cherry.lstm_cell_backward_(act, tanh_c if c_prev is None else c_prev, tanh_c, dh, dc,
                                             c_prev is not None)
    else:
        lstm_cell_backward_reference_(act, c_prev, tanh_c, dh, dc)
