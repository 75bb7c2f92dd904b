"""`cherry bench exactness`: what the engine's partition check costs, as a ratio to one step.

The same planned batches are stepped twice each, with the check (``options.exactness_check`` forced
on for that step: the gradient recomputed under a second split and compared) and without, in
alternating order; the ratio of median step times (with the check over without) comes with the
hierarchical bootstrap interval of `cherry.report.stats.median_ratio` (rounds of ``--round`` steps as
runs). A run pays it once (``first-step``, the default) or every N steps (``every:N``).
"""
from __future__ import annotations

import statistics
import time

import torch

from benchmarks.threads import keeps_threads


@keeps_threads
def run(args) -> int:
    from cherry.data import load_dataset
    from cherry.execution import Trainer
    from cherry.report.stats import median_ratio
    from cherry.sampling import sampling_generator, spec_seed_batches
    from cherry.spec import make_spec

    if args.threads:
        torch.set_num_threads(args.threads)
    spec = make_spec(dataset=args.dataset, root=args.root, model=args.model, aggr=args.aggr, hidden=args.hidden,
                     num_layers=len(args.fanouts), fanouts=args.fanouts, batch_size=args.batch_size,
                     num_microbatches=args.microbatches, seed=args.seed, evaluate=False,
                     options={"exactness_check": "off"})
    dataset = load_dataset(spec.dataset, spec.root)
    trainer = Trainer(dataset, spec)
    seeds = spec_seed_batches(spec, dataset.train_idx, 0)
    total = args.warmup + args.steps
    seeds = (seeds * (total // max(len(seeds), 1) + 1))[:total]
    gen = sampling_generator(args.seed)
    times: dict[str, list[float]] = {"checked": [], "plain": []}
    checks = []
    try:
        for i, batch_seeds in enumerate(seeds):
            planned = trainer.prepare(batch_seeds, gen)
            for name in (("checked", "plain") if i % 2 == 0 else ("plain", "checked")):
                with trainer.executor.overridden(exactness_check="every:1" if name == "checked" else "off"):
                    started = time.perf_counter()
                    stats = trainer.step(planned)
                    elapsed = time.perf_counter() - started
                if i >= args.warmup:
                    times[name].append(elapsed)
                if stats.partition_check is not None:
                    checks.append(stats.partition_check)
    finally:
        trainer.close()
    rounds = max(1, args.round)
    split = lambda xs: [xs[j:j + rounds] for j in range(0, len(xs), rounds)]  # noqa: E731
    ratio = median_ratio(split(times["checked"]), split(times["plain"]))
    worst = max(c.max_rel_diff for c in checks)
    result = {"dataset": spec.dataset, "model": spec.model, "aggr": spec.aggr, "batch_size": spec.batch_size,
              "fanouts": list(spec.fanouts), "hidden": spec.hidden, "K": spec.num_microbatches, "steps": args.steps,
              "second_K": checks[-1].second_k, "plain_median_step_s": statistics.median(times["plain"]),
              "checked_median_step_s": statistics.median(times["checked"]),
              "ratio_checked_over_plain": ratio.value if ratio else None,
              "ratio_interval": [ratio.low, ratio.high] if ratio else None, "largest_rel_diff": worst}
    print(f"{spec.dataset} {spec.model} batch {spec.batch_size} fanouts {list(spec.fanouts)} hidden {spec.hidden} "
          f"K={spec.num_microbatches} (checked against K={result['second_K']}), {args.steps} timed steps each "
          f"(interleaved)")
    print(f"  step without the check  median {result['plain_median_step_s'] * 1e3:8.1f} ms")
    print(f"  step with the check     median {result['checked_median_step_s'] * 1e3:8.1f} ms")
    if ratio:
        print(f"  ratio checked/plain {ratio.text()} (95% bootstrap interval, rounds of {rounds} steps as runs)")
    print(f"  largest relative gradient difference seen: {worst:.2e} (tolerance {checks[-1].tolerance:g})")
    if args.json:
        from cherry.io import write_json_atomic

        write_json_atomic(args.json, result)
    return 0
