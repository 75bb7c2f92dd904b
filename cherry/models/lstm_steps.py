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
(sum of the distinct degrees in steps). Backward: a custom `torch.autograd.Function` (autograd
through the loop spent 37% of its time zero-filling the gradients of slices), the per-step cell
math fused in `cherry.ops.lstm.lstm_cell_backward_`. Host reads: only ``batch_sizes``, which lives
on the host on every device, so it forces no sync.

Memory (priced in `cherry.planning.memory_model.lstm_costs`): kept for backward, per edge, the gate
activations (4H), ``c``, ``tanh(c)`` and ``h`` (H each); transient, the projected gates of the
sources ``[S, 4H]`` (forward) or their gradient (backward), the packed edge ids and their index
arithmetic, and the backward's ``[n_0, H]`` carries.
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
    first. Saved per step: the gate activations ``[n_t, 4H]``, ``c``, ``tanh(c)`` and ``h``
    ``[n_t, H]``; the backward overwrites the activations with the gate gradients (so it runs once).
    One tensor per step rather than one per edge set: a step's block stays under glibc's mmap
    threshold (32 MiB), so it is recycled from the heap instead of being mapped fresh and
    page-faulted on every call (a fresh 66 MB zero tensor took 52 ms against 8 ms for a reused one).
    """

    @staticmethod
    def forward(ctx, h_src, edges, w_ih, w_hh, bias, sizes, project_sources):
        hidden = w_hh.shape[1]
        # fewer source rows than edges: project each source once, then gather per step
        proj = torch.addmm(bias, h_src, w_ih.t()) if project_sources else None
        finals = h_src.new_empty((sizes[0], hidden))
        w_hh_t = w_hh.t()
        acts, cs, tcs, hs = [], [], [], []
        for t, n, off, stop in _prefix_steps(sizes):
            e_t = edges[off: off + n]
            if proj is not None:
                a = proj.index_select(0, e_t)
            else:
                a = torch.addmm(bias, h_src.index_select(0, e_t), w_ih.t())
            if t > 0:
                a.addmm_(hs[-1][:n], w_hh_t)
            i, f, o, g = a.split(hidden, 1)
            _tanh_by_sigmoid_(g, rest=a)
            c = i * g
            if t > 0:
                c.addcmul_(f, cs[-1][:n])
            tc = c * 2.0
            _tanh_by_sigmoid_(tc, scaled=True)
            h = o * tc
            finals[stop:n] = h[stop:n]
            acts.append(a), cs.append(c), tcs.append(tc), hs.append(h)
        del proj
        ctx.save_for_backward(h_src, edges, w_ih, w_hh, *acts, *cs, *tcs, *hs)
        ctx.sizes, ctx.project_sources, ctx.used = sizes, project_sources, False
        return finals

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_finals):
        if ctx.used:
            raise RuntimeError("the step LSTM's backward runs once (it reuses its saved activations)")
        ctx.used = True
        h_src, edges, w_ih, w_hh, *saved = ctx.saved_tensors
        sizes = ctx.sizes
        steps = _prefix_steps(sizes)
        num_steps = len(steps)
        acts, cs, tcs, hs = (saved[j * num_steps: (j + 1) * num_steps] for j in range(4))
        hidden = w_hh.shape[1]
        grad_finals = grad_finals.contiguous()
        dh, dc = (h_src.new_empty((sizes[0], hidden)) for _ in range(2))
        grad_w_hh = torch.zeros_like(w_hh)
        if ctx.project_sources:
            grad_proj = h_src.new_zeros((h_src.shape[0], 4 * hidden))
        else:
            grad_w_ih, grad_bias = torch.zeros_like(w_ih), h_src.new_zeros((4 * hidden,))
            grad_h_src = h_src.new_zeros(h_src.shape) if ctx.needs_input_grad[0] else None
        for t, n, off, stop in reversed(steps):
            # rows :stop were set by step t + 1 (its gates' gradient through W_hh, and its c carry);
            # the sequences that end here start from the output's gradient and no carry
            dh[stop:n] = grad_finals[stop:n]
            dc[stop:n] = 0
            a = acts[t]
            lstm_cell_backward_(a, cs[t - 1][:n] if t > 0 else None, tcs[t], dh[:n], dc[:n])
            if t > 0:  # a now holds d(gates_t): through W_hh into h_{t-1}
                grad_w_hh.addmm_(a.t(), hs[t - 1][:n])
                torch.mm(a, w_hh, out=dh[:n])
            e_t = edges[off: off + n]
            if ctx.project_sources:
                grad_proj.index_add_(0, e_t, a)
            else:
                grad_w_ih.addmm_(a.t(), h_src.index_select(0, e_t))
                grad_bias.add_(a.sum(0))
                if grad_h_src is not None:
                    grad_h_src.index_add_(0, e_t, a.mm(w_ih))
        if ctx.project_sources:
            grad_bias = grad_proj.sum(0)
            grad_w_ih = grad_proj.t().mm(h_src)
            grad_h_src = grad_proj.mm(w_ih) if ctx.needs_input_grad[0] else None
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
