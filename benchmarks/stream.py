"""`cherry bench stream`: the streamed input layer on real graphs with wide features.

Per graph and model (2 layers, batch ``--batch-size``, fanouts ``--sample-fanouts``, one thread by default),
on an emulated device (`DeviceMemory` with a capacity: the out-of-memory a GPU would raise):
- the K = 1 peak unstreamed and streamed (``options.stream_inputs`` off and on, K fixed at 1);
- at budgets of ``--fractions`` of the unstreamed K = 1 peak (the largest over the measured batches),
  automatic K with ``stream_inputs: auto`` (the default): the plans chosen (K and whether streamed,
  over the epoch's steps), the largest measured peak over the budget, and the epoch time over the
  unstreamed K = 1 epoch's (median ratio with its bootstrap interval, `cherry.report.stats`);
- on a graph whose features are not wider than the first layer's output (``--narrow``, generated),
  ``stream_inputs: off`` beside auto at every budget: auto must change nothing there.
``--graphs`` may name `GENERATED_WIDE` beside the npz files: a graph generated in memory (Barabasi-Albert,
heavily overlapping neighbourhoods, `WIDE_FEATURES` random features), the same on every machine.
``--quick`` runs that graph alone (GCN, 2 steps, 2 rounds): the GPU check's section, which needs no
file from ``../shared/graphs``.
On a GPU, one more streamed K = 1 step of the first graph and model, with its rows read from the host,
is profiled: the ``overlap:`` line says how much of its chunk copies ran beside a kernel
(`benchmarks.stream_overlap`); elsewhere that line says it was not measured.
Every configuration trains the same batches (the first ``--steps`` of epoch 0, sampled once), with a
fresh trainer per epoch (so each epoch plans from an uncalibrated model, as a new run does); the
configurations run in rotating order within each of ``--repeats`` rounds (interleaved). The device's
capacity is the budget plus the run spec's reserve (`cherry.spec.BUDGET_RESERVE_FRACTION`), so a peak
above the budget shows instead of failing.
"""
from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from benchmarks.threads import keeps_threads

WIDE_GRAPHS = ("flickr.npz", "coauthor_cs.npz", "amazon_computers.npz")
MODELS = ("gcn", "gat", "sage-mean")
SPLIT = "?split=random:0.5,0.25@0"  # the 50/25/25 random split
GENERATED_WIDE = "generated-wide"
WIDE_NODES, WIDE_M, WIDE_FEATURES = 8_000, 10, 2_048  # 62.5 MiB of features, average degree about 20


def _wide_dataset(seed: int):
    """`GENERATED_WIDE`: a Barabasi-Albert graph with wide random features, split 50/25/25 at random."""
    from benchmarks.generated_graphs import degree_law_dataset

    return degree_law_dataset("barabasi-albert", WIDE_NODES, seed, WIDE_FEATURES, name=GENERATED_WIDE, m=WIDE_M)


def _spec(args, dataset: str, model: str, k=None, budget=None, stream="auto", stage=True):
    from cherry.spec import BUDGET_RESERVE_FRACTION, make_spec

    name, _, aggr = model.partition("-")
    capacity = None if budget is None else int(budget / (1 - BUDGET_RESERVE_FRACTION)) + 1
    gat = name == "gat"
    # the generated graph is passed to the trainer; its spec names a registered dataset (never loaded)
    dataset = "synth-tiny" if dataset == GENERATED_WIDE else dataset
    return make_spec(dataset=dataset, root=args.root, model=name, aggr=aggr or None, num_layers=len(args.sample_fanouts),
                     fanouts=args.sample_fanouts, hidden=args.hidden // args.heads if gat else args.hidden, heads=args.heads,
                     batch_size=args.batch_size, num_microbatches=k, budget_bytes=budget,
                     device_memory_bytes=capacity, evaluate=False, seed=args.seed, device=args.device,
                     options={"ordering": "none", "exactness_check": "off", "stream_inputs": stream,
                              "stage_features": stage})


