"""`cherry bench planner`: input-layer redundancy and planning time of the micro-batch splits of
cherry, a random split, Betty and Buffalo, side by side on graphs of several degree laws.

Graphs: the generated degree laws of `cherry.data.degree_laws` (``--num-nodes`` each) and the
generated OGB-like datasets (by name). Per graph and batch size one batch is sampled (fanouts as
given); on that same batch, per K, every planner splits the seeds:
- ``cherry``: `plan_microbatches` (locality order lookup, split, refinement, slicing), METIS rank;
- ``contiguous``: the same without refinement (what cherry did before the refinement);
- ``random``: contiguous count-balanced chunks of a random order (the control);
- ``betty``: co-neighbour graph + METIS (`baselines.betty.reg.partition_seeds`);
- ``buffalo``: degree buckets + knapsack (`baselines.buffalo.buckets.bucketize`).
Redundancy = sum of the micro-batches' input nodes / the batch's (every system's groups are sliced
with the same `slice_blocks_many`). Planning time covers what each system does to choose its groups
(cherry: including its slicing; the others: excluding slicing), a median of ``--repeats`` timings.
The METIS locality order of each graph is computed once (its time is printed, not in ``plan_ms``).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


SYSTEMS = ("cherry", "contiguous", "random", "betty", "buffalo")
DEFAULT_GRAPHS = "geometric,barabasi-albert,chung-lu,synth-arxiv,synth-products"


def _ints(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise ValueError(f"--{name} must be comma-separated positive integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"--{name} must be comma-separated positive integers, got {text!r}")
    return values


def load_graph(name: str, num_nodes: int, root, seed: int):
    """``(graph, seed_pool, feature_dim)`` of a degree law or a dataset name."""
    from cherry.data import load_dataset
    from cherry.data.degree_laws import DEGREE_LAWS, degree_law_graph

    if name in DEGREE_LAWS:
        graph = degree_law_graph(name, num_nodes, seed=seed)
        return graph, torch.arange(graph.num_nodes), None
    ds = load_dataset(name, root)
    return ds.graph, ds.train_idx, ds.feature_dim


def _timed(fn, repeats: int):
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times) * 1e3


def measure_batch(blocks, rank, random_rank, ks, spec, repeats: int) -> list[dict]:
    """One row per (K, system) on the sampled batch ``blocks``: redundancy_input and plan_ms."""
    from baselines.betty.reg import partition_seeds
    from baselines.buffalo.buckets import bucketize
    from cherry.planning import MemoryModel, plan_microbatches
    from cherry.sampling import slice_blocks_many

    mm = MemoryModel.for_model(spec)
    whole = blocks.layers[0].num_src

    def redundancy(groups) -> float:
        parts = slice_blocks_many(blocks, [g for g in groups if g.numel() > 0])
        return sum(p.layers[0].num_src for p in parts) / whole

    rows = []
    for k in ks:
        if k > blocks.num_seeds:
            raise ValueError(f"K = {k} exceeds the batch's {blocks.num_seeds} seeds")
        planners = {
            "cherry": lambda: plan_microbatches(blocks, mm, num_microbatches=k, seed_rank=rank),
            "contiguous": lambda: plan_microbatches(blocks, mm, num_microbatches=k, seed_rank=rank, refine=False),
            "random": lambda: plan_microbatches(blocks, mm, num_microbatches=k, seed_rank=random_rank,
                                                balance="count", refine=False),
            "betty": lambda: partition_seeds(blocks.layers[-1], k),
            "buffalo": lambda: bucketize(blocks.layers[-1].in_degrees(), k).microbatches,
        }
        for system, plan in planners.items():
            out, ms = _timed(plan, repeats)
            red = out.redundancy[0] if hasattr(out, "redundancy") else redundancy(out)
            rows.append({"k": k, "system": system, "redundancy_input": red, "plan_ms": ms})
    return rows


def run(args: argparse.Namespace) -> int:
    from cherry.errors import write_json_keeping
    from cherry.io import check_writable
    from cherry.models import ModelSpec
    from cherry.planning import locality_rank
    from cherry.sampling import NeighborSampler

    if args.json is not None:
        check_writable(args.json)  # before the work: a bad path must not lose the results at the end
    graphs = [g for g in args.graphs.split(",") if g]
    if not graphs:
        raise ValueError("--graphs must name at least one degree law or dataset")
    batch_sizes, ks = _ints(args.batch_sizes, "batch-sizes"), _ints(args.ks, "ks")
    print(f"cherry bench planner: fanouts {args.fanouts}, batches {batch_sizes}, K {ks}, "
          f"median of {args.repeats} timings; redundancy = summed micro-batch inputs / batch inputs", flush=True)
    rows = []
    for name in graphs:
        graph, pool, feature_dim = load_graph(name, args.num_nodes, args.root, args.seed)
        start = time.perf_counter()
        rank = locality_rank(graph, "metis", seed=args.seed)
        order_s = time.perf_counter() - start
        gen = torch.Generator().manual_seed(args.seed)
        random_rank = torch.randperm(graph.num_nodes, generator=gen)
        spec = ModelSpec("sage", feature_dim or args.hidden, args.hidden, 16, len(args.fanouts))
        print(f"\n{name}: {graph.num_nodes} nodes, {graph.num_edges} edges, METIS order once {order_s:.1f} s")
        print(f"{'batch':>6} {'K':>3} " + " ".join(f"{s:>17}" for s in SYSTEMS))
        for batch_size in batch_sizes:
            seeds = pool[torch.randperm(pool.numel(), generator=gen)[:batch_size]]
            blocks = NeighborSampler(graph, list(args.fanouts)).sample(seeds, gen)
            got = measure_batch(blocks, rank, random_rank, ks, spec, args.repeats)
            for row in got:
                row.update(graph=name, batch_size=int(seeds.numel()), num_nodes=graph.num_nodes, order_s=order_s)
            rows.extend(got)
            for k in ks:
                cells = {r["system"]: r for r in got if r["k"] == k}
                print(f"{seeds.numel():>6} {k:>3} " + " ".join(
                    f"{cells[s]['redundancy_input']:>6.3f} {cells[s]['plan_ms']:>7.1f} ms" for s in SYSTEMS), flush=True)
    if args.json is not None:
        write_json_keeping(args.json, {"args": {k: v for k, v in vars(args).items() if k != "func"}, "rows": rows})
    return 0
