"""`cherry verify`: show that K micro-batches give the mini-batch's gradient (exit 1 above tolerance).

The options are the run spec's (`cherry.cli.options`); ``--microbatches K`` is required. The batch is
the run's first (`cherry.sampling.loader`), sampled once; both gradients come from the executor on
those same blocks and weights. With ``--nproc N`` the comparison is N data-parallel ranks (each with
K micro-batches, then the all-reduce) against one process with K = 1 on the same batch
(`cherry.execution.distributed_check`), and the ranks' parameters after a step must be identical.
"""
from __future__ import annotations

import argparse

from cherry.cli.options import add_cherry_option, add_ordering_option, add_spec_options, spec_from_args

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare the K-micro-batch gradient with the whole batch's")
    add_spec_options(p)  # every spec key, so a workflow check's settings pass through unchanged
    add_ordering_option(p)
    add_cherry_option(p, "recompute")  # on: the K-micro-batch gradient recomputed layer by layer
    p.add_argument("--tolerance", type=float, default=1e-4, help="largest allowed relative difference")
    p.set_defaults(func=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    import math

    from cherry.data import load_dataset
    from cherry.execution.verify import compare_gradients
    from cherry.models import build_model
    from cherry.planning import MemoryModel, seed_rank
    from cherry.sampling import BatchLoader, NeighborSampler, sampling_generator, spec_seed_batches

    if not (math.isfinite(args.tolerance) and args.tolerance > 0):
        raise ValueError(f"--tolerance: expected a positive number, got {args.tolerance}")
    spec = spec_from_args(args, args._parser, epochs=1)
    if spec.num_microbatches is None:
        raise ValueError("--microbatches: expected a fixed K >= 1 to compare with K = 1, got 'auto'")
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device: cuda was asked for, but no CUDA device is available")
    if spec.nproc > 1:
        return _verify_distributed(spec, args.tolerance)
    dataset = load_dataset(spec.dataset, spec.root)
    import torch

    torch.manual_seed(spec.seed)
    model_spec = spec.model_spec(dataset)
    model = build_model(model_spec).to(spec.device)
    sampler = NeighborSampler(dataset.graph, spec.fanouts)
    first = spec_seed_batches(spec, dataset.train_idx, epoch=0)[:1]
    with BatchLoader(first, sampling_generator(spec.seed), sampler.sample) as loader:
        blocks = next(iter(loader)).prepared
    from cherry.execution.exactness import check_functional, guard_model

    guard_model(model)  # a user's model: BatchNorm refused, nn.Dropout made exact, functional dropout refused
    check_functional(model, blocks.to(spec.device),
                     dataset.features.index_select(0, blocks.input_nodes).to(spec.device))
    k = min(spec.num_microbatches, blocks.num_seeds)
    rank = seed_rank(dataset, spec.ordering, spec.seed)
    recompute = "on" if spec.options.get("recompute") == "on" else "off"  # auto: a fixed K needs none
    diffs = compare_gradients(model, MemoryModel.for_model(model_spec), blocks, dataset.features, dataset.labels,
                              k, rank, spec.device, recompute=recompute)
    width = max(len(d.name) for d in diffs)
    print(f"{'parameter':<{width}}  {'max_abs_diff':>12}  {'max_rel_diff':>12}")
    for d in diffs:
        print(f"{d.name:<{width}}  {d.max_abs_diff:12.3e}  {d.max_rel_diff:12.3e}")
    worst = max(d.max_rel_diff for d in diffs)
    ok = worst <= args.tolerance
    print(f"K={k}{' (recomputed)' if recompute == 'on' else ''} vs K=1 on {blocks.num_seeds} seeds: largest relative difference "
          f"{worst:.3e} ({'within' if ok else 'ABOVE'} tolerance {args.tolerance:g})")
    return 0 if ok else 1


def _verify_distributed(spec, tolerance: float) -> int:
    from cherry.execution.distributed_check import compare_distributed

    check = compare_distributed(spec, num_steps=2)
    width = max(len(d.name) for d in check.differences)
    print(f"{'parameter':<{width}}  {'max_abs_diff':>12}  {'max_rel_diff':>12}")
    for d in check.differences:
        print(f"{d.name:<{width}}  {d.max_abs_diff:12.3e}  {d.max_rel_diff:12.3e}")
    ok = check.max_rel_diff <= tolerance and check.parameters_identical
    print(f"{spec.nproc} ranks (K per rank {[k[0] for k in check.rank_microbatches]}) vs one process with K=1 on "
          f"{spec.batch_size} seeds: largest relative difference {check.max_rel_diff:.3e} "
          f"({'within' if check.max_rel_diff <= tolerance else 'ABOVE'} tolerance {tolerance:g}); parameters "
          f"{'identical' if check.parameters_identical else 'DIFFERENT'} on every rank after 2 steps")
    return 0 if ok else 1