def _epoch(dataset, spec, batches) -> dict:
    """One fresh trainer's steps over ``batches`` (each planned, then stepped: the time of both, as the
    loader's planning overlaps nothing here): seconds, largest peak, K and streaming per step."""
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory
    from cherry.planning import BudgetTooSmallError

    with DeviceMemory(spec.device, spec.device_memory_bytes) as memory, ThreadPoolExecutor(max_workers=1) as pool:
        trainer = Trainer(dataset, spec, memory=memory)
        try:
            steps = []
            for blocks in batches:
                started = time.perf_counter()
                try:
                    # planned on another thread, as the trainer's loader plans (the device counts no host work)
                    planned = pool.submit(trainer.executor.plan_batch, blocks, trainer.data.features).result()
                    memory.reset_peak()
                    stats = trainer.executor.step(planned, trainer.data.features, trainer.data.labels)
                except (BudgetTooSmallError, torch.OutOfMemoryError) as exc:
                    return {"failed": str(exc).strip().splitlines()[0]}
                steps.append((stats.num_microbatches, stats.streamed, stats.recompute,
                              max(int(memory.peak_bytes()), stats.measured_peak_bytes or 0),
                              time.perf_counter() - started))
        finally:
            trainer.close()
    return {"step_s": [s[4] for s in steps], "peak": max(s[3] for s in steps), "ks": [s[0] for s in steps],
            "streamed": [s[1] for s in steps], "recompute": [s[2] for s in steps]}


def _batches(dataset, spec, steps: int):
    """The first ``steps`` batches of epoch 0, sampled once on a worker thread (blocks made there are
    counted by the emulated device only from their first use in a step, as a GPU holds them)."""
    from cherry.sampling import NeighborSampler, sampling_generator, spec_seed_batches

    seeds = list(spec_seed_batches(spec, dataset.train_idx, 0))[:steps]
    sampler = NeighborSampler(dataset.graph, list(spec.fanouts))
    gen = sampling_generator(spec.seed)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(lambda: [sampler.sample(s, gen) for s in seeds]).result()


def _plan_text(run: dict) -> str:
    ks = sorted(set(run["ks"]))
    k = str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}"
    streamed = sum(run["streamed"])
    how = "streamed" if streamed == len(run["ks"]) else ("plain" if not streamed else f"{streamed}/{len(run['ks'])} streamed")
    return f"K {k} {how}" + (" +rc" if any(run["recompute"]) else "")


def _case(args, dataset_name: str, model: str, narrow: bool) -> dict:
    """Every configuration of one graph and model, interleaved over ``args.repeats`` rounds."""
    from cherry.data import load_dataset
    from cherry.report.stats import median_ratio

    dataset = _wide_dataset(args.seed) if dataset_name == GENERATED_WIDE else load_dataset(dataset_name, args.root)
    base = _spec(args, dataset_name, model, k=1, stream="off")
    batches = _batches(dataset, base, args.steps)
    plain = _epoch(dataset, base, batches)  # also the warm-up of this case
    peak = plain["peak"]
    configs = {"K1 off": base, "K1 on": _spec(args, dataset_name, model, k=1, stream="on")} if not narrow \
        else {"K1 off": base}
    for fraction in args.fractions:
        budget = int(peak * fraction)
        configs[f"{fraction:g} auto"] = _spec(args, dataset_name, model, budget=budget)
        if narrow:
            configs[f"{fraction:g} off"] = _spec(args, dataset_name, model, budget=budget, stream="off")
    runs: dict[str, list[dict]] = {name: [] for name in configs}
    names = list(configs)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            runs[name].append(_epoch(dataset, configs[name], batches))
    out = {"graph": dataset_name.split("?")[0], "model": model, "features": int(dataset.features.shape[1]),
           "k1_peak_bytes": max(run["peak"] for run in runs["K1 off"]), "configs": {}}
    for name, spec in configs.items():
        failed = [r["failed"] for r in runs[name] if "failed" in r]
        if failed:
            out["configs"][name] = {"budget_bytes": spec.budget_bytes, "failed": failed[0]}
            continue
        # epochs as runs of per-step seconds (planning included): the ratio of median step times
        ratio = median_ratio([r["step_s"] for r in runs[name]], [r["step_s"] for r in runs["K1 off"]])
        out["configs"][name] = {
            "budget_bytes": spec.budget_bytes, "plan": _plan_text(runs[name][-1]),
            "peak_bytes": max(r["peak"] for r in runs[name]),
            "median_epoch_s": statistics.median(sum(r["step_s"]) for r in runs[name]),
            "ratio": None if ratio is None else [ratio.value, ratio.low, ratio.high],
        }
    return out


