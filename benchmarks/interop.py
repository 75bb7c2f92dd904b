"""`cherry bench interop`: what running a DGL model through `cherry.interop.from_dgl` costs.

One process, one spec: Cherry's own GraphSAGE (mean) and a DGL GraphSAGE (``dgl.nn.SAGEConv``, mean,
the same widths) through `from_dgl`, each in its own `Trainer` with the same fixed K. Every batch is
sampled and planned once and the same `PlannedBatch` (the same micro-batches) is stepped by both, in
alternating order; the first ``--warmup`` batches are not timed. Printed: the median step time of each
and the ratio DGL-through-Cherry / Cherry with its bootstrap interval (`cherry.report.stats`), rounds
of ``--round`` batches counting as runs, plus the median time to convert one micro-batch's blocks.
"""
from __future__ import annotations

import json
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

from benchmarks.threads import keeps_threads


def _dgl_sage(in_dim: int, hidden: int, classes: int, num_layers: int) -> nn.Module:
    from cherry.compat import import_dgl

    dglnn = import_dgl().nn
    dims = [in_dim] + [hidden] * (num_layers - 1) + [classes]

    class SAGE(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([dglnn.SAGEConv(a, b, "mean") for a, b in zip(dims[:-1], dims[1:])])

        def forward(self, blocks, x):
            h = x
            for i, (layer, block) in enumerate(zip(self.layers, blocks)):
                h = layer(block, h)
                if i != len(self.layers) - 1:
                    h = F.relu(h)
            return h

    return SAGE()


@keeps_threads
def run(args) -> int:
    from cherry.data import load_dataset
    from cherry.execution import Trainer
    from cherry.interop import from_dgl, to_dgl_blocks
    from cherry.report.stats import median_ratio
    from cherry.sampling import sampling_generator, spec_seed_batches
    from cherry.spec import make_spec

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = make_spec(dataset=args.dataset, root=args.root, aggr="mean", hidden=args.hidden,
                     num_layers=len(args.fanouts), fanouts=args.fanouts, batch_size=args.batch_size,
                     num_microbatches=args.microbatches, seed=args.seed, evaluate=False)
    dataset = load_dataset(spec.dataset, spec.root)
    torch.manual_seed(args.seed)
    ours = Trainer(dataset, spec)
    dgl_model = from_dgl(_dgl_sage(dataset.feature_dim, args.hidden, dataset.num_classes, len(args.fanouts)))
    theirs = Trainer(dataset, spec, model=dgl_model)
    seeds = spec_seed_batches(spec, dataset.train_idx, 0)
    total = args.warmup + args.steps
    seeds = (seeds * (total // max(len(seeds), 1) + 1))[:total]
    gen = sampling_generator(args.seed)
    times = {"cherry": [], "dgl": []}
    convert_s = []
    try:
        for i, batch_seeds in enumerate(seeds):
            planned = ours.prepare(batch_seeds, gen)
            order = ("cherry", "dgl") if i % 2 == 0 else ("dgl", "cherry")
            for name in order:
                trainer = ours if name == "cherry" else theirs
                started = time.perf_counter()
                trainer.step(planned)
                if i >= args.warmup:
                    times[name].append(time.perf_counter() - started)
            if i >= args.warmup:
                for mb in planned.plan.microbatches:
                    started = time.perf_counter()
                    to_dgl_blocks(mb)
                    convert_s.append(time.perf_counter() - started)
    finally:
        ours.close()
        theirs.close()
    rounds = max(1, args.round)
    split = lambda xs: [xs[j:j + rounds] for j in range(0, len(xs), rounds)]  # noqa: E731
    ratio = median_ratio(split(times["dgl"]), split(times["cherry"]))
    result = {"dataset": spec.dataset, "batch_size": spec.batch_size, "fanouts": list(spec.fanouts),
              "hidden": spec.hidden, "K": spec.num_microbatches, "steps": args.steps,
              "cherry_median_step_s": statistics.median(times["cherry"]),
              "dgl_via_from_dgl_median_step_s": statistics.median(times["dgl"]),
              "ratio_dgl_over_cherry": ratio.value if ratio else None,
              "ratio_interval": [ratio.low, ratio.high] if ratio else None,
              "convert_median_s_per_microbatch": statistics.median(convert_s) if convert_s else None}
    print(f"{spec.dataset} batch {spec.batch_size} fanouts {list(spec.fanouts)} hidden {spec.hidden} K={spec.num_microbatches},"
          f" {args.steps} timed steps each (interleaved)")
    print(f"  cherry SAGE           median step {result['cherry_median_step_s'] * 1e3:8.1f} ms")
    print(f"  DGL SAGE via from_dgl median step {result['dgl_via_from_dgl_median_step_s'] * 1e3:8.1f} ms")
    if ratio:
        print(f"  ratio DGL/cherry {ratio.text()} (95% bootstrap interval, rounds of {rounds} steps as runs)")
    print(f"  block conversion: {result['convert_median_s_per_microbatch'] * 1e3:.2f} ms per micro-batch (median)")
    if args.json:
        from cherry.io import write_json_atomic

        write_json_atomic(args.json, result)
    return 0
