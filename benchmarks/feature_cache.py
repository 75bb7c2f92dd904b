"""`cherry bench cache`: input-feature bytes moved host-to-device and step time with and without a
device feature cache, at three capacities of the CPU's emulated device.

On a generated graph (default synth-papers, papers100M-shaped, at ``--scale``) it trains the same
``--steps`` batches of epoch 0 with Cherry's `Trainer` (automatic K, budget = capacity less the run
spec's reserve) in three residencies per capacity:
- ``none``: every input row gathered from host memory;
- ``degree``: the planner's choice (``feature_cache`` "auto": a cache of the hottest rows by
  in-degree sized together with K, all rows when they fit beside the largest micro-batch);
- ``all``: every row on the device (an out-of-memory where they do not fit: a result, not a failure).
The capacities are set from the dataset: ``roomy`` (all rows fit beside the K = 1 micro-batch),
``mid`` and ``tight`` (fractions of it). Per run it prints the cache's rows and share of the budget,
K, the bytes moved per step and per epoch (deterministic: counted as a GPU run moves them, see
`cherry.execution.executor`), the cache's hit rate, the CPU step time (median and p10-p90 over the
steps of one run: the 2-core machine is shared, so read it as indicative), and the transfer time the
cost table (`cherry.planning.residency.ResidencyCosts`) puts on those bytes at a GPU's link rate.

``--figure PNG``: at the ``mid`` capacity, a sweep over forced cache sizes (the planner's candidates)
plotted as bytes moved per epoch and K against the cache's share of the budget.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

from benchmarks.threads import keeps_threads

MODES = ("none", "degree", "all")
_PAPERS_SCALE = 0.001  # synth-papers at this scale when no --scale is given: about 111,000 nodes


def _spec(args, capacity_bytes: int | None, mode: str):
    from cherry.spec import make_spec

    option = {"none": "none", "degree": "auto", "all": "all"}[mode]
    return make_spec(dataset=args.dataset, hidden=args.hidden, fanouts=args.fanouts, batch_size=args.batch_size,
                     epochs=1, evaluate=False, max_steps_per_epoch=args.steps, seed=args.seed,
                     device_memory_bytes=capacity_bytes, options={"ordering": "bfs", "feature_cache": option})


def reference_bytes(dataset, args) -> tuple[int, int]:
    """``(K = 1 estimate of the first batch's largest micro-batch, feature table bytes)``."""
    from cherry.execution import Trainer
    from cherry.sampling import sampling_generator, spec_seed_batches

    trainer = Trainer(dataset, _spec(args, None, "none"))
    try:
        seeds = spec_seed_batches(trainer.spec, dataset.train_idx, 0)[0]
        blocks = trainer.sampler.sample(seeds, sampling_generator(args.seed))
        peak = trainer.executor.plan(blocks, num_microbatches=1).max_estimated_bytes
    finally:
        trainer.close()
    return peak, dataset.features.numel() * dataset.features.element_size()


def capacities(k1_bytes: int, feature_bytes: int, num_rows: int) -> dict[str, int]:
    """Three emulated capacities (budget = capacity less the spec's reserve)."""
    from cherry.spec import BUDGET_RESERVE_FRACTION
    from cherry.systems.table import system_entry

    # roomy: the K = 1 micro-batch and every row (plus the 8-byte slot index per row) within the
    # planner's limit, budget * (1 - safety)
    limit = 1 - system_entry("cherry").option_defaults["safety"]
    index_bytes = 8 * num_rows
    budgets = {"roomy": int((k1_bytes + 1.05 * feature_bytes + index_bytes) / limit),
               "mid": int(0.6 * k1_bytes + 0.3 * feature_bytes), "tight": int(0.45 * k1_bytes)}
    return {name: int(b / (1 - BUDGET_RESERVE_FRACTION)) + 1 for name, b in budgets.items()}


def train_once(dataset, spec, cache_rows: int | None = None) -> dict:
    """One epoch of ``spec`` (capped at its steps) on the emulated device; ``cache_rows`` forces a cache
    of that many hottest rows. Returns the row of the report (status oom when it did not fit)."""
    from cherry.execution import Trainer
    from cherry.execution.feature_cache import FeatureCache
    from cherry.memory import DeviceMemory
    from cherry.planning.residency import ALL, CACHE, NONE, ResidencyPlan, hot_order
    from cherry.planning import BudgetTooSmallError
    from cherry.sampling import spec_seed_batches
    from cherry.spec import resolve_budget_bytes

    row = {"status": "ok"}
    times, steps = [], []
    plan = None
    with DeviceMemory("cpu", spec.device_memory_bytes) as memory:
        trainer = None
        try:
            if cache_rows is not None:  # what is forced, also when it does not fit
                n, f = dataset.features.shape
                mode = ALL if cache_rows == n else CACHE if cache_rows else NONE
                plan = ResidencyPlan(mode, cache_rows, n, f * dataset.features.element_size(),
                                     resolve_budget_bytes(spec), "forced by the benchmark")
            trainer = Trainer(dataset, spec, memory=memory)
            if cache_rows is not None:
                trainer.executor.set_feature_cache(FeatureCache(trainer.data.features, plan,
                                                                hot_order(dataset.graph.indptr), "cpu", memory))
                trainer.residency = plan
            with trainer.loader(trainer.epoch_batches(0)) as loader:
                for batch in loader:
                    t0 = time.perf_counter()
                    steps.append(trainer.step(batch.prepared))
                    times.append(time.perf_counter() - t0)
        except (torch.OutOfMemoryError, BudgetTooSmallError) as exc:
            # a refusal (the cache leaves too little for any micro-batch) is a result too, as an out-of-memory is
            status = "oom" if isinstance(exc, torch.OutOfMemoryError) else "refused"
            row.update(status=status, reason=str(exc).splitlines()[0][:120])
        finally:
            if trainer is not None:
                trainer.close()
    plan = trainer.residency if trainer is not None and cache_rows is None else plan
    moved = [s.feature_bytes_moved for s in steps]
    read = sum(s.feature_rows_read for s in steps)
    row.update({
        "cache_mode": plan.mode if plan else None, "cache_rows": plan.cache_rows if plan else None,
        "cache_share": plan.budget_share if plan else None, "steps": len(steps),
        "k_max": max((s.num_microbatches for s in steps), default=None),
        "k_mean": statistics.fmean(s.num_microbatches for s in steps) if steps else None,
        "bytes_per_step": statistics.fmean(moved) if moved else None,
        "bytes_per_epoch": sum(moved) if len(steps) == len(spec_seed_batches(spec, dataset.train_idx, 0)) else None,
        "hit_rate": 1 - sum(s.feature_rows_missed for s in steps) / read if read else None,
        "step_s_median": statistics.median(times) if times else None,
        "step_s_p10": _quantile(times, 0.1), "step_s_p90": _quantile(times, 0.9),
        "peak_bytes": max((s.measured_peak_bytes or 0 for s in steps), default=None),
    })
    return row


def _quantile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _mib(value) -> str:
    return "-" if value is None else f"{value / 2**20:.2f}"


HEADER = (f"{'capacity':<16} {'mode':<7} {'status':<6} {'rows':>7} {'share':>6} {'K':>3} {'MiB/step':>9} "
          f"{'MiB/epoch':>10} {'hit':>6} {'step s (p10-p90)':>22} {'GPU link ms/step':>16}")


def format_row(row: dict) -> str:
    from cherry.planning.residency import ResidencyCosts

    link = "-" if row["bytes_per_step"] is None else f"{row['bytes_per_step'] / ResidencyCosts().h2d_bytes_per_s * 1e3:.3f}"
    step = "-" if row["step_s_median"] is None else \
        f"{row['step_s_median']:.3f} ({row['step_s_p10']:.3f}-{row['step_s_p90']:.3f})"
    share = "-" if row["cache_share"] is None else f"{row['cache_share']:.2f}"
    hit = "-" if row["hit_rate"] is None else f"{row['hit_rate']:.3f}"
    return (f"{row['capacity']:<16} {row['mode']:<7} {row['status']:<6} {row['cache_rows'] if row['cache_rows'] is not None else '-':>7} "
            f"{share:>6} {row['k_max'] if row['k_max'] is not None else '-':>3} {_mib(row['bytes_per_step']):>9} "
            f"{_mib(row['bytes_per_epoch']):>10} {hit:>6} {step:>22} {link:>16}")


def sweep(dataset, args, capacity_bytes: int) -> list[dict]:
    """Forced cache sizes (the planner's candidates) at one capacity: the figure's points."""
    from cherry.planning.residency import candidate_rows

    rows = []
    for cache_rows in candidate_rows(dataset.features.shape[0]):
        row = train_once(dataset, _spec(args, capacity_bytes, "none"), cache_rows=cache_rows)
        row.update(capacity=f"sweep {_mib(capacity_bytes)}MiB", mode="forced")
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def plot(rows: list[dict], png: str, title: str, chosen_share: float | None = None) -> None:
    from cherry.report.plotting import grid, save_figure

    ok = [r for r in rows if r["status"] == "ok" and r["cache_share"] is not None]
    fig, axes = grid(1, 2)
    axes = axes[0]
    shares = [r["cache_share"] for r in ok]
    axes[0].plot(shares, [r["bytes_per_epoch"] / 2**20 for r in ok], marker="o", color="#c0392b")
    axes[0].set_xlabel("feature cache / budget")
    axes[0].set_ylabel("feature MiB moved host-to-device per epoch")
    axes[1].plot(shares, [r["k_max"] for r in ok], marker="s", color="#2471a3")
    axes[1].set_xlabel("feature cache / budget")
    axes[1].set_ylabel("K (micro-batches per step, max)")
    for r in rows:
        if r["status"] != "ok" and r["cache_share"] is not None:
            for ax in axes:
                ax.axvline(r["cache_share"], color="#7f8c8d", linestyle=":")
                ax.annotate("does not fit" if r["status"] == "refused" else "out of memory", (r["cache_share"], 0.5), xycoords=("data", "axes fraction"),
                            rotation=90, ha="right", fontsize=8, color="#7f8c8d")
    if chosen_share is not None:
        for ax in axes:
            ax.axvline(chosen_share, color="#229954", linestyle="--", label="planner's choice")
        axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, png, None)


