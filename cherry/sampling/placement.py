"""Where a run builds its micro-batches: on the device (graph resident in device memory, sampling and
slicing by the CUDA kernels) or on the host (graph in pinned host memory, blocks copied once per step).

`choose_construction(graph, device, ...)` decides from the graph's bytes and the device's free
memory: device-resident when the CSC arrays plus ``headroom`` (the activations' share of free memory
that must stay free) fit, host otherwise; on a CPU device there is nothing to decide. The decision,
its inputs and its reason are a frozen `ConstructionChoice`, meant to be recorded in a run's stats.
`place_graph(graph, choice)` applies it (``Graph.to(device)`` or ``Graph.pin_memory()``).

The choice is pure given its inputs; ``free_bytes`` defaults to ``torch.cuda.mem_get_info`` (a
driver query, no stream sync), so pass it to make the choice reproducible.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import torch

from cherry.data.graph import Graph

DEVICE, PINNED_HOST, HOST = "device", "pinned-host", "host"


@dataclass(frozen=True)
class ConstructionChoice:
    """Where blocks are built, and why (``where``: "device", "pinned-host" or "host")."""

    where: str
    device: str
    graph_bytes: int
    free_bytes: Optional[int]
    headroom: float
    reason: str

    def as_dict(self) -> dict:
        return asdict(self)


def choose_construction(graph: Graph, device: torch.device | str, free_bytes: Optional[int] = None,
                        headroom: float = 0.5) -> ConstructionChoice:
    """Device-resident construction when ``graph.nbytes <= free_bytes * (1 - headroom)``.

    ``headroom`` in [0, 1): the share of free device memory kept for activations, features and the
    allocator's cache. ``free_bytes``: free device memory (default: asked of the driver).
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"graph must be a cherry.data.Graph, got {type(graph).__name__}")
    if isinstance(headroom, bool) or not isinstance(headroom, (int, float)) or not 0 <= headroom < 1:
        raise ValueError(f"headroom must be a number in [0, 1), got {headroom!r}")
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if free_bytes is not None and (isinstance(free_bytes, bool) or not isinstance(free_bytes, int) or free_bytes < 0):
        raise ValueError(f"free_bytes must be an int >= 0 or None, got {free_bytes!r}")
    graph_bytes = graph.nbytes
    if dev.type == "cpu":
        return ConstructionChoice(HOST, str(dev), graph_bytes, free_bytes, float(headroom),
                                  "the device is the CPU: blocks are built where they are used")
    if free_bytes is None:
        free_bytes = int(torch.cuda.mem_get_info(dev)[0])
    allowed = int(free_bytes * (1 - headroom))
    if graph_bytes <= allowed:
        return ConstructionChoice(DEVICE, str(dev), graph_bytes, free_bytes, float(headroom),
                                  f"graph {graph_bytes} B fits in {allowed} B ({1 - headroom:.0%} of free memory)")
    return ConstructionChoice(PINNED_HOST, str(dev), graph_bytes, free_bytes, float(headroom),
                              f"graph {graph_bytes} B exceeds {allowed} B ({1 - headroom:.0%} of free memory)")


def place_graph(graph: Graph, choice: ConstructionChoice) -> Graph:
    """``graph`` where ``choice`` says: on its device, in pinned host memory, or as it is."""
    if not isinstance(choice, ConstructionChoice):
        raise TypeError(f"choice must be a ConstructionChoice, got {type(choice).__name__}")
    if choice.where == DEVICE:
        return graph.to(choice.device)
    if choice.where == PINNED_HOST:
        return graph if graph.indptr.is_pinned() else graph.pin_memory()
    return graph
