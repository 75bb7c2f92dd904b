"""Input dropout's cost in device memory: the K = 1 peak of one training step with and without it.

On Amazon-Photo (``../shared/graphs/amazon_photo.npz``, 745 features; GCN, hidden 16, two layers,
fanouts all neighbours, one batch of 20 training seeds per class drawn with ``--seed``) one optimizer
step at K = 1 runs under the emulated device tracker (`cherry.memory.DeviceMemory` on the CPU) with
input dropout 0 and ``--p``, for each way of applying the exact mask:
- ``legacy``: the mask materialised in full (`dropout_keep`: int64 hash words and
  temporaries of shape [rows, width], then a float mask that autograd keeps);
- ``reference``: `cherry.ops.node_dropout`'s chunked PyTorch reference (the fallback without the extension);
- ``native``: the extension's kernel (when it is in use).
Reported per way: the measured peak, what dropout adds to it, that over the gathered input features'
own bytes (target: at most 1 for the native op; the reference may add its chunk transient, bounded by
`cherry.ops.reference_dropout.transient_bytes`), the memory model's estimate, and whether the step fits
an emulated capacity of the no-dropout peak plus the features' bytes. Exit status 1 when a target is
missed or the losses differ. Masks do not depend on the way (tested in
tests/ops/test_dropout_ops.py), so the losses agree; the script checks that too.
Run: ``PYTHONPATH=. python -m benchmarks.dropout_memory``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

import torch

GRAPH_FILE = "amazon_photo.npz"
TARGET_ADDED_OVER_FEATURES = 1.0
MODES = ("legacy", "reference", "native")


def graphs_dir() -> Path:
    """Where the real graphs are: the project's one rule (`cherry.data.gnn_benchmark.graphs_dir`)."""
    from cherry.data.gnn_benchmark import graphs_dir as project_graphs_dir

    return project_graphs_dir()


def load_graph_npz(path: Path, per_class: int, seed: int, root=None):
    """The Dataset of a gnn-benchmark npz read by the project's loader (`cherry.data.gnn_benchmark`:
    symmetrised graph, dense float32 features, converted once under the data root ``root``) whose
    training split is ``per_class`` random labelled nodes of every class (split ``random:PER_CLASS,0@SEED``)."""
    from cherry.data import load_dataset

    return load_dataset(f"{path}?split=random:{per_class},0@{seed}", root)


@contextlib.contextmanager
def dropout_way(mode: str):
    """Apply the exact mask the way ``mode`` says while inside."""
    from cherry.models import dropout as model_dropout
    from cherry.ops import dropout as op_dropout

    saved = (model_dropout.apply_dropout, op_dropout._native_ok)
    if mode == "legacy":
        def legacy(h, nodes, p, step_seed, layer):
            keep = model_dropout.dropout_keep(nodes.to(h.device), h.shape[1], p, step_seed, layer)
            return h * keep.to(h.dtype) * (1.0 / (1.0 - p))
        model_dropout.apply_dropout = legacy
    elif mode == "reference":
        op_dropout._native_ok = lambda op, tensor: False
    try:
        yield
    finally:
        model_dropout.apply_dropout, op_dropout._native_ok = saved


