"""The exactness guard: find what in a user's model breaks "K micro-batches = the whole batch".

Exactness needs every destination's output to depend only on its own rows and in-edges. Known
breakers, found before training:

- BatchNorm (any ``_BatchNorm``, including SyncBatchNorm) in training mode: it normalises with the
  statistics of whatever rows are in the micro-batch. Refused (one line naming the module) with the
  remedy: ``nn.LayerNorm`` (per row) or the BatchNorm in eval mode (frozen statistics are exact).
- Modules the user put in eval mode (inside a model in training mode) stay in eval mode: their
  ``train`` is bound to keep them there, so no ``model.train()`` of the Trainer, the executor or
  evaluation turns a frozen BatchNorm back to batch statistics.
- ``nn.Dropout`` (and ``Dropout1d``/``2d``/``3d``, ``AlphaDropout``): a fresh mask per call, so a
  node's row is masked differently in each micro-batch. Replaced in place by
  `cherry.models.exact_dropout.ExactDropout` (same ``p``), whose mask follows the node id.
- ``F.dropout`` / ``torch.dropout`` / ``F.batch_norm`` / a random draw (``torch.rand*``,
  ``bernoulli``, ``normal``) called inside a forward: found by one probe forward on a small batch
  (`check_functional`) and refused, naming the module whose forward called it.

`guard_model` does the first three (the `Trainer` calls it); `check_functional` the last (`check_exact`,
`cherry verify` and a failed partition check call it). What no guard can see (centring by the batch's
mean, scaling by its size) the partition check of the run's first step finds
(`cherry.execution.partition_check`).
"""
from __future__ import annotations

import types
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from cherry.models.dropout import NodeDropout, set_dropout_step
from cherry.models.exact_dropout import ExactDropout, node_rows

_DROPOUTS = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


class ExactnessError(ValueError):
    """A model that cannot train exactly under micro-batching; one line naming the module and the remedy."""


def _batchnorm_error(name: str, module: nn.Module) -> ExactnessError:
    return ExactnessError(
        f"module {name or '<model>'} ({type(module).__name__}) normalises with the statistics of each "
        "micro-batch, so K micro-batches would not give the whole batch's gradient; use nn.LayerNorm "
        "(per row) or keep it in eval mode (frozen statistics)")


def guard_model(model: nn.Module, replace_dropout: bool = True) -> nn.Module:
    """``model`` with its ``nn.Dropout`` modules replaced by `ExactDropout` (in place), after refusing
    BatchNorm in training mode (`ExactnessError`). Returns ``model``."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training:
            raise _batchnorm_error(name, module)
    if model.training:  # modules the user froze inside a training model stay frozen
        for module in model.modules():
            if not module.training:
                freeze_eval(module)
    swaps = []
    for parent_name, parent in model.named_modules():
        for child_name, child in parent.named_children():
            if isinstance(child, _DROPOUTS) and not isinstance(child, NodeDropout):
                if not replace_dropout:
                    raise ExactnessError(f"module {parent_name + '.' if parent_name else ''}{child_name} "
                                         f"({type(child).__name__}) draws a new mask per micro-batch; use "
                                         "cherry.models.ExactDropout(p)")
                swaps.append((parent, child_name, child))
    for parent, child_name, child in swaps:
        exact = ExactDropout(child.p)
        exact.train(child.training)
        setattr(parent, child_name, exact)
    if not getattr(model, "_cherry_node_rows", False) and any(isinstance(m, ExactDropout) for m in model.modules()):
        # a whole-model forward(blocks, x): its ExactDropouts read node ids from the call's Blocks
        model.register_forward_pre_hook(_enter_node_rows)
        model.register_forward_hook(_leave_node_rows)
        model._cherry_node_rows = True
    return model


def _frozen_train(self: nn.Module, mode: bool = True) -> nn.Module:
    return type(self).train(self, False)


def freeze_eval(module: nn.Module) -> nn.Module:
    """Keep ``module`` (and its children) in eval mode whatever ``train()`` calls reach it: its ``train``
    is bound to ``train(False)`` (a bound method, so a deep copy of the model keeps it for the copy)."""
    module.train = types.MethodType(_frozen_train, module)
    module.train(False)
    return module


def _enter_node_rows(module, args):
    if args and hasattr(args[0], "layers"):
        context = node_rows(args[0])
        context.__enter__()
        module.__dict__.setdefault("_cherry_contexts", []).append(context)


def _leave_node_rows(module, args, output):
    contexts = module.__dict__.get("_cherry_contexts")
    if contexts:
        contexts.pop().__exit__(None, None, None)


_RANDOM = (torch.rand, torch.randn, torch.randint, torch.rand_like, torch.randn_like, torch.randint_like,
           torch.bernoulli, torch.normal, torch.randperm, torch.multinomial, torch.poisson)


class _FunctionalWatch(TorchFunctionMode):
    """Records dropout and batch-norm calls in training mode made outside Cherry's exact modules."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()
        self.stack = stack
        self.found: Optional[str] = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.found is None and self.stack and self.stack[-1] is not None:
            where = self.stack[-1]
            if func in (F.dropout, torch.dropout, F.alpha_dropout, F.dropout1d, F.dropout2d, F.dropout3d):
                training = kwargs.get("training", args[2] if len(args) > 2 else True)
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                if training and p > 0:
                    self.found = (f"module {where or '<model>'} calls {func.__name__} in its forward: a fresh mask per "
                                  "micro-batch breaks exactness; use a module cherry.models.ExactDropout(p) instead")
            elif func in _RANDOM:
                self.found = (f"module {where or '<model>'} draws random numbers ({func.__name__}) in its forward: a "
                              "fresh draw per micro-batch breaks exactness; use cherry.models.ExactDropout(p), or "
                              "draw from the node ids")
            elif func is F.batch_norm:
                training = kwargs.get("training", args[5] if len(args) > 5 else False)
                if training:
                    self.found = (f"module {where or '<model>'} calls batch_norm with batch statistics: K micro-batches "
                                  "would not give the whole batch's gradient; use layer_norm (per row)")
        return func(*args, **kwargs)


def check_functional(model: nn.Module, blocks, x: torch.Tensor) -> None:
    """Run one training-mode forward of ``model`` on ``blocks`` (no gradient) and raise `ExactnessError`
    if a dropout or batch-norm call outside Cherry's exact modules happened."""
    stack: list = []
    handles = []
    exact_types = (NodeDropout,)
    for name, module in model.named_modules():
        skip = isinstance(module, exact_types)

        def pre(mod, args, name=name, skip=skip):
            stack.append(None if skip else name)

        def post(mod, args, out):
            stack.pop()

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    was_training = model.training
    watch = _FunctionalWatch(stack)
    set_dropout_step(model, 0)
    try:
        model.train()
        with torch.no_grad(), watch:
            model(blocks, x)
    finally:
        for h in handles:
            h.remove()
        set_dropout_step(model, None)
        model.train(was_training)
    if watch.found:
        raise ExactnessError(watch.found)
