"""`cherry bench engine`: what micro-batching costs Cherry, measured side by side in one run.

For each aggregator, the same pre-sampled mini-batches are trained at K = 1 and at each K asked for
(fixed K, everything else equal: staging, pipelining, METIS ordering, native ops), under the CPU
tensor tracker (or the CUDA allocator), planning batch i + 1 on a background thread during step i as
the Trainer does. Printed per K: median step time and its ratio to K = 1; planning + slicing as a
share of the step, both the wait on the critical path ("plan wait") and the work itself timed alone
("plan work", done on the other thread); input-layer redundancy of Cherry's split against a random
split of the same batch; the memory model's median relative error against the measured peak (after
its first, uncalibrated, observation).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from cherry.cli.options import fanout_list, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engine", help="step time vs K, planning share, redundancy, estimator error")
    p.add_argument("--dataset", default="synth-arxiv")
    p.add_argument("--root", default=None)
    p.add_argument("--aggrs", default="mean,lstm", help="comma-separated GraphSAGE aggregators")
    p.add_argument("--ks", default="2,4,8", help="comma-separated K values compared with K=1")
    p.add_argument("--hidden", type=positive_int, default=128)
    p.add_argument("--fanouts", type=fanout_list, default=(10, 25))
    p.add_argument("--batch-size", type=positive_int, default=1024)
    p.add_argument("--steps", type=positive_int, default=4, help="measured steps per K")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lstm-impl", default="auto",
                   help="comma-separated LSTM aggregator implementations to compare (auto, packed, bucketed)")
    p.add_argument("--json", default=None, metavar="OUT")
    p.set_defaults(func=run)


def _parse_list(text: str, name: str, cast):
    try:
        values = [cast(v) for v in text.split(",") if v]
    except ValueError:
        raise ValueError(f"--{name} must be a comma-separated list, got {text!r}") from None
    if not values:
        raise ValueError(f"--{name} must not be empty")
    return values


def measure_k(dataset, spec, batches, k, rank, device, warmup):
    """Median step seconds, plan share and estimator error of training at K micro-batches."""
    from cherry.bench.measure import TimingProbe
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.memory import DeviceMemory
    from cherry.models import build_model
    from cherry.ops import extension_available
    from cherry.planning import MemoryModel

    probe = TimingProbe(device)
    with DeviceMemory(device, None) as memory:
        torch.manual_seed(0)
        model = build_model(spec).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
        mm = MemoryModel.for_model(spec, fixed_bytes=5 * param_bytes, fused_aggregation=extension_available(),
                                   prefetch_inputs=True)
        ex = MicrobatchExecutor(model, optimizer, mm, ExecutorOptions(num_microbatches=k), device,
                                seed_rank=rank, memory=memory, probe=probe)
        probe.start_step()
        for planned in ex.planned_ahead(batches, dataset.features):  # as the Trainer: plan i+1 during i
            ex.step(planned, dataset.features, dataset.labels)
            probe.end_step()
            probe.start_step()
        probe.abort_step()
        plan_work_s = []  # the planning itself, off the critical path above: timed alone here
        for blocks in batches[warmup:]:
            start = time.perf_counter()
            ex.plan_batch(blocks, dataset.features)
            plan_work_s.append(time.perf_counter() - start)
        ex.close()
    totals = probe.step_times_s()[warmup:]
    plan = probe.phase_times_s("plan")[warmup:]
    errors = mm.relative_errors()[1:]
    return {
        "step_s": statistics.median(totals),
        "plan_share": statistics.median(p / t for p, t in zip(plan, totals)),
        "plan_work_share": statistics.median(plan_work_s) / statistics.median(totals),
        "estimator_median_rel_error": statistics.median(errors) if errors else None,
    }


def split_redundancy(blocks, spec, k, rank, balance="memory"):
    """Input-layer redundancy of splitting ``blocks`` into ``k`` contiguous groups in ``rank`` order."""
    from cherry.planning import MemoryModel, plan_microbatches

    return plan_microbatches(blocks, MemoryModel.for_model(spec), num_microbatches=k, seed_rank=rank,
                             balance=balance).redundancy[0]


def run(args: argparse.Namespace) -> int:
    from cherry.data import load_dataset
    from cherry.io import write_json_atomic
    from cherry.models import ModelSpec
    from cherry.sampling import NeighborSampler
    from cherry.session import seed_rank_for

    aggrs = _parse_list(args.aggrs, "aggrs", str)
    ks = _parse_list(args.ks, "ks", int)
    if any(k < 1 for k in ks):
        raise ValueError(f"--ks must be positive integers, got {args.ks!r}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    dataset = load_dataset(args.dataset, args.root)
    rank = seed_rank_for(dataset, "metis", 0)
    random_rank = torch.randperm(dataset.graph.num_nodes, generator=torch.Generator().manual_seed(args.seed))
    gen = torch.Generator().manual_seed(args.seed)
    sampler = NeighborSampler(dataset.graph, list(args.fanouts))
    seed_batches: list[torch.Tensor] = []
    while len(seed_batches) < args.warmup + args.steps:  # small datasets: several shuffled passes
        perm = dataset.train_idx[torch.randperm(dataset.train_idx.numel(), generator=gen)]
        seed_batches.extend(perm.split(args.batch_size))
    batches = [sampler.sample(seeds, gen) for seeds in seed_batches[: args.warmup + args.steps]]
    rows = []
    print(f"cherry bench engine: {args.dataset}, batch {args.batch_size}, fanouts {args.fanouts}, "
          f"hidden {args.hidden}, {args.steps} measured steps (+{args.warmup} warm-up), device {args.device}")
    header = (f"{'aggr':<6} {'K':>3} {'step_s':>8} {'vs K=1':>7} {'plan wait':>9} {'plan work':>9} "
              f"{'redund.':>8} {'random':>8} {'est.err':>8}")
    print(header)
    impls = _parse_list(args.lstm_impl, "lstm-impl", str)
    variants = [(a, i) for a in aggrs for i in (impls if a == "lstm" else ["auto"])]
    for aggr, impl in variants:
        spec = ModelSpec("sage", dataset.feature_dim, args.hidden, dataset.num_classes, len(args.fanouts),
                         aggr=aggr, lstm_impl=impl)
        name = aggr if aggr != "lstm" or len(impls) == 1 else f"{aggr}-{impl[0]}"
        base = None
        for k in [1] + ks:
            m = measure_k(dataset, spec, batches, k, rank, args.device, args.warmup)
            base = base or m["step_s"]
            ours = split_redundancy(batches[0], spec, k, rank)
            rnd = split_redundancy(batches[0], spec, k, random_rank, balance="count")
            row = {"aggr": aggr, "lstm_impl": impl if aggr == "lstm" else None, "k": k, **m, "ratio_to_k1": m["step_s"] / base,
                   "redundancy_input": ours, "random_redundancy_input": rnd}
            rows.append(row)
            err = m["estimator_median_rel_error"]
            print(f"{name:<6} {k:>3} {m['step_s']:>8.3f} {row['ratio_to_k1']:>7.2f} {m['plan_share']:>9.1%} "
                  f"{m['plan_work_share']:>9.1%} "
                  f"{ours:>8.2f} {rnd:>8.2f} {('%.1f%%' % (100 * err)) if err is not None else 'n/a':>8}",
                  flush=True)
    if args.json:
        write_json_atomic(args.json, {"args": {k: v for k, v in vars(args).items() if k != "func"}, "rows": rows})
    return 0
