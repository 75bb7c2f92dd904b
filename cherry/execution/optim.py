"""`make_optimizer`: the one optimizer factory of a run spec (adam, adamw, sgd with momentum).

``adam`` applies ``weight_decay`` as an L2 term added to the gradient (``torch.optim.Adam``, the
setting of the GCN paper and PyG's examples); ``adamw`` decays the weights directly (decoupled);
``sgd`` uses ``momentum`` (the spec's, default 0.9). The optimizer sees the accumulated gradient of
the whole logical batch, so its state is the same at every K.
"""
from __future__ import annotations

from typing import Iterable

import torch

OPTIMIZERS = ("adam", "adamw", "sgd")


def make_optimizer(params: Iterable[torch.nn.Parameter], name: str, lr: float, weight_decay: float = 0.0,
                   momentum: float = 0.0) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``params``; ValueError (one line) for an unknown name or bad number.
    The run's defaults (lr, momentum) are the run schema's, passed in by `optimizer_for_spec`."""
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {name!r}")
    for key, value, upper in (("lr", lr, None), ("weight_decay", weight_decay, None), ("momentum", momentum, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
                or (upper is not None and not value < upper) or value != value or value == float("inf"):
            raise ValueError(f"{key} must be a finite number >= 0{' and < 1' if upper else ''}, got {value!r}")
    params = list(params)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


def optimizer_for_spec(params, spec) -> torch.optim.Optimizer:
    """`make_optimizer` with a `cherry.spec.RunSpec`'s settings."""
    return make_optimizer(params, spec.optimizer, spec.lr, spec.weight_decay, spec.momentum)


def state_copies(name: str, momentum: float) -> int:
    """Parameter-sized tensors the optimizer keeps (Adam's two moments, SGD's momentum buffer)."""
    if name in ("adam", "adamw"):
        return 2
    return 1 if momentum > 0 else 0
