"""Snakemake script (rule order_seeds): compute the dataset's seed ordering once, as cherry runs use it.

`cherry.planning.seed_rank` caches the ordering next to the dataset, so every cherry run of that
dataset, ordering and seed loads it instead of computing it (and parallel runs do not compute it twice).
The stamp records how long it took. A fault is one line through cherry's error boundary (`cherry.errors`).
"""
import sys
import time

from cherry.errors import run_boundary

snakemake = globals()["snakemake"]  # injected by Snakemake


def order_seeds() -> int:
    from cherry.data import load_dataset
    from cherry.io import write_json_atomic
    from cherry.planning import seed_rank

    wildcards = snakemake.wildcards
    start_s = time.perf_counter()
    dataset = load_dataset(snakemake.params.name, snakemake.params.root)  # the name behind the wildcard's slug
    load_s = time.perf_counter() - start_s
    rank = seed_rank(dataset, wildcards.ordering, int(wildcards.seed))
    ordering_s = time.perf_counter() - start_s - load_s
    stamp = {"dataset": snakemake.params.name, "ordering": wildcards.ordering, "seed": int(wildcards.seed),
             "num_nodes": None if rank is None else int(rank.numel()), "load_s": load_s, "ordering_s": ordering_s}
    write_json_atomic(snakemake.output.stamp, stamp)
    with open(snakemake.log[0], "w", encoding="utf-8") as log:
        print(stamp, file=log)
    return 0


sys.exit(run_boundary("order_seeds", order_seeds))