def one_step(ds, blocks, p: float, capacity_bytes=None) -> dict:
    """One K = 1 optimizer step of a fresh GCN with input dropout ``p`` under the tracker."""
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.memory import DeviceMemory
    from cherry.models import ModelSpec, build_model
    from cherry.planning import MemoryModel
    from cherry.planning.shapes import BatchShape

    torch.manual_seed(0)
    spec = ModelSpec("gcn", ds.feature_dim, 16, ds.num_classes, 2, input_dropout=p)
    model = build_model(spec).train()
    estimate = MemoryModel.for_model(spec).estimate_bytes(BatchShape.of(blocks))
    try:
        with DeviceMemory("cpu", capacity_bytes) as memory:
            ex = MicrobatchExecutor(model, torch.optim.SGD(model.parameters(), lr=0.1), MemoryModel.for_model(spec),
                                    ExecutorOptions.for_k(1, dropout_seed=1), memory=memory)
            stats = ex.step(blocks, ds.features, ds.labels)
            ex.close()
            # the executor resets the tracker's peak at each micro-batch window: the step's own
            # measured peak covers the windows the tracker's running peak no longer shows
            peak = max(memory.peak_bytes(), stats.measured_peak_bytes or 0)
            return dict(peak_bytes=peak, loss=stats.loss, estimate_bytes=estimate, fits=True)
    except torch.OutOfMemoryError:
        return dict(peak_bytes=None, loss=None, estimate_bytes=estimate, fits=False)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p", type=float, default=0.5, help="input dropout probability")
    parser.add_argument("--per-class", type=int, default=20, help="training seeds per class in the batch")
    parser.add_argument("--seed", type=int, default=0, help="seeds the split and the sampler")
    parser.add_argument("--graphs-dir", type=Path, default=None,
                        help="directory of amazon_photo.npz (default: $CHERRY_GRAPHS, else ../shared/graphs)")
    parser.add_argument("--root", default=None, help="data root the npz is converted into once (default: cherry's)")
    args = parser.parse_args(argv)
    if not 0.0 < args.p < 1.0:
        parser.error(f"--p must be in (0, 1), got {args.p}")
    path = (args.graphs_dir or graphs_dir()) / GRAPH_FILE
    if not path.exists():
        parser.error(f"{path} is missing (give --graphs-dir, the directory of {GRAPH_FILE})")
    from cherry.ops import extension_available, extension_status
    from cherry.ops import reference_dropout as ref
    from cherry.sampling import NeighborSampler

    ds = load_graph_npz(path, args.per_class, args.seed, args.root)
    blocks = NeighborSampler(ds.graph, [-1, -1]).sample(ds.train_idx, torch.Generator().manual_seed(args.seed))
    feature_bytes = blocks.input_nodes.numel() * ds.feature_dim * 4
    print(f"{path.name}: {blocks.num_seeds} seeds, {blocks.input_nodes.numel()} input nodes x {ds.feature_dim} "
          f"features = {feature_bytes / 2**20:.2f} MiB gathered; GCN hidden 16, fanouts (-1, -1), K = 1, "
          f"emulated device (CPU tensor tracker); {extension_status()}")
    base = one_step(ds, blocks, 0.0)
    capacity = base["peak_bytes"] + feature_bytes
    print(f"input dropout 0: peak {base['peak_bytes'] / 2**20:.2f} MiB, estimate {base['estimate_bytes'] / 2**20:.2f} MiB")
    print(f"| way | peak MiB (p={args.p}) | added MiB | added / features | estimate MiB | fits {capacity / 2**20:.2f} MiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    losses, ok = [], True
    for mode in MODES:
        if mode == "native" and not extension_available():
            print("| native | (extension not in use) | | | | |")
            continue
        with dropout_way(mode):
            run = one_step(ds, blocks, args.p)
            fits = one_step(ds, blocks, args.p, capacity)["fits"]
        added = run["peak_bytes"] - base["peak_bytes"]
        losses.append(run["loss"])
        # the target holds for the native op; the reference may add its bounded chunk transient
        transient = ref.transient_bytes(ds.feature_dim) if mode == "reference" else 0
        allowed = TARGET_ADDED_OVER_FEATURES * feature_bytes + transient
        ok &= mode == "legacy" or added <= allowed
        print(f"| {mode} | {run['peak_bytes'] / 2**20:.2f} | {added / 2**20:.2f} | {added / feature_bytes:.2f} | "
              f"{run['estimate_bytes'] / 2**20:.2f} | {'yes' if fits else 'out of memory'} |")
    same = all(loss == losses[0] for loss in losses)
    print(f"losses identical across ways: {same}; target (input dropout adds at most the features' bytes; "
          f"the reference also its chunk bound, {ref.transient_bytes(ds.feature_dim) / 2**20:.2f} MiB): {'met' if ok else 'NOT met'}")
    return 0 if ok and same else 1


if __name__ == "__main__":
    raise SystemExit(main())
