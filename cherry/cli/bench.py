"""`cherry bench ops|kernels|engine|systems|planner|interop|budget|cache|exactness|stream`: side-by-side benchmarks
that print ratios measured in one run.

The command line of each benchmark is defined here; the measuring lives in
`benchmarks.<name>.run(args)`, which imports no CLI code. Options that are run-spec keys
(``--dataset``, ``--hidden``, ``--fanouts``, ...) come from the run schema (`add_spec_arguments`):
their help, type and default are the schema's, and a benchmark names only the defaults where it
differs (its `_OWN_DEFAULTS`).
"""
from __future__ import annotations

import argparse
import os
import importlib

from cherry.cli.options import add_spec_arguments, non_negative_int, positive_int, size_bytes
from cherry.outputs import DIR, add_output

BENCHMARKS = ("ops", "kernels", "engine", "systems", "planner", "interop", "budget", "cache", "exactness", "stream")
_PLANNER_GRAPHS = "geometric,barabasi-albert,chung-lu,synth-arxiv,synth-products"
# Where a benchmark's setting differs from the run schema's default (the rest are the schema's).
_OWN_DEFAULTS = {
    "ops": {"dataset": "synth-arxiv"},
    "kernels": {"dataset": "synth-arxiv", "steps": 3},
    "engine": {"dataset": "synth-arxiv", "hidden": 128, "steps": 4, "warmup": 1},
    "systems": {"dataset": "synth-arxiv", "aggr": "mean", "hidden": 128, "batch_size": 8192, "steps": 3, "warmup": 1},
    "planner": {"hidden": 128},
    "interop": {"dataset": "synth-arxiv", "hidden": 128, "steps": 20},
    "budget": {"batch_size": 64, "hidden": 32, "steps": 100},
    "cache": {"dataset": "synth-papers", "batch_size": 256, "hidden": 64, "steps": 5},
    "exactness": {"dataset": "synth-arxiv", "warmup": 1},
    "stream": {"hidden": 128, "steps": 2},
}


_KERNEL_MODELS = ("sage-mean", "sage-pool", "sage-lstm", "gcn", "gat")  # benchmarks.kernels.MODELS
_MODULES = {"cache": "feature_cache", "exactness": "exactness_check"}  # a benchmark whose module is not named after it


def _runner(name: str):
    def run(args: argparse.Namespace) -> int:
        return importlib.import_module(f"benchmarks.{_MODULES.get(name, name)}").run(args)
    return run


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmarks: native ops, engine overheads, systems side by side")
    inner = p.add_subparsers(dest="benchmark", required=True, parser_class=type(p))
    for name in BENCHMARKS:
        globals()[f"_register_{name}"](inner)


def _register_ops(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ops", help="native sampler, slicing and aggregation vs DGL and PyG")
    add_spec_arguments(p, ("dataset", "root", "batch_size", "fanouts", "seed"), _OWN_DEFAULTS["ops"])
    p.add_argument("--synthetic-nodes", type=positive_int, default=None, metavar="N",
                   help="use a Chung-Lu power-law graph of N nodes instead of --dataset")
    p.add_argument("--synthetic-degree", type=float, default=13.7,
                   help="average in-degree of the Chung-Lu graph (ogbn-arxiv symmetrised: 13.7)")
    p.add_argument("--repeats", type=positive_int, default=20)
    p.add_argument("--features", type=positive_int, default=256)
    p.add_argument("--microbatches", type=positive_int, default=4, help="K for the slicing comparison")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="intra-op threads for torch, Cherry's ops and DGL (default: torch's setting)")
    p.set_defaults(func=_runner("ops"))



def _register_kernels(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="Cherry's layers vs stock DGL's and PyG's on one batch at K=1: peak and time")
    add_spec_arguments(p, ("dataset", "root", "batch_size", "fanouts", "hidden", "heads", "steps", "device", "seed"),
                       _OWN_DEFAULTS["kernels"])
    p.add_argument("--models", default=",".join(_KERNEL_MODELS),
                   help=f"comma-separated subset of {','.join(_KERNEL_MODELS)}")
    p.add_argument("--repeats", type=positive_int, default=5,
                   help="interleaved rounds; each times --steps fwd+bwd per system and takes one peak")
    p.add_argument("--threads", type=positive_int, default=None, help="intra-op threads (default: torch's setting)")
    p.add_argument("--profile", action="store_true",
                   help="after the table, a torch.profiler table of one fwd+bwd per model and system")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("kernels"))


