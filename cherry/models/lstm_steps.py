"""`lstm_aggregate_steps`: the SAGE-LSTM aggregator as one explicit time-step loop (the CPU's fastest).

The same function as `cherry.models.sage.lstm_aggregate` (the final hidden state of ``lstm`` run over
each destination's neighbour rows in CSC order; zeros for a destination without in-edges), computed as:
- destinations in descending in-degree order (``block.layout``, made on the host), so at step ``t``
  the sequences still running are a prefix of ``batch_sizes[t]`` rows;
- ONE matrix product for every input projection: ``h_src @ W_ih^T + b_ih + b_hh`` over the source rows
  (then gathered per edge) when there are fewer sources than edges, else over the gathered edge rows;
- per step one ``addmm`` of the running prefix's hidden state with ``W_hh`` plus the gate math, with the
  gate rows reordered to (i, f, o, g); ``tanh`` is computed as ``2 sigmoid(2x) - 1``, so one contiguous
  sigmoid pass covers all four gates (ATen's CPU tanh is several times slower than its sigmoid);
- each sequence's final hidden state is read at its own length (the rows that stop after step ``t``
  are ``batch_sizes[t+1]:batch_sizes[t]`` of step ``t``'s output).
``max degree`` steps per layer, where the bucketed version runs one oneDNN call per distinct degree
(sum of the distinct degrees in steps). Backward is autograd's. Host reads: only ``batch_sizes``,
which lives on the host on every device, so it forces no sync.

Transient memory (priced in `cherry.planning.memory_model`): the projected gates of every edge
``[E, 4H]``, and per step what autograd keeps: gates after activation ``[n_t, 4H]``, ``c_t`` and
``tanh(c_t)`` ``[n_t, H]`` each, and ``h_t`` ``[n_t, H]``: about ``8H + 4H`` floats per edge.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from cherry.ops.lstm import lstm_cell_backward_
from cherry.sampling.blocks import Block
from cherry.sampling.layout import DegreeLayout


def _check_lstm(lstm: nn.LSTM) -> None:
    if not isinstance(lstm, nn.LSTM) or lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size \
            or not lstm.bias:
        raise TypeError(f"lstm must be a one-layer unidirectional nn.LSTM with biases and no projection, got {lstm!r}")


def _ifog(w: torch.Tensor, hidden: int) -> torch.Tensor:
    """Gate blocks of a PyTorch LSTM weight (rows i, f, g, o) reordered to i, f, o, g."""
    return torch.cat([w[: 2 * hidden], w[3 * hidden:], w[2 * hidden: 3 * hidden]])


def _tanh_by_sigmoid_(x: torch.Tensor, rest: torch.Tensor | None = None, scaled: bool = False) -> None:
    """``x = tanh(x)`` in place as ``2 sigmoid(2x) - 1`` (equal up to rounding): ATen's CPU sigmoid is
    about 6x faster than its tanh (0.39 vs 2.29 ms for 7,000 x 128 floats, one thread). ``rest``: a
    tensor containing ``x`` whose every element gets the sigmoid (the i, f, o gates around g), so one
    contiguous pass covers all four gates. ``scaled``: ``x`` already holds ``2x``."""
    if not scaled:
        x.mul_(2.0)
    (rest if rest is not None else x).sigmoid_()
    x.mul_(2.0).sub_(1.0)


def _prefix_steps(sizes: list[int]) -> list[tuple[int, int, int, int]]:
    """``(t, n_t, offset_t, stop_t)`` per step: rows ``offset_t:offset_t + n_t`` of the packed edge
    tensors are step ``t``; sequences ``stop_t:n_t`` end at step ``t``."""
    steps, offset = [], 0
    for t, n in enumerate(sizes):
        steps.append((t, n, offset, sizes[t + 1] if t + 1 < len(sizes) else 0))
        offset += n
    return steps


class _StepLSTM(torch.autograd.Function):
    """Forward and backward of the time-step loop over packed (time-major) edge rows.

    Inputs: ``h_src [S, I]``, ``edges [E]`` (source row of each packed element), ``w_ih [4H, I]``,
    ``w_hh [4H, H]``, ``bias [4H]`` (gate rows i, f, o, g), ``sizes`` (host batch sizes),
    ``project_sources``. Output: the final hidden state of every sequence, ``[sizes[0], H]``, longest
    first. Saved: the gate activations ``[E, 4H]``, ``c``, ``tanh(c)`` and ``h`` ``[E, H]`` each; the
    backward overwrites the activations with the gate gradients (so it runs once).
    """

    @staticmethod
    def forward(ctx, h_src, edges, w_ih, w_hh, bias, sizes, project_sources):
        hidden = w_hh.shape[1]
        if project_sources:  # fewer source rows than edges: project each once, then gather
            act = torch.addmm(bias, h_src, w_ih.t()).index_select(0, edges)
        else:
            act = torch.addmm(bias, h_src.index_select(0, edges), w_ih.t())
        c_all, tc_all, h_all = (act.new_empty((act.shape[0], hidden)) for _ in range(3))
        finals = act.new_empty((sizes[0], hidden))
        w_hh_t = w_hh.t()
        prev = 0
        for t, n, off, stop in _prefix_steps(sizes):
            a = act[off: off + n]
            if t > 0:
                a.addmm_(h_all[prev: prev + n], w_hh_t)
            i, f, o, g = a.split(hidden, 1)
            _tanh_by_sigmoid_(g, rest=a)
            c = c_all[off: off + n]
            torch.mul(i, g, out=c)
            if t > 0:
                c.addcmul_(f, c_all[prev: prev + n])
            tc = tc_all[off: off + n]
            torch.mul(c, 2.0, out=tc)
            _tanh_by_sigmoid_(tc, scaled=True)
            h = torch.mul(o, tc, out=h_all[off: off + n])
            finals[stop:n] = h[stop:n]
            prev = off
        ctx.save_for_backward(h_src, edges, w_ih, w_hh, act, c_all, tc_all, h_all)
        ctx.sizes, ctx.project_sources, ctx.used = sizes, project_sources, False
        return finals

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_finals):
        if ctx.used:
            raise RuntimeError("the step LSTM's backward runs once (it reuses its saved activations)")
        ctx.used = True
        h_src, edges, w_ih, w_hh, act, c_all, tc_all, h_all = ctx.saved_tensors
        hidden, sizes = w_hh.shape[1], ctx.sizes
        grad_finals = grad_finals.contiguous()
        dh, dc = (act.new_empty((sizes[0], hidden)) for _ in range(2))
        grad_w_hh = torch.zeros_like(w_hh)
        steps = _prefix_steps(sizes)
        offsets = [s[2] for s in steps]
        for t, n, off, stop in reversed(steps):
            # rows :stop were set by step t + 1 (its gates' gradient through W_hh, and its c carry);
            # the sequences that end here start from the output's gradient and no carry
            dh[stop:n] = grad_finals[stop:n]
            dc[stop:n] = 0
            a = act[off: off + n]
            c_prev = c_all[offsets[t - 1]: offsets[t - 1] + n] if t > 0 else None
            lstm_cell_backward_(a, c_prev, tc_all[off: off + n], dh[:n], dc[:n])
            if t > 0:  # a now holds d(gates_t): through W_hh into h_{t-1}
                h_prev = h_all[offsets[t - 1]: offsets[t - 1] + n]
                grad_w_hh.addmm_(a.t(), h_prev)
                torch.mm(a, w_hh, out=dh[:n])
        grad_gates = act
        if ctx.project_sources:
            grad_proj = grad_gates.new_zeros((h_src.shape[0], grad_gates.shape[1])).index_add_(0, edges, grad_gates)
            grad_bias = grad_proj.sum(0)  # fewer rows than grad_gates, same sum
            grad_w_ih = grad_proj.t().mm(h_src)
            grad_h_src = grad_proj.mm(w_ih) if ctx.needs_input_grad[0] else None
        else:
            grad_bias = grad_gates.sum(0)
            grad_w_ih = grad_gates.t().mm(h_src.index_select(0, edges))
            grad_h_src = None
            if ctx.needs_input_grad[0]:
                grad_h_src = h_src.new_zeros(h_src.shape).index_add_(0, edges, grad_gates.mm(w_ih))
        return grad_h_src, None, grad_w_ih, grad_w_hh, grad_bias, None, None


def lstm_aggregate_steps(lstm: nn.LSTM, block: Block, h_src: torch.Tensor) -> torch.Tensor:
    """Final LSTM hidden state over each destination's neighbour rows -> ``[num_dst, lstm.hidden_size]``
    (see the module docstring). ``h_src`` is ``[block.num_src, lstm.input_size]``."""
    _check_lstm(lstm)
    layout = block.layout if block.layout is not None else DegreeLayout.of(block.indptr)
    hidden = lstm.hidden_size
    out = h_src.new_zeros((block.num_dst, hidden))
    if layout.num_sequences == 0:
        return out
    sizes = layout.batch_sizes.tolist()  # host memory on every device: no sync
    edges = block.indices.index_select(0, layout.packed_edge_positions(block.indptr))
    finals = _StepLSTM.apply(h_src.contiguous(), edges, _ifog(lstm.weight_ih_l0, hidden),
                             _ifog(lstm.weight_hh_l0, hidden), _ifog(lstm.bias_ih_l0 + lstm.bias_hh_l0, hidden),
                             sizes, h_src.shape[0] < layout.num_edges)
    return out.index_copy(0, layout.order, finals)
