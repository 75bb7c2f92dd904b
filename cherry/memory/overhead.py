"""Benchmark: the tracker's time overhead on a GraphSAGE-like forward/backward step (CPU).

Run ``python -m cherry.memory.overhead``. Each configuration times the same 2-layer step (gather,
``index_add_`` mean aggregation, two matmuls, ReLU, cross-entropy, backward) with and without a
`TensorMemoryTracker`, interleaved so machine noise hits both alike, and prints the ratio of medians.
The per-op cost is a fixed few microseconds of Python, so the ratio is worst on tiny graphs.
"""
from __future__ import annotations

import argparse
import sys
import statistics
import time

import torch

from cherry.memory.sizes import format_size
from cherry.memory.tracker import TensorMemoryTracker

# (name, source nodes, edges per layer, feature width)
CONFIGS = [("tiny", 500, 2_000, 32), ("small", 5_000, 50_000, 64), ("medium", 20_000, 200_000, 128)]


def _make_inputs(num_nodes: int, num_edges: int, width: int, generator: torch.Generator):
    x = torch.randn(num_nodes, width, generator=generator)
    src = torch.randint(0, num_nodes, (num_edges,), generator=generator)
    dst_count = max(num_nodes // 4, 1)
    dst = torch.randint(0, dst_count, (num_edges,), generator=generator)
    labels = torch.randint(0, 8, (dst_count,), generator=generator)
    weights = [torch.randn(width, width, generator=generator, requires_grad=True) for _ in range(3)]
    head = torch.randn(width, 8, generator=generator, requires_grad=True)
    return x, src, dst, dst_count, labels, weights, head


def sage_step(x, src, dst, dst_count, labels, weights, head) -> None:
    """Two mean-aggregation layers over the same edges (dst nodes are a prefix of src nodes)."""
    deg = torch.zeros(dst_count).index_add_(0, dst, torch.ones_like(dst, dtype=torch.float)).clamp_(min=1)
    h = x
    for w_self, w_neigh in ((weights[0], weights[1]), (weights[2], weights[1])):
        agg = torch.zeros(dst_count, h.shape[1]).index_add(0, dst, h[src]) / deg[:, None]
        h_dst = h[:dst_count] @ w_self + agg @ w_neigh
        h = torch.cat([torch.relu(h_dst), h[dst_count:]]) if h.shape[0] > dst_count else torch.relu(h_dst)
    loss = torch.nn.functional.cross_entropy(h[:dst_count] @ head, labels)
    loss.backward()
    for p in (*weights, head):
        p.grad = None


def measure(num_nodes: int, num_edges: int, width: int, repeats: int = 15) -> dict:
    """Median seconds per step untracked and tracked, their ratio, and the tracked peak bytes."""
    gen = torch.Generator().manual_seed(0)
    inputs = _make_inputs(num_nodes, num_edges, width, gen)
    sage_step(*inputs)  # warm-up, also of the first dispatch mode (it imports torch._dynamo: ~2 s once)
    with TensorMemoryTracker():
        sage_step(*inputs)
    plain_s, tracked_s, peak_bytes = [], [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        sage_step(*inputs)
        plain_s.append(time.perf_counter() - start)
        tracker = TensorMemoryTracker()
        start = time.perf_counter()
        with tracker:
            sage_step(*inputs)
        tracked_s.append(time.perf_counter() - start)
        peak_bytes = tracker.peak_bytes
    plain, tracked = statistics.median(plain_s), statistics.median(tracked_s)
    return {"plain_s": plain, "tracked_s": tracked, "ratio": tracked / plain, "peak_bytes": peak_bytes}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name, nodes, edges, width in CONFIGS:
        r = measure(nodes, edges, width, args.repeats)
        print(f"{name:>6}: {nodes} nodes, {edges} edges, width {width}: untracked {r['plain_s'] * 1e3:.2f} ms, "
              f"tracked {r['tracked_s'] * 1e3:.2f} ms, ratio {r['ratio']:.2f}x, tracked peak {format_size(r['peak_bytes'])}")


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("cherry.memory.overhead", main))
