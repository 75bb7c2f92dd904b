"""`cherry verify`: show that K micro-batches give the mini-batch's gradient (exit 1 above tolerance).

The options are the run spec's (`cherry.cli.options`); ``--microbatches K`` is a fixed K (4 unless
given; "auto" is refused). The batch is
the run's first (`cherry.sampling.loader`), sampled once; both gradients come from the executor on
those same blocks and weights. With ``--nproc N`` the comparison is N data-parallel ranks (each with
K micro-batches, then the all-reduce) against one process with K = 1 on the same batch
(`cherry.execution.distributed_check`), and the ranks' parameters after a step must be identical.
``--json FILE`` also writes the result as a record (`cherry.bench.verify_record`, the schema
``workflow/schemas/verify.schema.yaml``), which the workflow's summary reads.
"""
from __future__ import annotations

import argparse

from cherry.bench.verify_record import VerifyRecord
from cherry.outputs import add_output
from cherry.cli.options import add_cherry_options, add_spec_options, spec_from_args

# verify compares a fixed K with K = 1: "auto" (which may choose K = 1) is refused, and K = 4 is its own
# default, so that `cherry verify --dataset D` runs as its help says
_OWN_DEFAULTS = {"num_microbatches": 4}
_REFUSED = {"num_microbatches": ("auto", "cherry verify compares a fixed K with K = 1")}

def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="compare the K-micro-batch gradient with the whole batch's")
    # every spec key and cherry option, so a workflow check's settings pass through unchanged; of the
    # options, ordering and recompute (on: the K-micro-batch gradient recomputed layer by layer) apply
    add_spec_options(p, defaults=_OWN_DEFAULTS, refused=_REFUSED)
    add_cherry_options(p)
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest allowed relative difference (default: %(default)g)")
    add_output(p, "--json", default=None, metavar="FILE",
                   help="also write the result as JSON (workflow/schemas/verify.schema.yaml)")
    p.set_defaults(func=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    import math
    import os

    from cherry.data import load_dataset
    from cherry.execution.verify import compare_gradients
    from cherry.models import build_model
    from cherry.planning import MemoryModel, seed_rank
    from cherry.sampling import BatchLoader, NeighborSampler, sampling_generator, spec_seed_batches

    if not (math.isfinite(args.tolerance) and args.tolerance > 0):
        raise ValueError(f"--tolerance: expected a positive number, got {args.tolerance}")
    if args.json is not None and (not args.json or os.path.isdir(args.json)
                                  or not os.path.isdir(os.path.dirname(os.path.abspath(args.json)))):
        raise ValueError(f"--json: expected a file path in an existing directory, got {args.json!r}")
    spec = spec_from_args(args, args._parser, epochs=1)
    if spec.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise ValueError("--device: cuda was asked for, but no CUDA device is available")
    if spec.nproc > 1:
        return _verify_distributed(spec, args.tolerance, args.json)
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
    record = VerifyRecord.from_differences(diffs, k, blocks.num_seeds, args.tolerance)
    _print_parameters(record)
    print(f"K={k}{' (recomputed)' if recompute == 'on' else ''} vs K=1 on {blocks.num_seeds} seeds: largest "
          f"relative difference {record.max_rel_diff:.3e} ({'within' if record.within else 'ABOVE'} tolerance "
          f"{args.tolerance:g})")
    return _finish(record, args.json)


def _print_parameters(record) -> None:
    width = max(len(p.name) for p in record.parameters)
    print(f"{'parameter':<{width}}  {'max_abs_diff':>12}  {'max_rel_diff':>12}")
    for p in record.parameters:
        print(f"{p.name:<{width}}  {p.max_abs_diff:12.3e}  {p.max_rel_diff:12.3e}")


def _finish(record, json_path) -> int:
    """Write the record where ``--json`` asks; the exit status is the verdict."""
    from cherry.bench.verify_record import write_verify_record

    if json_path:
        write_verify_record(record, json_path)
    return 0 if record.passed else 1


def _verify_distributed(spec, tolerance: float, json_path) -> int:
    from cherry.execution.distributed_check import compare_distributed

    check = compare_distributed(spec, num_steps=2)
    ks = [k[0] for k in check.rank_microbatches]
    record = VerifyRecord.from_differences(check.differences, max(ks), spec.batch_size, tolerance,
                                           rank_microbatches=ks, parameters_identical=check.parameters_identical)
    _print_parameters(record)
    print(f"{spec.nproc} ranks (K per rank {ks}) vs one process with K=1 on "
          f"{spec.batch_size} seeds: largest relative difference {record.max_rel_diff:.3e} "
          f"({'within' if record.within else 'ABOVE'} tolerance {tolerance:g}); parameters "
          f"{'identical' if check.parameters_identical else 'DIFFERENT'} on every rank after 2 steps")
    return _finish(record, json_path)
