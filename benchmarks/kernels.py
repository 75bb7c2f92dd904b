"""`cherry bench kernels`: Cherry's layers against stock DGL's and PyG's on one sampled batch at K = 1.

For each model (SAGE mean, pool and LSTM, GCN, GAT) one batch is sampled once with Cherry's sampler and
its input rows gathered once; then three models of the same widths run forward + backward (cross
entropy on the seeds' labels) on it: Cherry's (`cherry.models.build_model` on `Blocks`), DGL's
(``dgl.nn`` layers, `baselines.dgl.model.DglModel`, on the same adjacency as DGL blocks) and PyG's
(``torch_geometric.nn`` layers, `baselines.pyg.model.PygModel`, on the same edges as an edge_index).
Format conversions happen before any measurement; what is measured is the layers.

Measured the same way for every system, in rounds that interleave the systems (the order rotates):
- time: wall seconds of one forward + backward (CUDA synchronised on a GPU), ``--steps`` per round,
  with no memory tracker on; a round counts as one run of `cherry.report.stats.median_ratio`;
- peak: on the CPU, the profiler's allocator events (every allocation, inside native kernels too:
  Cherry's, DGL's and PyG's alike) over one extra forward + backward per round, bytes above what was
  live before; on a GPU ``torch.cuda.max_memory_allocated`` above the allocated bytes before.
Targets: Cherry's peak and time at most `TARGET_RATIO` x the leaner (smaller median) of DGL and PyG;
"within noise" where the ratio's interval reaches down to the target. A library that does not import
(DGL on a GPU machine without its CUDA build) is left out and shown as n/a.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn import functional as F

from benchmarks.threads import keeps_threads

MODELS = ("sage-mean", "sage-pool", "sage-lstm", "gcn", "gat")
SYSTEMS = ("cherry", "dgl", "pyg")
TARGET_RATIO = 1.1


@dataclass(frozen=True)
class Measured:
    """One system on one model: per-round forward+backward seconds and per-round peak bytes."""

    system: str
    round_seconds: tuple[tuple[float, ...], ...]
    peaks_bytes: tuple[int, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(t for run in self.round_seconds for t in run)

    @property
    def peak_bytes(self) -> int:
        return int(statistics.median(self.peaks_bytes))


def parse_models(text: str) -> tuple[str, ...]:
    """``"sage-mean,gat"`` -> the models, checked against `MODELS` before any work."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise ValueError(f"--models must be a comma-separated subset of {', '.join(MODELS)}, got {text!r}")
    return names


