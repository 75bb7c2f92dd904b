"""GPU microbenchmark of the feature cache's gather (`make gpu-check`, section cache-gather).

    python -m benchmarks.cache_gather_gpu [--rows 2000000] [--width 128] [--nodes 200000] [--repeats 20]

On one CUDA device, for a pinned host table of ``--rows`` x ``--width`` float32 and ``--nodes`` random
distinct rows per gather, at cached shares 0, 0.25, 0.5 and 0.9 of the table (hottest = lowest ids,
the gathered rows drawn so that the hit rate equals the share), it times, interleaved, with CUDA
events (median of ``--repeats`` after one warm-up):
- ``uva``: ``cherry::cache_gather`` (hits from the device cache, misses read in place through the
  pinned table's mapped address);
- ``host``: the path without a cache (rows gathered into a pinned buffer on the host, one copy).
It checks that both give ``table[nodes]`` and prints the effective rate of the miss bytes. Needs no
dgl, ogb, pymetis, scipy or snakemake. Exits 0 without a GPU (says so), unless ``--device cpu`` asks for
the same comparison on the host (unpinned, timed with ``time.perf_counter``: the check's ``--on-cpu`` run).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def _time(fn, repeats: int, device: str = "cuda") -> float:
    fn()
    times = []
    for _ in range(repeats):
        if device == "cpu":
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--nodes", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args(argv)
    for name in ("rows", "width", "nodes", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    if args.nodes > args.rows:
        p.error(f"--nodes {args.nodes} exceeds --rows {args.rows} (the gathered rows are distinct)")
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        print("cache_gather_gpu: no CUDA device here: nothing measured")
        return 0
    from cherry.execution.feature_cache import pin_in_place
    from cherry.execution.transfer import PinnedRows
    from cherry.ops import extension_status
    from cherry.ops.feature_cache import _cache_gather, _has_native_op

    name = torch.cuda.get_device_name(0) if dev == "cuda" else "cpu"
    print(f"device {name}; {extension_status()}; native cache_gather: {_has_native_op()}")
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(args.rows, args.width, generator=gen)
    table = pin_in_place(table) if dev == "cuda" else table
    row_bytes = args.width * 4
    pinned = PinnedRows(slots=1)
    print(f"{'cached':>6} {'hit':>6} {'uva ms':>8} {'host ms':>8} {'uva/host':>8} {'miss GB/s (uva)':>15}")
    for share in (0.0, 0.25, 0.5, 0.9):
        cached = int(share * args.rows)
        n_hit = int(share * args.nodes)
        hits = torch.randperm(max(cached, 1), generator=gen)[:n_hit] if cached else torch.empty(0, dtype=torch.long)
        misses = cached + torch.randperm(args.rows - cached, generator=gen)[: args.nodes - n_hit]
        nodes = torch.cat([hits, misses])[torch.randperm(args.nodes, generator=gen)]
        slot_of = torch.full((args.rows,), -1, dtype=torch.long)
        slot_of[:cached] = torch.arange(cached)
        cache, slot_dev, nodes_dev = table[:cached].to(dev), slot_of.to(dev), nodes.to(dev)
        expected = table[nodes].to(dev)
        out = _cache_gather(slot_dev, cache, table, nodes_dev)
        if not torch.equal(out, expected):
            print(f"cache_gather differs from table[nodes] at share {share}")
            return 1
        t_uva = _time(lambda: _cache_gather(slot_dev, cache, table, nodes_dev), args.repeats, dev)
        t_host = _time(lambda: pinned.gather(table, nodes, dev), args.repeats, dev)
        miss_bytes = (args.nodes - n_hit) * row_bytes
        print(f"{share:>6.2f} {n_hit / args.nodes:>6.2f} {t_uva * 1e3:>8.3f} {t_host * 1e3:>8.3f} "
              f"{t_uva / t_host:>8.2f} {miss_bytes / t_uva / 1e9:>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
