"""What per-layer recomputation saves on users' own GATs: one seed's peak with and without it.

On a real graph (``../shared/graphs/<graph>.npz``, a random split of 20 training seeds per class
drawn with ``--seed``), a DGL GAT (``dgl.nn.GATConv`` through `cherry.interop.from_dgl`) and a PyG GAT
(``torch_geometric.nn.GATConv`` through `cherry.interop.from_pyg`), ``--layers`` layers of ``--heads``
heads of ``--head-dim`` over all neighbours, run one forward + backward on the all-neighbour blocks of
``--seeds`` training seeds, plain and under `cherry.execution.recompute.recomputed` (each module
called with one layer's graph checkpointed), and the peak bytes each allocates are measured by the
CPU tensor tracker (`cherry.execution.memory_probe`: inputs and activations, not the parameters).
Reported per model: the blocks' sources and edges per layer, both peaks and their ratio. A library
that does not import is skipped in one line. Deterministic (no repeats needed).
Run: ``PYTHONPATH=. python -m benchmarks.recompute_units [--graph amazon_computers] [--layers 4]``.
"""
from __future__ import annotations

import argparse

import torch
from torch import nn


def dgl_gat(in_dim: int, num_classes: int, layers: int, heads: int, head_dim: int, feat_drop: float = 0.2):
    """A DGL GAT as a user writes it, looping its own ``GATConv`` s over the blocks, through `from_dgl`."""
    from cherry.compat import import_dgl
    from cherry.interop import from_dgl

    dglnn = import_dgl().nn
    dims = [in_dim] + [heads * head_dim] * (layers - 1)

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList(
                [dglnn.GATConv(dims[i], head_dim, heads, feat_drop=feat_drop, allow_zero_in_degree=True)
                 for i in range(layers - 1)] + [dglnn.GATConv(dims[-1], num_classes, 1, allow_zero_in_degree=True)])
            self.drop = nn.Dropout(0.5)

        def forward(self, blocks, x):
            h = x
            for i, (conv, block) in enumerate(zip(self.convs, blocks)):
                h = conv(block, h)
                h = self.drop(h.flatten(1).relu()) if i < layers - 1 else h.mean(1)
            return h

    return from_dgl(GAT())


def pyg_gat(in_dim: int, num_classes: int, layers: int, heads: int, head_dim: int):
    """A PyG GAT in the per-hop form (``model(x, adjs)``), through `from_pyg`."""
    from torch_geometric.nn import GATConv

    from cherry.interop import from_pyg

    dims = [in_dim] + [heads * head_dim] * (layers - 1)

    class GAT(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([GATConv(dims[i], head_dim, heads=heads, add_self_loops=False)
                                        for i in range(layers - 1)]
                                       + [GATConv(dims[-1], num_classes, heads=1, add_self_loops=False)])
            self.drop = nn.Dropout(0.5)

        def forward(self, x, adjs):
            for i, (edge_index, _, size) in enumerate(adjs):
                x = self.convs[i]((x, x[: size[1]]), edge_index)
                x = self.drop(x.relu()) if i < layers - 1 else x
            return x

    return from_pyg(GAT())


def peaks(model, dataset, blocks) -> tuple[int, int]:
    """``(plain, recomputed)`` peak bytes of one forward + backward of ``model`` on ``blocks``."""
    from cherry.execution.memory_probe import _peak_of_step
    from cherry.execution.recompute import recomputed
    from cherry.models.dropout import set_dropout_step

    set_dropout_step(model, 1)
    cpu = torch.device("cpu")
    plain = _peak_of_step(model, blocks, dataset.features, dataset.labels, cpu)
    with recomputed(model):
        again = _peak_of_step(model, blocks, dataset.features, dataset.labels, cpu)
    return plain, again


def main(argv=None) -> int:
    from cherry.compat import dgl_available, pyg_available
    from cherry.data import load_dataset
    from cherry.sampling import NeighborSampler

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", default="amazon_computers")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kinds", default="dgl,pyg")
    p.add_argument("--root", default=None, help="datasets root (default: cherry's)")
    args = p.parse_args(argv)
    dataset = load_dataset(f"{args.graph}.npz?split=random:20,30", root=args.root)
    blocks = NeighborSampler(dataset.graph, [-1] * args.layers).sample(
        dataset.train_idx[: args.seeds], torch.Generator().manual_seed(args.seed))
    print(f"{args.graph}, {args.seeds} seed(s), all neighbours; per layer (sources, edges): "
          + ", ".join(f"({b.num_src}, {b.num_edges})" for b in blocks.layers))
    for kind in args.kinds.split(","):
        ok, reason = (dgl_available() if kind == "dgl" else pyg_available())
        if not ok:
            print(f"{kind}: skipped ({reason})")
            continue
        torch.manual_seed(args.seed)
        build = dgl_gat if kind == "dgl" else pyg_gat
        model = build(dataset.feature_dim, dataset.num_classes, args.layers, args.heads, args.head_dim)
        plain, again = peaks(model, dataset, blocks)
        print(f"{kind} GAT {args.layers} layers x {args.heads} heads x {args.head_dim}: plain peak "
              f"{plain / 2**20:.1f} MiB, recomputed {again / 2**20:.1f} MiB, ratio {again / plain:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