def _print(case: dict) -> None:
    mib = 1 << 20
    configs = case["configs"]
    print(f"{case['graph']} ({case['features']} features) {case['model']}: K = 1 peak {case['k1_peak_bytes'] / mib:.1f} MiB"
          + (f", streamed {configs['K1 on']['peak_bytes'] / mib:.1f} MiB "
             f"(x{case['k1_peak_bytes'] / configs['K1 on']['peak_bytes']:.1f} lower)" if "K1 on" in configs else ""),
          flush=True)
    for name, c in configs.items():
        if c["budget_bytes"] is None and name != "K1 on":
            continue
        if "failed" in c:
            print(f"  {name:>9}: does not run: {c['failed']}", flush=True)
            continue
        budget = c["budget_bytes"]
        over = f"peak/budget {c['peak_bytes'] / budget:5.3f}" if budget else f"peak {c['peak_bytes'] / mib:7.1f} MiB"
        ratio = c["ratio"]
        time_text = "n/a" if ratio is None else f"x{ratio[0]:.2f} [{ratio[1]:.2f}, {ratio[2]:.2f}]"
        print(f"  {name:>9}: {c['plan']:<22} {over}  epoch {time_text}", flush=True)


@keeps_threads
def run(args) -> int:
    from cherry.data.gnn_benchmark import graphs_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.graphs, args.models, args.steps, args.repeats, args.narrow = GENERATED_WIDE, "gcn", 2, 2, ""
    graphs = [g for g in args.graphs.split(",") if g]
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"--models: {unknown[0]!r} is not one of {','.join(MODELS)}")
    missing = [g for g in graphs if g != GENERATED_WIDE and not (graphs_dir() / g).is_file()]
    if missing:
        raise ValueError(f"--graphs: {missing[0]} is not in {graphs_dir()} (the gnn-benchmark npz files)")
    print(f"cherry bench stream: batch {args.batch_size}, fanouts {list(args.sample_fanouts)}, hidden {args.hidden}, "
          f"{args.steps} steps per epoch, {args.repeats} interleaved rounds, {torch.get_num_threads()} thread(s), "
          f"device {args.device} (emulated capacity: budget / 0.9)", flush=True)
    cases = []
    for graph in graphs:
        for model in models:
            cases.append(_case(args, graph if graph == GENERATED_WIDE else graph + SPLIT, model, narrow=False))
            _print(cases[-1])
    if args.narrow:
        for model in models:
            cases.append(_case(args, args.narrow, model, narrow=True))
            _print(cases[-1])
    overlap = _overlap(args, graphs[0], models[0]) if graphs and models else None
    if args.json:
        from cherry.io import write_json_atomic

        write_json_atomic(args.json, {"cases": cases, "steps": args.steps, "repeats": args.repeats, "overlap": overlap})
    return 0


def _overlap(args, graph: str, model: str) -> dict:
    """On a GPU, whether the first case's streamed chunk copies ran beside its GEMMs (one profiled
    K = 1 step from host rows, `benchmarks.stream_overlap`); printed in one line."""
    from benchmarks import stream_overlap

    if not str(args.device).startswith("cuda"):
        result = {"error": f"device {args.device}: chunks are copied on a separate stream on a GPU only"}
    else:
        from cherry.data import load_dataset

        name = graph if graph == GENERATED_WIDE else graph + SPLIT
        dataset = _wide_dataset(args.seed) if graph == GENERATED_WIDE else load_dataset(name, args.root)
        spec = _spec(args, name, model, k=1, stream="on", stage=False)
        try:
            result = stream_overlap.measure(dataset, spec, _batches(dataset, spec, 1)[0])
        except RuntimeError as exc:  # the profiler, not the tables above: say why in the overlap line
            result = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"}
    print(stream_overlap.text(result), flush=True)
    return result
