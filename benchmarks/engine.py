"""`cherry bench engine`: what micro-batching costs Cherry, measured side by side in one run.

For each aggregator, the same pre-sampled mini-batches are trained at K = 1 and at each K asked for
(fixed K, everything else equal: staging, pipelining, METIS ordering (BFS without pymetis), native ops), (timed without the
CPU tensor tracker, see `measure_k`; on CUDA under the allocator's statistics), through the Trainer's own loader: batch i + 1 is sampled and
planned on the loader's thread during step i, as for every user of the engine. Printed per K: median step time and its ratio to K = 1; planning + slicing as a
share of the step, both the wait on the critical path ("plan wait") and the work itself ("plan work",
done on the other thread: the batch planned again on the main thread right after its step, the
median of the per-step ratios, so each planning time is paired with the step beside it); input-layer redundancy of Cherry's split against a random
split of the same batch; the memory model's median relative error against the measured peak (after
its first, uncalibrated, observation). With ``--repeats R`` every configuration runs R times, the
repeats interleaved (all configurations once, then again), and each figure is the median over repeats
with its range; for an LSTM variant other than ``bucketed`` "vs bkt" is the bucketed LSTM's step time
at the same K over this one's (its speed-up), measured in the same run.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch



def parse_list(text: str, name: str, cast) -> list:
    """``"a,b"`` as ``[cast(a), cast(b)]`` (ValueError naming ``--name`` for an empty or bad list)."""
    try:
        values = [cast(v) for v in str(text).split(",") if v]
    except ValueError:
        raise ValueError(f"--{name} must be a comma-separated list, got {text!r}") from None
    if not values:
        raise ValueError(f"--{name} must not be empty")
    return values


def _spec(args, aggr: str, impl: str, k: int):
    from cherry.spec import make_spec

    return make_spec(system="cherry", dataset=args.dataset, root=args.root, aggr=aggr, lstm_impl=impl,
                     hidden=args.hidden,
                     num_layers=len(args.fanouts), fanouts=args.fanouts, batch_size=args.batch_size,
                     num_microbatches=k, device=args.device, seed=args.seed, epochs=0, warmup=args.warmup,
                     steps=args.steps, evaluate=False)


def _estimator_errors(dataset, spec, batches) -> list[float]:
    """The memory model's relative errors over ``batches`` trained under the CPU tensor tracker
    (untimed), after its first, uncalibrated, observation."""
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory

    with DeviceMemory(spec.device, None) as memory:
        trainer = Trainer(dataset, spec, memory=memory)
        with trainer.loader(batches) as loader:
            for batch in loader:
                trainer.step(batch.prepared)
        trainer.close()
    return trainer.memory_model.relative_errors()[1:]


def measure_k(dataset, spec, warmup: int):
    """Median step seconds, plan share and estimator error of training ``spec`` (one fixed K).

    On a CPU the timed steps run without the tensor tracker: its Python dispatch per op is a cost of
    emulating a device's memory, grows with K (more, smaller ops) and is not the engine's; the
    estimator's error comes from a second, tracked, untimed pass over the same batches. With a fixed K
    the plan does not depend on measured peaks, so both passes train the same micro-batches.
    """
    import contextlib

    from cherry.bench.measure import TimingProbe
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory
    from cherry.sampling import spec_seed_batches

    probe = TimingProbe(spec.device)
    batches = spec_seed_batches(spec, dataset.train_idx)
    on_cpu = torch.device(spec.device).type == "cpu"
    with (contextlib.nullcontext(None) if on_cpu else DeviceMemory(spec.device, None)) as memory:
        trainer = Trainer(dataset, spec, memory=memory, probe=probe)
        first_blocks = None
        plan_work_s = []  # the planning itself, off the critical path: timed alone after each step
        with trainer.loader(batches) as loader:
            it = iter(loader)
            for _ in range(len(batches)):
                probe.start_step()
                with probe.phase("sample"):  # the wait for sampling and planning ahead
                    batch = next(it)
                trainer.step(batch.prepared)
                probe.end_step()
                if first_blocks is None:
                    first_blocks = batch.prepared.blocks
                # the same batch planned again right after its step (caches as a step leaves them; the
                # loader's thread has long finished the next batch), so each planning time is paired
                # with the step it follows and the share below holds while the machine's load drifts
                start = time.perf_counter()
                trainer.executor.plan_batch(batch.prepared.blocks, dataset.features)
                plan_work_s.append(time.perf_counter() - start)
        trainer.close()
    totals = probe.step_times_s()[warmup:]
    wait = probe.phase_times_s("sample")[warmup:]
    errors = _estimator_errors(dataset, spec, batches) if on_cpu else trainer.memory_model.relative_errors()[1:]
    return {
        "step_s": statistics.median(totals),
        "plan_share": statistics.median(p / t for p, t in zip(wait, totals)),
        "plan_work_share": statistics.median(p / t for p, t in zip(plan_work_s[warmup:], totals)),
        "estimator_median_rel_error": statistics.median(errors) if errors else None,
    }, first_blocks


def split_redundancy(blocks, spec, k, rank, balance="memory"):
    """Input-layer redundancy of splitting ``blocks`` into ``k`` contiguous groups in ``rank`` order."""
    from cherry.planning import MemoryModel, plan_microbatches

    # the blocks are where the Trainer built them (on the device under device construction)
    return plan_microbatches(blocks, MemoryModel.for_model(spec), num_microbatches=k,
                             seed_rank=rank.to(blocks.seeds.device), balance=balance).redundancy[0]


def run(args: argparse.Namespace) -> int:
    from cherry.data import load_dataset
    from cherry.errors import write_json_keeping
    from cherry.io import check_writable
    from cherry.planning import seed_rank
    from cherry.planning.ordering import resolve_ordering

    if args.json is not None:
        check_writable(args.json)  # before the work: a bad path must not lose the results at the end
    aggrs = parse_list(args.aggrs, "aggrs", str)
    ks = parse_list(args.ks, "ks", int)
    if any(k < 1 for k in ks):
        raise ValueError(f"--ks must be positive integers, got {args.ks!r}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    repeats = getattr(args, "repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"--repeats must be an int >= 1, got {repeats!r}")
    impls = parse_list(args.lstm_impl, "lstm-impl", str)
    variants = [(a, i) for a in aggrs for i in (impls if a == "lstm" else ["auto"])]
    specs = {(aggr, impl, k): _spec(args, aggr, impl, k) for aggr, impl in variants for k in [1] + ks}  # checked first
    dataset = load_dataset(args.dataset, args.root)
    ordering = resolve_ordering("metis")  # "bfs" without pymetis (the GPU machine): said and recorded
    rank = seed_rank(dataset, ordering, args.seed)
    random_rank = torch.randperm(dataset.graph.num_nodes, generator=torch.Generator().manual_seed(args.seed))
    print(f"cherry bench engine: {args.dataset}, batch {args.batch_size}, fanouts {args.fanouts}, "
          f"hidden {args.hidden}, {args.steps} measured steps (+{args.warmup} warm-up), device {args.device}, "
          f"ordering {ordering}, {repeats} interleaved repeat(s): step_s is the median over repeats of each run's median step "
          "[min, max over repeats]" + ("; timed without the CPU tensor tracker, est.err from a tracked pass"
                                       if torch.device(args.device).type == "cpu" else ""))
    # Repeats interleave every configuration (the machine's load drifts): repeat r runs them all in turn.
    runs: dict = {key: [] for key in specs}
    firsts: dict = {}
    for _ in range(repeats):
        for key, spec in specs.items():
            m, first_blocks = measure_k(dataset, spec, args.warmup)
            runs[key].append(m)
            firsts.setdefault(key, first_blocks)
    header = (f"{'aggr':<6} {'K':>3} {'step_s':>8} {'[min, max]':>15} {'vs K=1':>7} {'vs bkt':>7} {'plan wait':>9} "
              f"{'plan work':>9} {'redund.':>8} {'random':>8} {'est.err':>8}")
    print(header)
    rows = []
    for aggr, impl in variants:
        name = aggr if aggr != "lstm" or len(impls) == 1 else f"{aggr}-{impl[0]}"
        base = statistics.median(r["step_s"] for r in runs[(aggr, impl, 1)])
        for k in [1] + ks:
            key = (aggr, impl, k)
            steps = [r["step_s"] for r in runs[key]]
            m = {f: statistics.median(r[f] for r in runs[key]) for f in ("plan_share", "plan_work_share")}
            errs = [r["estimator_median_rel_error"] for r in runs[key] if r["estimator_median_rel_error"] is not None]
            m["estimator_median_rel_error"] = statistics.median(errs) if errs else None
            m["step_s"] = statistics.median(steps)
            bucketed = runs.get(("lstm", "bucketed", k)) if aggr == "lstm" and impl != "bucketed" else None
            vs_bucketed = (statistics.median(r["step_s"] for r in bucketed) / m["step_s"]) if bucketed else None
            spec = specs[key]
            model_spec = spec.model_spec(dataset)
            ours = split_redundancy(firsts[key], model_spec, k, rank)
            rnd = split_redundancy(firsts[key], model_spec, k, random_rank, balance="count")
            row = {"aggr": aggr, "lstm_impl": impl if aggr == "lstm" else None, "k": k, **m,
                   "step_s_repeats": steps, "ratio_to_k1": m["step_s"] / base, "speedup_vs_bucketed": vs_bucketed,
                   "redundancy_input": ours, "random_redundancy_input": rnd}
            rows.append(row)
            err = m["estimator_median_rel_error"]
            spread = f"[{min(steps):.3f}, {max(steps):.3f}]"
            print(f"{name:<6} {k:>3} {m['step_s']:>8.3f} {spread:>15} {row['ratio_to_k1']:>7.2f} "
                  f"{(f'{vs_bucketed:.2f}x' if vs_bucketed else '-'):>7} {m['plan_share']:>9.1%} "
                  f"{m['plan_work_share']:>9.1%} "
                  f"{ours:>8.2f} {rnd:>8.2f} {('%.1f%%' % (100 * err)) if err is not None else 'n/a':>8}",
                  flush=True)
    if args.json is not None:
        write_json_keeping(args.json, {"args": {k: v for k, v in vars(args).items() if k != "func"},
                                       "ordering": ordering, "rows": rows})
    return 0
