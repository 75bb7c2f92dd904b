"""Your own graph as arrays and your own GIN layer, trained exactly by Cherry with automatic K.

    python examples/own_arrays_gin.py [--device-memory 2MiB]

Steps: build a `Dataset` from numpy arrays (`Dataset.from_arrays`), register it by name, write a layer
to Cherry's layer contract (a module called as layer(block, h) returning the destination rows, using
`cherry.ops.aggregate_block`), register it as a model, and train it from a run spec like a built-in.
"""
from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn

from cherry.data import Dataset, register_dataset
from cherry.models import register_model
from cherry.ops import aggregate_block


class GINLayer(nn.Module):
    """GIN (Xu et al. 2019): MLP((1 + eps) * h_v + sum of v's in-neighbours)."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.eps = nn.Parameter(torch.zeros(()))
        self.mlp = nn.Sequential(nn.Linear(in_dim, out_dim), nn.ReLU(), nn.Linear(out_dim, out_dim))

    def forward(self, block, h):
        # h holds the block's source rows; its destinations are the first block.num_dst of them
        return self.mlp((1 + self.eps) * h[: block.num_dst] + aggregate_block(block, h, "sum"))


def my_arrays(num_nodes: int = 3000, classes: int = 7, seed: int = 0):
    """A homophilous random graph with 7 classes (stands in for your own data)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, num_nodes)
    src = rng.integers(0, num_nodes, 8 * num_nodes)
    same = rng.random(src.size) < 0.8  # most edges stay inside their source's class
    by_class = [np.flatnonzero(labels == c) for c in range(classes)]
    dst = np.where(same, [rng.choice(by_class[c]) for c in labels[src]], rng.integers(0, num_nodes, src.size))
    features = (np.eye(classes)[labels] * 0.6 + rng.normal(size=(num_nodes, classes))).astype(np.float32)
    features = np.concatenate([features, rng.normal(size=(num_nodes, 9)).astype(np.float32)], axis=1)
    order = rng.permutation(num_nodes)
    return np.stack([src, dst]), features, labels, order[:1500], order[1500:2000], order[2000:]


def main(argv=None) -> dict:
    from cherry.data import load_dataset
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory
    from cherry.spec import make_spec

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device-memory", default="2MiB")
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args(argv)

    edge_index, x, y, train, valid, test = my_arrays()
    register_dataset("my-graph", Dataset.from_arrays("my-graph", edge_index, x, y, train, valid, test), replace=True)
    register_model("gin", layer=lambda dims: GINLayer(dims.in_dim, dims.out_dim), replace=True)
    dataset = load_dataset("my-graph")
    results = {}
    for k in ("auto", 1):
        spec = make_spec(dataset="my-graph", model="gin", hidden=32, fanouts=(10, 10), batch_size=500,
                         epochs=args.epochs, num_microbatches=k, device_memory_bytes=args.device_memory, lr=0.01,
                         optimizer="adamw", weight_decay=5e-4, input_dropout=0.1, dropout=0.3, seed=0)
        with DeviceMemory("cpu", spec.device_memory_bytes if k == "auto" else None) as memory:
            trainer = Trainer(dataset, spec, memory=memory)
            epochs = list(trainer.fit())
            trainer.close()
        results[k] = epochs
        print(f"K={k}: max K used {max(e.max_microbatches for e in epochs)}, losses "
              f"{[round(e.loss, 5) for e in epochs]}, valid_acc {epochs[-1].valid_acc:.4f}")
    return {"auto": results["auto"], "k1": results[1], "num_classes": dataset.num_classes}


if __name__ == "__main__":
    main()
