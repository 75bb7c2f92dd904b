"""`cherry verify`: show that K micro-batches give the mini-batch's gradient (exit 1 above tolerance)."""
from __future__ import annotations

import argparse

from cherry.cli.options import add_model_options, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare the K-micro-batch gradient with the whole batch's")
    add_model_options(p)
    p.add_argument("--microbatches", type=positive_int, required=True, metavar="K")
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed relative difference")
    p.add_argument("--ordering", choices=("metis", "none", "random"), default="metis")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from cherry.execution.verify import compare_gradients
    from cherry.planning import MemoryModel
    from cherry.sampling import NeighborSampler
    from cherry.session import TrainingSession, seed_rank_for

    args.device_memory = None
    trainer_args = TrainingSession.from_args(args, None)
    trainer = trainer_args.build()
    ds = trainer.dataset
    gen = torch.Generator().manual_seed(args.seed)
    seeds = ds.train_idx[torch.randperm(ds.train_idx.numel(), generator=gen)[: args.batch_size]]
    blocks = NeighborSampler(ds.graph, list(args.fanouts)).sample(seeds, gen)
    rank = seed_rank_for(ds, args.ordering, args.seed)
    diffs = compare_gradients(trainer.model, MemoryModel.for_model(trainer.spec), blocks, ds.features,
                              ds.labels, args.microbatches, rank, args.device)
    trainer.close()
    width = max(len(d.name) for d in diffs)
    print(f"{'parameter':<{width}}  {'max_abs_diff':>12}  {'max_rel_diff':>12}")
    for d in diffs:
        print(f"{d.name:<{width}}  {d.max_abs_diff:12.3e}  {d.max_rel_diff:12.3e}")
    worst = max(d.max_rel_diff for d in diffs)
    ok = worst <= args.tolerance
    print(f"K={args.microbatches} vs K=1 on {blocks.num_seeds} seeds: largest relative difference "
          f"{worst:.3e} ({'within' if ok else 'ABOVE'} tolerance {args.tolerance:g})")
    return 0 if ok else 1
