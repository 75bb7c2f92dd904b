"""`lstm_cell_backward_`: the native kernel equals the ATen reference, which equals autograd's gradient."""
from __future__ import annotations

import pytest
import torch

from cherry.ops.extension import extension_available
from cherry.ops.lstm import lstm_cell_backward_, lstm_cell_backward_reference_


def _step(n, hidden, dtype, has_prev, seed=0):
    g = torch.Generator().manual_seed(seed)
    pre = torch.randn(n, 4 * hidden, generator=g, dtype=dtype)
    c_prev = torch.randn(n, hidden, generator=g, dtype=dtype) if has_prev else None
    dh = torch.randn(n, hidden, generator=g, dtype=dtype)
    dc = torch.randn(n, hidden, generator=g, dtype=dtype)
    return pre, c_prev, dh, dc


def _forward(pre, c_prev, hidden):
    i, f, o = (torch.sigmoid(p) for p in pre[:, : 3 * hidden].split(hidden, 1))
    g = torch.tanh(pre[:, 3 * hidden:])
    c = i * g + (f * c_prev if c_prev is not None else 0)
    return torch.cat([i, f, o, g], 1), c, o * torch.tanh(c)


@pytest.mark.parametrize("has_prev", [True, False])
def test_reference_is_the_gradient(has_prev):
    hidden = 5
    pre, c_prev, dh, dc = _step(7, hidden, torch.float64, has_prev)
    pre.requires_grad_()
    c_leaf = c_prev.clone().requires_grad_() if has_prev else None
    act, c, h = _forward(pre, c_leaf, hidden)
    (h * dh).sum().add_((c * dc).sum()).backward()
    act, dc_ref = act.detach().clone(), dc.clone()
    lstm_cell_backward_reference_(act, c_prev, torch.tanh(c.detach()), dh, dc_ref)
    torch.testing.assert_close(act, pre.grad)
    if has_prev:
        torch.testing.assert_close(dc_ref, c_leaf.grad)


@pytest.mark.skipif(not extension_available(), reason="native extension not built")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("has_prev", [True, False])
def test_native_equals_reference(dtype, has_prev):
    hidden = 33
    pre, c_prev, dh, dc = _step(300, hidden, dtype, has_prev, seed=4)
    act, c, _ = _forward(pre, c_prev, hidden)
    tanh_c = torch.tanh(c)
    a_ref, dc_ref = act.clone(), dc.clone()
    lstm_cell_backward_reference_(a_ref, c_prev, tanh_c, dh, dc_ref)
    a_nat, dc_nat = act.clone(), dc.clone()
    lstm_cell_backward_(a_nat, c_prev, tanh_c, dh, dc_nat)
    torch.testing.assert_close(a_nat, a_ref)
    torch.testing.assert_close(dc_nat, dc_ref)


def test_bad_shapes_are_refused():
    act = torch.zeros(3, 8)
    with pytest.raises(TypeError, match=r"act must be a \[n, 4H\]"):
        lstm_cell_backward_(torch.zeros(3, 7), None, torch.zeros(3, 2), torch.zeros(3, 2), torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"dh must be a \[3, 2\]"):
        lstm_cell_backward_(act, None, torch.zeros(3, 2), torch.zeros(2, 2), torch.zeros(3, 2))
