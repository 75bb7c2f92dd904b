"""`python -m benchmarks.profile_syncs`: host syncs, copies and kernel launches per step, by K.

For each K, trains a few steps of SAGE (mean or lstm) on pre-sampled batches of a dataset with the
executor (planning done before the step, as the Trainer does) and reports, per step and per
micro-batch:
- ``syncs``: sync-forcing ops counted by `cherry.bench.syncs.SyncCounter` inside the per-micro-batch
  phases (gather, forward_backward) -- device-independent, so it runs on a CPU too;
- from ``torch.profiler`` over the whole steps: CUDA synchronisations (``cudaDeviceSynchronize``,
  ``cudaStreamSynchronize``, ``cudaEventSynchronize``), memcpy calls (``cudaMemcpy*``) and kernel
  launches (``cudaLaunchKernel``/``cuLaunchKernel``); zero on a CPU, where there is no device.
Writes a table to stdout and, with ``--json``, the rows.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from contextlib import contextmanager

import torch

from cherry.outputs import add_output, parse_checked

_SYNC_EVENTS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")
_MEMCPY_PREFIX = "cudaMemcpy"
_LAUNCH_EVENTS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


class _CountingProbe:
    def __init__(self, host_tensors):
        from cherry.bench.syncs import SyncCounter

        self._make = lambda: SyncCounter(host_tensors)
        self.counts: Counter = Counter()

    @contextmanager
    def phase(self, name):
        if name not in ("gather", "forward_backward"):
            yield
            return
        counter = self._make()
        with counter:
            yield
        self.counts.update(counter.counts)


def profile_k(dataset, spec, batches, k, device):
    """One row: syncs inside the micro-batch loop, and profiler counts per step at K micro-batches."""
    from cherry.execution import ExecutorOptions, MicrobatchExecutor
    from cherry.models import build_model
    from cherry.planning import MemoryModel

    torch.manual_seed(0)
    model = build_model(spec).to(device)
    ex = MicrobatchExecutor(model, torch.optim.Adam(model.parameters(), lr=1e-3), MemoryModel.for_model(spec),
                            ExecutorOptions.for_k(k), device)
    planned = [ex.plan_batch(b, dataset.features) for b in batches]
    ex.step(planned[0], dataset.features, dataset.labels)  # warm-up (allocator, cuDNN plans)
    host = [b.layout.batch_sizes for p in planned for m in p.plan.microbatches for b in m.layers if b.layout is not None]
    probe = _CountingProbe(host)
    ex.probe = probe
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize(device)
    with torch.profiler.profile(activities=activities) as prof:
        for p in planned[1:]:
            ex.step(p, dataset.features, dataset.labels)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    ex.close()
    steps = max(len(planned) - 1, 1)
    names = Counter()
    for event in prof.events():
        names[event.name] += 1
    syncs = sum(names[n] for n in _SYNC_EVENTS)
    memcpys = sum(c for n, c in names.items() if n.startswith(_MEMCPY_PREFIX))
    launches = sum(names[n] for n in _LAUNCH_EVENTS)
    loop_syncs = sum(probe.counts.values())
    return {"aggr": spec.aggr, "k": k, "steps": steps, "loop_syncs_per_microbatch": loop_syncs / (steps * k),
            "loop_sync_ops": dict(probe.counts), "cuda_syncs_per_step": syncs / steps,
            "memcpy_per_step": memcpys / steps, "launches_per_step": launches / steps,
            "launches_per_microbatch": launches / (steps * k)}


def main(argv=None) -> int:
    from cherry.cli.options import add_spec_arguments

    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_syncs", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="synth-tiny")
    parser.add_argument("--root", default=None)
    parser.add_argument("--aggrs", default="mean,lstm")
    parser.add_argument("--ks", default="1,8")
    add_spec_arguments(parser, ("batch_size", "fanouts"))  # the run schema's defaults
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3, help="profiled steps (after one warm-up)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_output(parser, "--json", default=None)
    args = parse_checked(parser, argv)
    try:
        ks = [int(v) for v in args.ks.split(",") if v]
        fanouts = list(args.fanouts)
    except ValueError:
        parser.error(f"--ks and --fanouts must be comma-separated ints, got {args.ks!r} and {args.fanouts!r}")
    if not ks or min(ks) < 1 or args.steps < 1 or args.batch_size < 1:
        parser.error("--ks, --steps and --batch-size must be positive")
    from cherry.data import load_dataset
    from cherry.models import ModelSpec
    from cherry.sampling import NeighborSampler

    device = torch.device(args.device)
    dataset = load_dataset(args.dataset, args.root)
    gen = torch.Generator().manual_seed(0)
    sampler = NeighborSampler(dataset.graph, fanouts)
    perm = dataset.train_idx[torch.randperm(dataset.train_idx.numel(), generator=gen)]
    seeds = [s for s in perm.split(args.batch_size)][: args.steps + 1]
    while len(seeds) < args.steps + 1:
        seeds.append(seeds[len(seeds) % max(len(seeds), 1)])
    batches = [sampler.sample(s, gen) for s in seeds]
    rows = []
    print(f"profile_syncs: {args.dataset}, batch {args.batch_size}, fanouts {fanouts}, device {device}")
    print(f"{'aggr':<6} {'K':>3} {'loop syncs/mb':>13} {'cuda syncs/step':>15} {'memcpy/step':>11} "
          f"{'launches/step':>13} {'launches/mb':>11}")
    for aggr in [a for a in args.aggrs.split(",") if a]:
        spec = ModelSpec("sage", dataset.feature_dim, args.hidden, dataset.num_classes, len(fanouts), aggr=aggr)
        for k in ks:
            r = profile_k(dataset, spec, batches, k, device)
            rows.append(r)
            print(f"{aggr:<6} {k:>3} {r['loop_syncs_per_microbatch']:>13.1f} {r['cuda_syncs_per_step']:>15.1f} "
                  f"{r['memcpy_per_step']:>11.1f} {r['launches_per_step']:>13.1f} {r['launches_per_microbatch']:>11.1f}",
                  flush=True)
    if args.json:
        from cherry.io import write_json_atomic

        write_json_atomic(args.json, {"args": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    from cherry.errors import run_boundary

    sys.exit(run_boundary("benchmarks.profile_syncs", main))
