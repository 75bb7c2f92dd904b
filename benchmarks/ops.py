"""`cherry bench ops`: Cherry's native graph ops against what DGL and PyG do, side by side in one run.

On one graph and one batch of seeds (median of ``--repeats`` timed runs after a few warm-up runs each):
1. sampling ``len(fanouts)``-layer blocks: Cherry's native sampler, DGL's
   ``dgl.dataloading.NeighborSampler.sample_blocks``, PyG's ``NeighborLoader`` (when pyg-lib or
   torch-sparse exists) and Cherry's pure-PyTorch reference sampler for context;
2. splitting the sampled batch into K micro-batches: Cherry's `slice_blocks_many` against rebuilding each
   micro-batch's blocks with ``dgl.in_subgraph`` + ``dgl.to_block`` layer by layer (what Betty and
   Buffalo do), including turning each sampled block into a graph once per batch;
3. mean aggregation forward + backward on the input block at ``--features`` columns: the fused
   ``csr_aggregate`` against PyG-style message passing (``index_select`` of an ``[E, F]`` message
   tensor, then ``torch_geometric.utils.scatter``), in time and in peak bytes of tensors created
   (`cherry.memory.TensorMemoryTracker`).
Then the three targets: sampler at least as fast as DGL's, slicing >= 10x faster than rebuilding, fused
peak <= half of message passing. CPU only (the PyPI DGL wheel has no CUDA).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from benchmarks.threads import keeps_threads


TARGET_SAMPLER_SPEEDUP = 1.0
TARGET_SLICE_SPEEDUP = 10.0
TARGET_PEAK_RATIO = 0.5


def chung_lu_graph(num_nodes: int, avg_degree: float, generator: torch.Generator, exponent: float = 2.1):
    """A directed Chung-Lu graph: ``num_nodes * avg_degree`` edges with both endpoints drawn with
    probability proportional to power-law weights (tail exponent ``exponent``); self-loops dropped."""
    from cherry.data import Graph

    if not avg_degree > 0:
        raise ValueError(f"avg_degree must be positive, got {avg_degree!r}")
    ranks = torch.arange(1, num_nodes + 1, dtype=torch.float64)
    weights = ranks ** (-1.0 / (exponent - 1.0))
    num_edges = int(num_nodes * avg_degree)
    src = torch.multinomial(weights, num_edges, replacement=True, generator=generator)
    dst = torch.multinomial(weights, num_edges, replacement=True, generator=generator)
    keep = src != dst
    return Graph.from_edges(src[keep], dst[keep], num_nodes)


WARMUP_RUNS = 3  # first calls pay page faults and cold caches, for every system alike


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall seconds of ``fn()`` over ``repeats`` runs after `WARMUP_RUNS` untimed runs."""
    for _ in range(WARMUP_RUNS):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes of tensor storages created while ``fn()`` runs (inputs made before are not counted)."""
    from cherry.memory import TensorMemoryTracker

    with TensorMemoryTracker() as tracker:
        fn()
        return tracker.peak_bytes


def reference_sample(graph, seeds: torch.Tensor, fanouts, random_seed: int) -> None:
    """Cherry's sampling loop on the pure-PyTorch reference op (the native op's oracle)."""
    from cherry.ops import reference_sampling as ref

    dst = seeds
    for layer, fanout in enumerate(reversed(tuple(fanouts))):
        _, _, dst = ref.sample_neighbors(graph.indptr, graph.indices, dst, fanout, random_seed + layer)


def dgl_rebuild(dgl, blocks, parts: list[torch.Tensor]) -> int:
    """Betty/Buffalo-style micro-batch blocks: per micro-batch, top-down, in-edges of the layer's
    destinations (``dgl.in_subgraph``) compacted into a block (``dgl.to_block``). Works in the batch's
    local ids (destinations are a prefix of sources, so a layer's sources are the next one's
    destinations). Returns the summed number of input nodes (for the equality check)."""
    layer_graphs = []
    for block in blocks:  # a graph per sampled layer, once per batch
        src, dst = block.edges()
        layer_graphs.append(dgl.graph((src, dst), num_nodes=block.num_src_nodes()))
    total_inputs = 0
    for part in parts:
        dst = part
        for graph in reversed(layer_graphs):
            frontier = dgl.in_subgraph(graph, dst)
            block = dgl.to_block(frontier, dst)
            dst = block.srcdata[dgl.NID]
        total_inputs += int(dst.numel())
    return total_inputs


def message_passing_mean(indptr: torch.Tensor, indices: torch.Tensor, x_src: torch.Tensor) -> torch.Tensor:
    """PyG ``SAGEConv(aggr="mean")``-style propagation: gather ``[E, F]`` messages, scatter-mean."""
    from torch_geometric.utils import scatter

    num_dst = indptr.numel() - 1
    dst = torch.repeat_interleave(torch.arange(num_dst), indptr[1:] - indptr[:-1])
    return scatter(x_src.index_select(0, indices), dst, dim=0, dim_size=num_dst, reduce="mean")


def _fwd_bwd(aggregate, block, x_src: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        x = x_src.detach().requires_grad_(True)
        aggregate(block.indptr, block.indices, x).backward(grad)
    return run


def _row(name: str, seconds: float | None, note: str = "") -> str:
    shown = "skipped" if seconds is None else f"{seconds * 1e3:10.2f} ms"
    return f"  {name:<44}{shown:>14}  {note}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _load(args, generator: torch.Generator):
    if args.synthetic_nodes is not None:
        graph = chung_lu_graph(args.synthetic_nodes, args.synthetic_degree, generator)
        label = f"Chung-Lu graph ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges)"
        candidates = torch.arange(graph.num_nodes)
    else:
        from cherry.data import load_dataset

        dataset = load_dataset(args.dataset, args.root)
        graph, candidates = dataset.graph, dataset.train_idx
        label = f"{args.dataset} ({graph.num_nodes:,} nodes, {graph.num_edges:,} edges)"
    if args.batch_size > candidates.numel():
        raise ValueError(f"--batch-size {args.batch_size} exceeds the {candidates.numel()} candidate seeds")
    seeds = candidates[torch.randperm(candidates.numel(), generator=generator)[: args.batch_size]].contiguous()
    return graph, seeds, label


@keeps_threads
def run(args: argparse.Namespace) -> int:
    from cherry.compat.dgl import dgl_graph
    from cherry.compat import dgl_available, import_dgl, pyg_sampling_available
    from cherry.ops import csr_aggregate, extension_status
    from cherry.sampling import NeighborSampler, slice_blocks_many

    if args.microbatches > args.batch_size:
        raise ValueError(f"--microbatches {args.microbatches} exceeds --batch-size {args.batch_size}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)  # also OpenMP's default for this thread, which DGL uses
    generator = torch.Generator().manual_seed(args.seed)
    graph, seeds, label = _load(args, generator)
    fanouts, repeats = tuple(args.fanouts), args.repeats
    print(f"cherry bench ops: {label}; batch {seeds.numel()}, fanouts {','.join(map(str, fanouts))}, "
          f"{repeats} repeats, {torch.get_num_threads()} torch threads; cherry ops: {extension_status()}")
    dgl_ok, dgl_note = dgl_available()
    dgl = import_dgl() if dgl_ok else None

    # (1) sampling
    print("\n(1) sampling blocks (median per batch)")
    sampler = NeighborSampler(graph, fanouts)
    t_cherry = median_s(lambda: sampler.sample(seeds, torch.Generator().manual_seed(1)), repeats)
    t_ref = median_s(lambda: reference_sample(graph, seeds, fanouts, 1), repeats)
    print(_row("cherry NeighborSampler (native)", t_cherry))
    print(_row("cherry reference sampler (pure PyTorch)", t_ref, f"{t_ref / t_cherry:.1f}x cherry"))
    t_dgl = None
    if dgl is not None:
        g = dgl_graph(dgl, graph)
        dgl_sampler = dgl.dataloading.NeighborSampler(list(fanouts))
        t_dgl = median_s(lambda: dgl_sampler.sample_blocks(g, seeds), repeats)
        print(_row("dgl NeighborSampler.sample_blocks", t_dgl, f"{t_dgl / t_cherry:.2f}x cherry"))
    else:
        print(f"  dgl: skipped ({dgl_note})")
    pyg_ok, pyg_note = pyg_sampling_available()
    if pyg_ok:
        from cherry.compat.pyg import pyg_data
        from torch_geometric.loader import NeighborLoader

        data = pyg_data(graph)
        loader_args = dict(num_neighbors=list(reversed(fanouts)), input_nodes=seeds, batch_size=seeds.numel())
        t_pyg = median_s(lambda: next(iter(NeighborLoader(data, **loader_args))), repeats)
        print(_row(f"pyg NeighborLoader ({pyg_note})", t_pyg, f"{t_pyg / t_cherry:.2f}x cherry"))
    else:
        print(f"  pyg: skipped ({pyg_note})")

    # (2) micro-batch construction
    k = args.microbatches
    print(f"\n(2) splitting the sampled batch into K={k} micro-batches (median per batch)")
    blocks = sampler.sample(seeds, torch.Generator().manual_seed(1))
    parts = list(torch.arange(seeds.numel()).chunk(k))
    t_slice = median_s(lambda: slice_blocks_many(blocks, parts), repeats)
    cherry_inputs = sum(mb.input_nodes.numel() for mb in slice_blocks_many(blocks, parts))
    print(_row("cherry slice_blocks_many (native)", t_slice))
    t_rebuild = None
    if dgl is not None:
        dgl_blocks = [dgl.create_block(("csc", (b.indptr, b.indices, torch.empty(0, dtype=torch.int64))),
                                       num_src_nodes=b.num_src, num_dst_nodes=b.num_dst) for b in blocks.layers]
        t_rebuild = median_s(lambda: dgl_rebuild(dgl, dgl_blocks, parts), repeats)
        same = "same inputs" if dgl_rebuild(dgl, dgl_blocks, parts) == cherry_inputs else "DIFFERENT inputs"
        print(_row("dgl in_subgraph + to_block rebuild", t_rebuild, f"{t_rebuild / t_slice:.1f}x cherry; {same}"))
    else:
        print(f"  dgl: skipped ({dgl_note})")

    # (3) aggregation
    block = blocks.layers[0]
    print(f"\n(3) mean aggregation fwd+bwd, input block ({block.num_dst:,} dst, {block.num_src:,} src, "
          f"{block.num_edges:,} edges) x {args.features} features")
    x_src = torch.randn(block.num_src, args.features, generator=generator)
    grad = torch.randn(block.num_dst, args.features, generator=generator)
    fused = _fwd_bwd(lambda ip, ix, x: csr_aggregate(ip, ix, x, "mean"), block, x_src, grad)
    mp = _fwd_bwd(message_passing_mean, block, x_src, grad)
    t_fused, t_mp = median_s(fused, repeats), median_s(mp, repeats)
    peak_fused, peak_mp = peak_bytes(fused), peak_bytes(mp)
    mib = 1 << 20
    print(_row("cherry csr_aggregate", t_fused, f"peak {peak_fused / mib:8.1f} MiB"))
    print(_row("pyg-style index_select + scatter", t_mp,
               f"peak {peak_mp / mib:8.1f} MiB; {t_mp / t_fused:.2f}x time, {peak_mp / max(peak_fused, 1):.2f}x memory"))

    print("\ntargets")
    if t_dgl is not None:
        speedup = t_dgl / t_cherry
        print(f"  sampler vs DGL: {speedup:.2f}x (target >= {TARGET_SAMPLER_SPEEDUP:g}x): "
              f"{_verdict(speedup >= TARGET_SAMPLER_SPEEDUP)}")
    if t_rebuild is not None:
        speedup = t_rebuild / t_slice
        print(f"  slicing vs rebuilding: {speedup:.1f}x (target >= {TARGET_SLICE_SPEEDUP:g}x): "
              f"{_verdict(speedup >= TARGET_SLICE_SPEEDUP)}")
    ratio = peak_fused / max(peak_mp, 1)
    print(f"  fused / message-passing peak: {ratio:.2f} (target <= {TARGET_PEAK_RATIO:g}): "
          f"{_verdict(ratio <= TARGET_PEAK_RATIO)}")
    return 0
