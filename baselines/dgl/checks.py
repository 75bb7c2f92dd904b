"""What the two library baselines (DGL, PyG) share: config validation, the unavailable-system signal,
and a guard that keeps host-side graph structures out of the emulated device's memory count.

Both train a logical mini-batch in one piece with their library's own sampler and layers; neither can
micro-batch, so ``num_microbatches`` must be None or 1. Their models come from the same `ModelSpec`
as Cherry's (widths, heads, dropout), so the three systems train the same network.
"""
from __future__ import annotations

import contextlib

import torch

from cherry.bench.system import SystemConfig, SystemUnavailable
from cherry.data import Dataset
from cherry.models.spec import ModelSpec

LIBRARY_MODELS = ("sage", "gcn", "gat")


def model_spec(dataset: Dataset, config: SystemConfig, system_name: str) -> ModelSpec:
    """Validate ``config`` for a library baseline and return the model it describes.

    Raises TypeError for a wrong config type and ValueError, naming the value, for anything a
    library baseline cannot do (micro-batching, the MLP model, fanouts not matching the depth,
    system options, a non-positive learning rate).
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
    if not isinstance(config, SystemConfig):
        raise TypeError(f"config must be a cherry.bench.system.SystemConfig, got {type(config).__name__}")
    if config.model not in LIBRARY_MODELS:
        raise ValueError(f"{system_name} runs models {LIBRARY_MODELS}, got model={config.model!r}")
    if config.num_microbatches not in (None, 1):
        raise ValueError(
            f"{system_name} trains each logical batch in one piece: num_microbatches must be None or 1, "
            f"got {config.num_microbatches!r}"
        )
    if len(tuple(config.fanouts)) != config.num_layers:
        raise ValueError(
            f"fanouts {tuple(config.fanouts)} must give one fanout per layer (num_layers={config.num_layers})"
        )
    for fanout in config.fanouts:
        if isinstance(fanout, bool) or not isinstance(fanout, int) or (fanout < 1 and fanout != -1):
            raise ValueError(f"fanouts must be ints >= 1 or -1 (all neighbours), got {tuple(config.fanouts)}")
    if config.options:
        raise ValueError(f"{system_name} takes no options, got {sorted(config.options)}")
    if isinstance(config.lr, bool) or not isinstance(config.lr, (int, float)) or not config.lr > 0:
        raise ValueError(f"lr must be a positive number, got {config.lr!r}")
    return ModelSpec(
        model=config.model, in_dim=dataset.feature_dim, hidden=config.hidden,
        num_classes=dataset.num_classes, num_layers=config.num_layers, aggr=config.aggr,
        heads=config.heads, dropout=config.dropout,
    )


def check_seeds(seeds: torch.Tensor, num_nodes: int) -> None:
    """Raise unless ``seeds`` is a non-empty 1-D int64 CPU tensor of node ids in ``[0, num_nodes)``."""
    if not isinstance(seeds, torch.Tensor) or seeds.dtype != torch.int64 or seeds.dim() != 1:
        raise TypeError(f"seeds must be a 1-D int64 tensor, got {seeds!r:.80}")
    if seeds.numel() == 0:
        raise ValueError("seeds must name at least one node, got an empty tensor")
    lo, hi = int(seeds.min()), int(seeds.max())
    if lo < 0 or hi >= num_nodes:
        raise ValueError(f"seeds must lie in [0, {num_nodes}), got values in [{lo}, {hi}]")


def raise_unavailable(reason: str) -> None:
    """Raise `cherry.bench.system.SystemUnavailable` (the runner records the run as ``skipped``)."""
    raise SystemUnavailable(reason)


def draw_seed(generator: torch.Generator, high: int = 2**31 - 1) -> int:
    """An integer in ``[0, high)`` from ``generator``, to seed a library's own sampler RNG for a step
    (DGL's ``dgl.seed`` takes a C int, hence the 31-bit default)."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    return int(torch.randint(0, high, (1,), generator=generator).item())


@contextlib.contextmanager
def host_side():
    """Build host-side graph structures without the CPU tensor tracker seeing them.

    On a GPU the libraries keep the full graph (CSC, COO) in host memory, where no device allocator
    counts it; on the CPU the emulated device's tracker would count it as device memory. Disabling
    the active dispatch modes (the tracker is one) for the duration keeps the two devices comparable.
    """
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():
        yield