def _scale(args) -> float | None:
    """``--scale`` where it applies: a generated dataset (default 0.001 for synth-papers, the dataset's
    own otherwise); given for a real, registered or by-path dataset it is refused in one line."""
    from cherry.data.sources import dataset_kind
    from cherry.data.registry import OGB_SPECS

    generated = dataset_kind(args.dataset) == "builtin" and args.dataset not in OGB_SPECS
    if args.scale is not None and not generated:
        raise ValueError(f"--scale: applies to generated datasets only, not to {args.dataset!r}; leave it out")
    if args.scale is None and args.dataset == "synth-papers":
        return _PAPERS_SCALE
    return args.scale


@keeps_threads
def run(args) -> int:
    from cherry.data import load_dataset, prepare_dataset
    from cherry.io import write_json_atomic

    torch.set_num_threads(args.threads)
    args.scale = _scale(args)
    prepare_dataset(args.dataset, args.root, scale=args.scale)
    dataset = load_dataset(args.dataset, args.root, scale=args.scale)
    k1, feature_bytes = reference_bytes(dataset, args)
    caps = capacities(k1, feature_bytes, dataset.features.shape[0])
    print(f"cherry bench cache: {args.dataset} (scale {args.scale}), {dataset.features.shape[0]} rows x "
          f"{dataset.features.shape[1]} features = {_mib(feature_bytes)} MiB, batch {args.batch_size}, fanouts "
          f"{','.join(map(str, args.fanouts))}, hidden {args.hidden}, {args.steps} steps of epoch 0; K=1 estimate "
          f"{_mib(k1)} MiB; emulated device (CPU, shared by other jobs)", flush=True)
    print(HEADER, flush=True)
    rows = []
    for name, cap in caps.items():
        for mode in MODES:
            row = train_once(dataset, _spec(args, cap, mode))
            row.update(capacity=f"{name} {_mib(cap)}MiB", mode=mode, capacity_bytes=cap)
            rows.append(row)
            print(format_row(row), flush=True)
    swept = []
    if args.figure:
        swept = sweep(dataset, args, caps["mid"])
        chosen = next((r["cache_share"] for r in rows if r["mode"] == "degree" and r["capacity_bytes"] == caps["mid"]),
                      None)
        plot(swept, args.figure, f"{args.dataset} scale {args.scale}, batch {args.batch_size}, fanouts "
                                 f"{','.join(map(str, args.fanouts))}, capacity {_mib(caps['mid'])} MiB (emulated)",
             chosen)
        print(f"figure: {args.figure}")
    if args.json:
        write_json_atomic(args.json, {"args": {k: v for k, v in vars(args).items() if not k.startswith("_") and k != "func"},
                                      "k1_bytes": k1, "feature_bytes": feature_bytes, "capacities": caps,
                                      "rows": rows, "sweep": swept})
    return 0
