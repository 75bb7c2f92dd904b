"""Where a run builds its micro-batches: on the device (graph resident in device memory, sampling and
slicing by the CUDA kernels) or on the host (graph in pinned host memory, blocks copied once per step).

`choose_construction(graph, device, ...)` decides from the graph's bytes and the device's free
memory. ``extra_bytes`` adds the features and labels that live beside a device-resident graph, so
that gathers by its device ids stay on the device. The graph is device-resident when these fit in
free memory less ``headroom`` (the activations' share that must stay free), host otherwise. On a CPU
device there is nothing to decide. The decision, its inputs and its reason are a frozen `ConstructionChoice`, recorded
in a run's record and summary. `place_graph(graph, choice)` applies it to a graph (``Graph.to(device)``
or ``Graph.pin_memory()``), `place_dataset(dataset, choice)` to a dataset (graph, features and labels
on the device; or the pinned graph with host features).

The choice is pure given its inputs; ``free_bytes`` defaults to ``torch.cuda.mem_get_info`` (a
driver query, no stream sync), so pass it to make the choice reproducible.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

import torch

from cherry.data.graph import Dataset, Graph

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
    extra_bytes: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def choose_construction(graph: Graph, device: torch.device | str, free_bytes: Optional[int] = None,
                        headroom: float = 0.5, extra_bytes: int = 0) -> ConstructionChoice:
    """Device-resident construction when ``graph.nbytes + extra_bytes <= free_bytes * (1 - headroom)``.

    ``headroom`` in [0, 1): the share of free device memory kept for activations, features and the
    allocator's cache. ``free_bytes``: free device memory (default: asked of the driver).
    ``extra_bytes`` (>= 0): what moves to the device with the graph (features, labels).
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
    if isinstance(extra_bytes, bool) or not isinstance(extra_bytes, int) or extra_bytes < 0:
        raise ValueError(f"extra_bytes must be an int >= 0, got {extra_bytes!r}")
    graph_bytes = graph.nbytes
    if dev.type == "cpu":
        return ConstructionChoice(HOST, str(dev), graph_bytes, free_bytes, float(headroom),
                                  "the device is the CPU: blocks are built where they are used", extra_bytes)
    if free_bytes is None:
        free_bytes = int(torch.cuda.mem_get_info(dev)[0])
    allowed = int(free_bytes * (1 - headroom))
    need = graph_bytes + extra_bytes
    what = f"graph {graph_bytes} B" + (f" + features and labels {extra_bytes} B" if extra_bytes else "")
    if need <= allowed:
        return ConstructionChoice(DEVICE, str(dev), graph_bytes, free_bytes, float(headroom),
                                  f"{what} fit in {allowed} B ({1 - headroom:.0%} of free memory)", extra_bytes)
    return ConstructionChoice(PINNED_HOST, str(dev), graph_bytes, free_bytes, float(headroom),
                              f"{what} exceed {allowed} B ({1 - headroom:.0%} of free memory)", extra_bytes)


def resident_bytes(dataset: Dataset) -> tuple[int, int]:
    """``(graph bytes, features + labels bytes)`` of ``dataset``: what a device-resident construction
    puts on the device."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
    extra = sum(t.numel() * t.element_size() for t in (dataset.features, dataset.labels))
    return dataset.graph.nbytes, extra


def place_dataset(dataset: Dataset, choice: ConstructionChoice) -> Dataset:
    """``dataset`` as construction ``choice`` needs it: on the device (graph, features, labels and
    split), with a pinned graph, or as it is."""
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a cherry.data.Dataset, got {type(dataset).__name__}")
    if not isinstance(choice, ConstructionChoice):
        raise TypeError(f"choice must be a ConstructionChoice, got {type(choice).__name__}")
    if choice.where == DEVICE:
        return dataset.to(choice.device)
    if choice.where == PINNED_HOST:
        import dataclasses

        return dataclasses.replace(dataset, graph=place_graph(dataset.graph, choice))
    return dataset


def place_graph(graph: Graph, choice: ConstructionChoice) -> Graph:
    """``graph`` where ``choice`` says: on its device, in pinned host memory, or as it is."""
    if not isinstance(choice, ConstructionChoice):
        raise TypeError(f"choice must be a ConstructionChoice, got {type(choice).__name__}")
    if choice.where == DEVICE:
        return graph.to(choice.device)
    if choice.where == PINNED_HOST:
        return graph if graph.indptr.is_pinned() else graph.pin_memory()
    return graph