def _register_engine(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("engine", help="step time vs K, planning share, redundancy, estimator error")
    add_spec_arguments(p, ("dataset", "root", "hidden", "fanouts", "batch_size", "steps", "warmup", "device", "seed"),
                       _OWN_DEFAULTS["engine"])
    p.add_argument("--aggrs", default="mean,lstm", help="comma-separated GraphSAGE aggregators")
    p.add_argument("--ks", default="2,4,8", help="comma-separated K values compared with K=1")
    p.add_argument("--lstm-impl", default="auto",
                   help="comma-separated LSTM aggregator implementations to compare (auto, packed, bucketed, steps)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="runs of every configuration, interleaved; figures are medians over them")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("engine"))




def _register_systems(sub: argparse._SubParsersAction) -> None:
    from cherry.systems.table import subject_system, system_names

    names, me = system_names(), subject_system()  # the systems table's, in its order
    others = ", ".join(n for n in names if n != me)
    p = sub.add_parser("systems", help=f"{me} vs every other system of the table ({others}) at equal K and budget")
    add_spec_arguments(p, ("dataset", "root", "aggr", "hidden", "fanouts", "batch_size", "steps", "warmup", "device"),
                       _OWN_DEFAULTS["systems"])
    p.add_argument("--systems", default=",".join(names), help="comma-separated system names (default: every one)")
    p.add_argument("--microbatches", type=positive_int, default=8, help="K for every micro-batching system")
    p.add_argument("--device-memory", type=size_bytes, default=None, help="emulated capacity (CPU) / cap (GPU)")
    p.add_argument("--threads", type=positive_int, default=1, help="OMP/torch threads per run (default 1)")
    add_output(p, "--out-dir", kind=DIR, default="results/bench-systems", help="where specs and records go")
    p.set_defaults(func=_runner("systems"))


def _register_planner(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("planner", help="redundancy and planning time of the splits per degree law")
    p.add_argument("--graphs", default=_PLANNER_GRAPHS, help="comma-separated degree laws and dataset names")
    p.add_argument("--num-nodes", type=positive_int, default=100_000, help="nodes of each generated degree law")
    p.add_argument("--batch-sizes", default="1024,4096")
    p.add_argument("--ks", default="2,4,8,16")
    add_spec_arguments(p, ("fanouts", "hidden", "root", "seed"), _OWN_DEFAULTS["planner"])
    p.add_argument("--repeats", type=positive_int, default=3, help="timings per planner (median)")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("planner"))


def _register_interop(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("interop", help="step time of a DGL SAGE through from_dgl vs Cherry's SAGE, same batches and K")
    add_spec_arguments(p, ("dataset", "root", "hidden", "fanouts", "batch_size", "steps", "warmup", "seed"),
                       _OWN_DEFAULTS["interop"])
    p.add_argument("--microbatches", type=positive_int, default=4, help="the fixed K of both")
    p.add_argument("--round", type=positive_int, default=5, help="steps per round (a run, for the interval)")
    p.add_argument("--threads", type=positive_int, default=None)
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("interop"))


def _register_exactness(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("exactness", help="cost of the engine's partition check: a checked step over a plain one")
    add_spec_arguments(p, ("dataset", "root", "model", "aggr", "hidden", "fanouts", "batch_size", "steps", "warmup",
                           "seed"), _OWN_DEFAULTS["exactness"])
    p.add_argument("--microbatches", type=positive_int, default=8, help="the run's fixed K (checked against K + 1)")
    p.add_argument("--round", type=positive_int, default=5, help="steps per round (a run, for the interval)")
    p.add_argument("--threads", type=positive_int, default=None)
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("exactness"))


def _register_stream(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stream", help="the streamed input layer on wide-feature graphs: K = 1 peaks, plans and "
                                      "epoch times at budgets below the K = 1 peak")
    add_spec_arguments(p, ("root", "hidden", "heads", "batch_size", "steps", "device", "seed"), _OWN_DEFAULTS["stream"])
    # the wide-feature measurement's own sampling (the run schema's fanouts stay the other benches')
    p.add_argument("--sample-fanouts", type=lambda v: [int(x) for x in v.split(",")], default=[15, 10],
                   help="fanouts per layer, input layer first (default: 15,10)")
    p.add_argument("--graphs", default="flickr.npz,coauthor_cs.npz,amazon_computers.npz",
                   help="comma-separated gnn-benchmark files in the graphs directory, or generated-wide (a "
                        "generated graph with 2,048 features); '' for none")
    p.add_argument("--narrow", default="synth-arxiv",
                   help="a generated dataset whose features are not wider than the first layer ('' for none)")
    p.add_argument("--models", default="gcn,gat,sage-mean", help="comma-separated subset of gcn,gat,sage-mean")
    p.add_argument("--fractions", type=lambda v: [float(x) for x in v.split(",")], default=[0.5, 0.25, 0.1],
                   help="budgets as fractions of the unstreamed K = 1 peak")
    p.add_argument("--repeats", type=positive_int, default=3, help="interleaved rounds (epochs per configuration)")
    p.add_argument("--threads", type=positive_int, default=1)
    p.add_argument("--quick", action="store_true",
                   help="a small check (the generated wide graph alone, GCN, 2 steps, 2 rounds, no --narrow): "
                        "what the GPU check runs")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("stream"))


def _register_budget(sub: argparse._SubParsersAction) -> None:
    from benchmarks import budget  # its matrix: the counts in the help are the benchmark's own

    graphs = budget.DEFAULT_GRAPHS.split(",")
    matrix = len(budget.configurations(graphs, quick=False))
    sample = sum(i < matrix for i in budget.DEFAULT_SAMPLE)
    quick = len(budget.configurations(graphs, quick=True))
    p = sub.add_parser("budget", help="memory-control stress test: aborted steps, overruns, K vs smallest K, errors")
    p.add_argument("--graphs", default=budget.DEFAULT_GRAPHS,
                   help="comma-separated degree laws and dataset names (rotated over the models)")
    p.add_argument("--datasets", default=budget.DEFAULT_DATASETS,
                   help="comma-separated datasets (names or OGB directories) run at their own size, one "
                        "configuration each ('' for none)")
    p.add_argument("--num-nodes", type=positive_int, default=3000, help="nodes of each generated degree law")
    p.add_argument("--capacities", default="below-seed,seed,mid,whole",
                   help="capacity points per configuration (below-seed, seed, mid, whole)")
    add_spec_arguments(p, ("batch_size", "hidden", "steps", "root", "seed"), _OWN_DEFAULTS["budget"])
    p.add_argument("--search-every", type=non_negative_int, default=20, help="K/Kmin on every N-th step (0: never)")
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads per process")
    p.add_argument("--jobs", type=positive_int, default=min(2, os.cpu_count() or 1),
                   help="configurations run side by side, one process each (default: 2, or 1 on one core)")
    p.add_argument("--recompute-steps", type=non_negative_int, default=40,
                   help="batches timed with and without recomputation, alternating (0: skip)")
    p.add_argument("--max-configs", type=non_negative_int, default=None, help="only the first N configurations (0: none)")
    p.add_argument("--all-configs", action="store_true",
                   help=f"every configuration of the matrix (default: a deterministic sample of {sample} of "
                        f"{matrix}, plus one per --datasets)")
    p.add_argument("--user-models", default=None,
                   help="comma-separated models the memory model does not know (gin-layer, dgl-gat, dgl-sage-pool, "
                        "pyg-gat), one configuration each where its library imports (default: all but dgl-sage-pool; '' for none)")
    p.add_argument("--quick", action="store_true", help=f"{quick} configurations, 4 steps each (for tests)")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("budget"))


def _register_cache(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cache", help="feature bytes moved and step time: no cache, cache by degree, all on device")
    add_spec_arguments(p, ("dataset", "batch_size", "hidden", "fanouts", "steps", "root", "seed"), _OWN_DEFAULTS["cache"])
    p.add_argument("--scale", type=float, default=None,
                   help="generated datasets only: size in (0, 1] (default: 0.001 for synth-papers, else the dataset's)")
    p.add_argument("--threads", type=positive_int, default=1)
    add_output(p, "--figure", default=None, metavar="PNG",
               help="also sweep forced cache sizes at the mid capacity: bytes moved and K against the cache's share")
    add_output(p, "--json", default=None, metavar="OUT")
    p.set_defaults(func=_runner("cache"))
