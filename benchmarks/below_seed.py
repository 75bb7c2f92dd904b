"""Users' GATs under a budget, from roomy to below what one seed per micro-batch needs unstreamed.

On Amazon-Computers (``../shared/graphs/amazon_computers.npz``, 767 features, a random 20%/10% split),
a DGL GAT and a PyG GAT (`benchmarks.user_models`: 2 layers, 4 heads, hidden 64, input dropout 0.5)
through `cherry.interop`, fanouts 10, 10, batches of 512, 4 steps an epoch, 2 epochs, on an emulated
device (the CPU tensor tracker). It measures each model's K = 1 peak and its plain one-seed peak (one
seed per micro-batch, unstreamed, over two steps: the second holds the optimizer's state), then trains
with automatic K at capacities of 1.0, 0.5 and 0.3 of the K = 1 peak and 1.05 and 1.0 of the one-seed
peak (the budget, 0.9 of the capacity, then below that peak). Per capacity: the budget over the one-seed
peak, K per epoch, the steps streamed and recomputed, the largest peak over the budget per epoch and the
out-of-memory re-plans. Deterministic (no repeats needed). A library that does not import is skipped
in one line.
Run: ``PYTHONPATH=. python -m benchmarks.below_seed [--graphs ../shared/graphs] [--models dgl-gat,pyg-gat]``.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

SPLIT = "?split=random:0.2,0.1@0"
SETTINGS = dict(fanouts=(10, 10), batch_size=512, max_steps_per_epoch=4, evaluate=False, seed=0)
HIDDEN, DROPOUT, EPOCHS = 64, 0.5, 2
# roomy to tight: fractions of the K = 1 peak, then of the plain one-seed peak
CAPACITIES = (("k1", 1.0), ("k1", 0.5), ("k1", 0.3), ("seed", 1.05), ("seed", 1.0))


@dataclass(frozen=True)
class Point:
    """One capacity's run: the budget, and per epoch its steps' largest K, peak over the budget,
    re-plans; the steps streamed and recomputed; whether every loss was finite."""

    of: str
    fraction: float
    budget_bytes: int
    max_k: tuple[int, ...]
    peak_over_budget: tuple[float, ...]
    oom_recoveries: tuple[int, ...]
    streamed_steps: int
    recompute_steps: int
    num_steps: int
    losses_finite: bool


def model(name: str, dataset, seed: int = 0):
    from benchmarks.user_models import seeded_user_model

    return seeded_user_model(name, seed, dataset.feature_dim, HIDDEN, dataset.num_classes, 2, DROPOUT)


def run(dataset, name: str, capacity, epochs: int, num_microbatches=None, **changes):
    """Every epoch's steps (`StepStats`) and the budget of ``epochs`` epochs of model ``name`` under an
    emulated ``capacity`` (None: unlimited); ``changes`` replace `SETTINGS` and spec fields."""
    from cherry.execution import Trainer
    from cherry.memory import DeviceMemory
    from cherry.spec import make_spec

    spec = make_spec(dataset=dataset.name, epochs=epochs, num_microbatches=num_microbatches,
                     device_memory_bytes=capacity, **dict(SETTINGS, **changes))
    with DeviceMemory("cpu", capacity) as memory:
        trainer = Trainer(dataset, spec, memory=memory, model=model(name, dataset))
        try:
            return [trainer.train_epoch(epoch) for epoch in range(epochs)], trainer.budget_bytes
        finally:
            trainer.close()


def peak(steps) -> int:
    return max(s.measured_peak_bytes for s in steps)


def reference_peaks(dataset, name: str) -> dict[str, int]:
    """``{"k1": K = 1 peak of the first step, "seed": plain one-seed peak}`` (module docstring)."""
    k1 = peak(run(dataset, name, None, 1, num_microbatches=1)[0][0])
    epochs, _ = run(dataset, name, None, 1, num_microbatches=SETTINGS["batch_size"], max_steps_per_epoch=2,
                    options={"stream_inputs": "off"})
    return {"k1": k1, "seed": peak(epochs[0])}


def sweep(dataset, name: str, peaks: dict[str, int]) -> list[Point]:
    """`Point` of every capacity of `CAPACITIES`, roomy first."""
    points = []
    for of, fraction in CAPACITIES:
        epochs, budget = run(dataset, name, int(fraction * peaks[of]), EPOCHS)
        steps = [s for e in epochs for s in e]
        points.append(Point(of, fraction, budget, tuple(max(s.num_microbatches for s in e) for e in epochs),
                            tuple(peak(e) / budget for e in epochs),
                            tuple(sum(s.num_oom_recoveries for s in e) for e in epochs),
                            sum(s.streamed for s in steps), sum(s.recompute for s in steps), len(steps),
                            all(math.isfinite(s.loss) for s in steps)))
    return points


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--graphs", default=str(Path(__file__).resolve().parents[2] / "shared" / "graphs"))
    parser.add_argument("--models", default="dgl-gat,pyg-gat")
    parser.add_argument("--root", default="/tmp/cherry-below-seed", help="where the split is cached")
    args = parser.parse_args(argv)
    from benchmarks.user_models import available
    from cherry.data import load_dataset

    dataset = load_dataset(str(Path(args.graphs) / "amazon_computers.npz") + SPLIT, args.root)
    for name in args.models.split(","):
        ok, why = available(name)
        if not ok:
            print(f"{name}: skipped: {why}")
            continue
        peaks = reference_peaks(dataset, name)
        print(f"{name}: K = 1 peak {peaks['k1'] / 2**20:.2f} MiB, plain one-seed peak {peaks['seed'] / 2**20:.2f} MiB")
        for p in sweep(dataset, name, peaks):
            print(f"  capacity {p.fraction:.2f} x {p.of:<4}  budget {p.budget_bytes / peaks['seed']:.2f} of one seed  "
                  f"K {'/'.join(map(str, p.max_k))}  streamed {p.streamed_steps}/{p.num_steps}  "
                  f"recomputed {p.recompute_steps}/{p.num_steps}  peak/budget "
                  f"{'/'.join(f'{x:.3f}' for x in p.peak_over_budget)}  re-plans {sum(p.oom_recoveries)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