def model_spec(name: str, dataset, args: argparse.Namespace):
    from cherry.models.spec import ModelSpec

    model, _, aggr = name.partition("-")
    return ModelSpec(model, dataset.feature_dim, args.hidden, dataset.num_classes, len(args.fanouts),
                     aggr=aggr or None, heads=args.heads)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_allocated_bytes(fn: Callable[[], object], device: torch.device) -> int:
    """Peak bytes allocated while ``fn()`` runs, above those live before (module docstring)."""
    if device.type == "cuda":
        _sync(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        _sync(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    live = peak = 0
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    for event in sorted(events, key=lambda e: e.start_ns()):  # a free is an event of negative bytes
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def _step(model, run_model: Callable[[], torch.Tensor], labels: torch.Tensor) -> Callable[[], None]:
    """One forward + backward; gradients are dropped first so every call allocates them alike."""
    def step() -> None:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(run_model(), labels).backward()
    return step


def _cherry_step(spec, blocks, x, labels):
    from cherry.models import build_model

    model = build_model(spec).to(x.device)
    return _step(model, lambda: model(blocks, x), labels)


def _dgl_step(spec, blocks, x, labels):
    from baselines.dgl.model import DglModel, with_self_edges
    from cherry.compat import import_dgl
    from cherry.interop import to_dgl_blocks

    dgl = import_dgl()
    model = DglModel(dgl, spec).to(x.device)
    dgl_blocks = to_dgl_blocks(blocks)
    if model.needs_self_edges:
        dgl_blocks = [with_self_edges(dgl, b) for b in dgl_blocks]
    return _step(model, lambda: model(dgl_blocks, x), labels)


def _pyg_step(spec, blocks, x, labels):
    from baselines.pyg.model import PygModel

    model = PygModel(spec).to(x.device)
    edge_indices = [torch.stack([b.indices, torch.repeat_interleave(torch.arange(b.num_dst, device=x.device),
                                                                    b.in_degrees(), output_size=b.num_edges)])
                    for b in blocks.layers]

    def run_model() -> torch.Tensor:
        h = x
        for index, (block, edge_index) in enumerate(zip(blocks.layers, edge_indices)):
            h = model.forward_edges(index, h, edge_index, block.num_dst)
        return h
    return _step(model, run_model, labels)


STEPS = {"cherry": _cherry_step, "dgl": _dgl_step, "pyg": _pyg_step}


def available_systems() -> tuple[str, ...]:
    """Cherry and whichever of DGL and PyG import here (a GPU machine may lack DGL)."""
    from cherry.compat import dgl_available, pyg_available

    present = {"dgl": dgl_available()[0], "pyg": pyg_available()[0]}
    if not any(present.values()):
        raise ValueError("cherry bench kernels compares against DGL or PyG, but neither imports here")
    return ("cherry",) + tuple(name for name in SYSTEMS[1:] if present[name])


def measure_model(spec, blocks, x, labels, args, systems: tuple[str, ...] = SYSTEMS) -> list[Measured]:
    """Rounds interleaving ``systems`` (rotating order): ``args.steps`` timed calls and one peak each."""
    device = x.device
    torch.manual_seed(args.seed)
    steps = {name: STEPS[name](spec, blocks, x, labels) for name in systems}
    for step in steps.values():  # warm-up: first calls pay page faults, caches, lazy initialisation
        step()
    seconds = {name: [] for name in systems}
    peaks = {name: [] for name in systems}
    for r in range(args.repeats):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for name in order:
            run = []
            for _ in range(args.steps):
                _sync(device)
                started = time.perf_counter()
                steps[name]()
                _sync(device)
                run.append(time.perf_counter() - started)
            seconds[name].append(tuple(run))
            peaks[name].append(peak_allocated_bytes(steps[name], device))
    return [Measured(name, tuple(seconds[name]), tuple(peaks[name])) for name in systems]


def profile_tables(spec, blocks, x, labels, systems: tuple[str, ...], row_limit: int = 10) -> str:
    """`torch.profiler` tables (CPU time by op, self time first) of one forward + backward per system,
    after two untimed ones: where a ratio's time goes."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    out = []
    for name in systems:
        step = STEPS[name](spec, blocks, x, labels)
        step()
        step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit,
                                          max_name_column_width=40)
        out.append(f"profile of {name}, one fwd+bwd:\n{table}")
    return "\n".join(out)


def verdict(ratio) -> str:
    """Target `TARGET_RATIO` on a ratio with an interval (a time) or a plain float (a peak)."""
    value, low = (ratio, ratio) if isinstance(ratio, float) else (ratio.value, ratio.low)
    if value <= TARGET_RATIO:
        return "met"
    return "met (within noise)" if low <= TARGET_RATIO else "NOT met"


def compare(results: list[Measured]) -> dict:
    """Cherry against the leaner of DGL and PyG: peak ratio, time ratio with its interval, verdicts."""
    from cherry.report.stats import median_ratio

    by_name = {m.system: m for m in results}
    cherry = by_name["cherry"]
    others = [m for m in results if m.system != "cherry"]
    lean_mem = min(others, key=lambda m: m.peak_bytes)
    lean_time = min(others, key=lambda m: m.median_s)
    peak_ratio = cherry.peak_bytes / max(lean_mem.peak_bytes, 1)
    time_ratio = median_ratio(cherry.round_seconds, lean_time.round_seconds)
    return {"leaner_memory": lean_mem.system, "peak_ratio": peak_ratio, "peak_verdict": verdict(peak_ratio),
            "faster": lean_time.system, "time_ratio": time_ratio,
            "time_verdict": verdict(time_ratio) if time_ratio else "too few steps"}


def _batch(args: argparse.Namespace):
    """The dataset, one sampled batch (`Blocks`), its input rows and its seeds' labels, on the device."""
    from cherry.data import load_dataset
    from cherry.sampling import NeighborSampler

    dataset = load_dataset(args.dataset, args.root)
    if args.batch_size > dataset.train_idx.numel():
        raise ValueError(f"--batch-size {args.batch_size} exceeds the {dataset.train_idx.numel()} training seeds "
                         f"of {args.dataset}")
    gen = torch.Generator().manual_seed(args.seed)
    seeds = dataset.train_idx[torch.randperm(dataset.train_idx.numel(), generator=gen)[:args.batch_size]]
    blocks = NeighborSampler(dataset.graph, tuple(args.fanouts)).sample(seeds, gen)
    device = torch.device(args.device)
    x = dataset.features.index_select(0, blocks.layers[0].src_nodes).float().to(device)
    labels = dataset.labels.index_select(0, seeds).long().to(device)
    return dataset, blocks.to(device), x, labels


def _row(model: str, results: list[Measured], c: dict) -> str:
    mib = 1 << 20
    by = {m.system: m for m in results}
    cells = ([f"{by[n].peak_bytes / mib:7.1f}" if n in by else "n/a" for n in SYSTEMS]
             + [f"{by[n].median_s * 1e3:8.1f}" if n in by else "n/a" for n in SYSTEMS])
    t = c["time_ratio"]
    time_text = t.text() if t else "n/a"
    return (f"| {model} | " + " | ".join(cells) + f" | {c['peak_ratio']:.2f} vs {c['leaner_memory']}: "
            f"{c['peak_verdict']} | {time_text} vs {c['faster']}: {c['time_verdict']} |")


@keeps_threads
def run(args: argparse.Namespace) -> int:
    from cherry.ops import extension_status

    from cherry.io import check_writable

    models = parse_models(args.models)
    if args.json is not None:
        check_writable(args.json)  # before the work: a bad path must not lose the results at the end
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"--device {args.device} asked for, but CUDA is not available here")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    systems = available_systems()
    dataset, blocks, x, labels = _batch(args)
    sizes = ", ".join(f"{b.num_src:,} src / {b.num_dst:,} dst / {b.num_edges:,} edges" for b in blocks.layers)
    print(f"cherry bench kernels: {args.dataset}, batch {args.batch_size}, fanouts {','.join(map(str, args.fanouts))} "
          f"(layers: {sizes}), hidden {args.hidden}, heads {args.heads} (gat), K = 1, device {args.device}, "
          f"{torch.get_num_threads()} torch threads; {args.repeats} interleaved rounds of {args.steps} fwd+bwd; "
          f"cherry ops: {extension_status()}")
    print("\n| model | peak MiB cherry | dgl | pyg | fwd+bwd ms cherry | dgl | pyg "
          "| peak cherry / leaner (target <= 1.1) | time cherry / faster [95% interval] (target <= 1.1) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    rows, profiles = [], []
    for name in models:
        results = measure_model(model_spec(name, dataset, args), blocks, x, labels, args, systems)
        c = compare(results)
        print(_row(name, results, c), flush=True)
        if args.profile:
            profiles.append(f"\n{name}: " + profile_tables(model_spec(name, dataset, args), blocks, x, labels, systems))
        t = c["time_ratio"]
        rows.append({"model": name, **{f"{m.system}_peak_bytes": m.peak_bytes for m in results},
                     **{f"{m.system}_median_fwd_bwd_s": m.median_s for m in results},
                     "peak_ratio": c["peak_ratio"], "leaner_memory": c["leaner_memory"],
                     "peak_verdict": c["peak_verdict"], "time_ratio": t.value if t else None,
                     "time_interval": [t.low, t.high] if t else None, "faster": c["faster"],
                     "time_verdict": c["time_verdict"]})
    for text in profiles:
        print(text)
    if args.json is not None:
        from cherry.errors import write_json_keeping

        write_json_keeping(args.json, {"dataset": args.dataset, "batch_size": args.batch_size,
                                      "fanouts": list(args.fanouts), "hidden": args.hidden, "heads": args.heads,
                                      "device": args.device, "repeats": args.repeats, "steps": args.steps,
                                      "rows": rows})
    return 0
