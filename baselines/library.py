"""What the two library baselines (DGL, PyG) share: spec checks, the unavailable-system signal,
and a guard that keeps host-side graph structures out of the emulated device's memory count.

Both train a logical mini-batch in one piece with their library's own sampler and layers; neither can
micro-batch, so ``num_microbatches`` must be None or 1. Their models come from the same `ModelSpec`
as Cherry's (widths, heads, dropout), so the three systems train the same network.
"""
from __future__ import annotations

import contextlib

import torch

from cherry.systems.contract import SystemUnavailable
from cherry.data import Dataset
from cherry.models.spec import ModelSpec
from cherry.spec import RunSpec

LIBRARY_MODELS = ("sage", "gcn", "gat")


def model_spec(dataset: Dataset, spec: RunSpec, system_name: str) -> ModelSpec:
    """Check ``spec`` for a library baseline and return the model it describes.

    The spec is already valid (`cherry.spec`: one fanout per layer, K = 1 for a whole-batch system,
    no unknown options); what is left is what a library baseline cannot do: the MLP model.
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
    if spec.model not in LIBRARY_MODELS:
        raise ValueError(f"{system_name} runs models {LIBRARY_MODELS}, got model={spec.model!r}")
    return spec.model_spec(dataset)


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
    """Raise `cherry.systems.contract.SystemUnavailable` (the runner records the run as ``skipped``)."""
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
