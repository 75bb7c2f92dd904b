"""A PyG GraphSAGE model (per-hop bipartite form), micro-batched by Cherry with automatic K.

    python examples/pyg_model.py [--device-memory 2MiB]

The model is written as in PyG's NeighborSampler examples: forward(x, adjs) with one
(edge_index, e_id, size) per hop, input hop first, targets the first size[1] rows of x.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn
from torch.nn import functional as F
from torch_geometric.nn import SAGEConv


class SAGE(nn.Module):
    def __init__(self, in_dim: int, hidden: int, classes: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(in_dim, hidden), SAGEConv(hidden, classes)])
        self.dropout = nn.Dropout(dropout)  # made exact by Cherry (masks follow node ids)

    def forward(self, x, adjs):
        for i, (edge_index, _, size) in enumerate(adjs):
            x = self.convs[i]((x, x[: size[1]]), edge_index)
            if i != len(self.convs) - 1:
                x = self.dropout(F.relu(x))
        return x


def main(argv=None) -> dict:
    from cherry.data import load_dataset
    from cherry.execution import Trainer, check_exact
    from cherry.interop import from_pyg
    from cherry.memory import DeviceMemory
    from cherry.spec import make_spec

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dataset", default="synth-tiny")
    p.add_argument("--root", default=None)
    p.add_argument("--device-memory", default="2MiB")
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args(argv)

    dataset = load_dataset(args.dataset, args.root)
    results = {}
    for k in ("auto", 1):  # automatic K under the emulated capacity, then the whole batch
        spec = make_spec(dataset=args.dataset, root=args.root, fanouts=(10, 10), batch_size=512, epochs=args.epochs,
                         num_microbatches=k, device_memory_bytes=args.device_memory, lr=0.005, seed=0)
        torch.manual_seed(0)
        model = from_pyg(SAGE(dataset.feature_dim, 64, dataset.num_classes))
        with DeviceMemory("cpu", spec.device_memory_bytes if k == "auto" else None) as memory:
            trainer = Trainer(dataset, spec, memory=memory, model=model)
            epochs = list(trainer.fit())
            trainer.close()
        results[k] = epochs
        print(f"K={k}: max K used {max(e.max_microbatches for e in epochs)}, losses "
              f"{[round(e.loss, 5) for e in epochs]}, valid_acc {epochs[-1].valid_acc:.4f}")
    torch.manual_seed(0)
    report = check_exact(from_pyg(SAGE(dataset.feature_dim, 64, dataset.num_classes)), dataset, num_microbatches=4)
    print(f"gradient at K=4 vs K=1: largest relative difference {report.max_rel_diff:.2e}")
    return {"auto": results["auto"], "k1": results[1], "report": report}


if __name__ == "__main__":
    main()
