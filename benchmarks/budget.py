"""`cherry bench budget`: does automatic K (with recomputation below one seed) keep its promise?

A stress test of Cherry's memory control, on the CPU's emulated device (`DeviceMemory` with a
capacity raises the out-of-memory a GPU would). Configurations rotate over the degree laws of `cherry
bench planner` and the generated datasets, the models (SAGE mean/pool/lstm, GCN, GAT), 2 and 3 layers,
and sampled and all-neighbour fanouts, plus two deep all-neighbour models (4 layers, GAT and SAGE, on
the geometric graph: the memory wall where K alone stops), and one configuration per dataset of
``--datasets`` at its own size (synth-arxiv and synth-products by default); each runs at capacities from below "one seed barely fits"
(recomputation's and streaming's range, where they save more than 10% of what K alone needs) up to "K = 1 fits",
measured over the batches the run trains (see `reference_capacities`). Each capacity trains ``--steps``
steps of fresh batches with the `Trainer` of ``cherry train`` (automatic K, budget = capacity less the
run spec's reserve). Per configuration it reports:
- ``abort``: steps that ran out of memory and could not be recovered; target 0; ``refused``: steps
  refused before any compute (the budget is below every plan, recomputation included);
- ``peak/budget``, ``peak/cap``: the largest measured peak over the budget and over the capacity
  (target <= 1.0);
- ``oom``: out-of-memory re-plans; ``rc``: steps run with recomputation;
- ``K/Kmin``: the median, over every ``--search-every``-th step, of the chosen K over the smallest K
  that fits the same batch under the same capacity (found by bisection over fixed K, with the same
  recomputation setting), "fits" meaning a measured peak within the planner's own limit (the budget
  less the run spec's safety margin; target median <= 1.25); ``K/Kbud``: the same against the
  smallest K whose peak is within the budget itself (what the safety margin costs comes on top);
- ``dKmax``: the largest ratio of consecutive steps' K (target <= 2: within one doubling, unless the
  batch forces more); ``dK>2``: steps whose K more than doubled the last step's although the batch's
  own smallest fitting K (searched after the run, as for ``K/Kmin``) did not (target 0: a jump above
  one doubling is made only for a batch, a hub's, that no K up to twice the last fits);
- ``dK/100``: K changes per 100 steps;
- ``err50``, ``err95``: the estimator's per-micro-batch |estimated - measured| / measured, median and
  95th percentile.
Figures are deterministic (seeded batches, an emulated device): no repeats are needed. A step's peak
is the largest of its micro-batches' peaks (the executor opens a peak window per micro-batch).
Configurations run side by side in ``--jobs`` spawned processes; each prints when its turn comes.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
import statistics
import time

import torch

from benchmarks.threads import keeps_threads

MODELS = (("sage", "mean"), ("sage", "pool"), ("sage", "lstm"), ("gcn", None), ("gat", None))
DEFAULT_GRAPHS = "geometric,barabasi-albert,chung-lu,synth-tiny"
# the generated datasets at their real size (`--datasets`), each with one model of the matrix that
# stresses its degree law: synth-arxiv's citation-like graph, 3 sampled layers of GCN; synth-products'
# hubs, GAT with an all-neighbour top layer; a dataset of the user's (a name or an OGB directory) gets
# `DATASET_DEFAULT_MODEL`
DEFAULT_DATASETS = "synth-arxiv,synth-products"
DATASET_MODELS = {"synth-arxiv": ("gcn", None, 3, (4, 6, 8)), "synth-products": ("gat", None, 2, (5, -1))}
DATASET_DEFAULT_MODEL = ("sage", "mean", 2, (5, 10))
CAPACITY_POINTS = ("below-seed", "seed", "mid", "whole")
DEEP_GRAPH = "geometric"
# "below-seed" runs only where recomputation's (or streaming's) smallest measured peak is below this
# share of K alone's
RECOMPUTE_SAVING = 0.9
SPARE = 1.05  # "one seed fits" and "K = 1 fits": their peak is within the planner's limit by this factor
# the capacity points measure the run's batches priced highest, this many of each kind (3 missed a GAT
# hub batch on synth-tiny, ranked 7th by the analytic price, whose one-seed peak was 4.8x theirs)
MEASURED_BATCHES = 10
# models the analytic memory model does not know (`benchmarks.user_models`: a registered layer, a DGL GAT
# and a PyG GAT), priced by probes, each with input dropout on wide features; their rows are left out where
# their library does not import. DGL's SAGE-pool is not among them: its gradient depends on the split on
# some batches (its max-aggregation's backward, with or without dropout), which the run's partition check stops
BENCH_USER_MODELS = ("gin-layer", "dgl-gat", "pyg-gat")
USER_FEATURES = 256
USER_INPUT_DROPOUT = 0.5
USER_GRAPH = "chung-lu"  # a heavy-tailed degree law (hubs), when --graphs names it


@dataclasses.dataclass(frozen=True)
class Config:
    graph: str
    model: str
    aggr: str | None
    num_layers: int
    fanouts: tuple[int, ...]
    features: int = 32  # width of a degree law's random features
    input_dropout: float = 0.0

    @property
    def label(self) -> str:
        model = f"{self.model}-{self.aggr}" if self.aggr else self.model
        wide = f"/x{self.features}" if self.features != 32 else ""
        return f"{self.graph}/{model}/L{self.num_layers}/{','.join(map(str, self.fanouts))}{wide}"

    @property
    def user_model(self) -> bool:
        """Whether the model is one of `benchmarks.user_models` (priced by probes, not analytically)."""
        from benchmarks.user_models import USER_MODELS

        return self.model in USER_MODELS


# The default run's deterministic sample of `configurations` (all 13 with --all-configs): every model,
# 2, 3 and 4 layers, sampled and all-neighbour fanouts, each degree law and synth-tiny; 100 steps of
# each at every capacity point do not fit the ~10 minutes on 2 cores that the whole matrix would need
# several times over
DEFAULT_SAMPLE = (0, 3, 4, 7, 9, 10, 12)


def configurations(graphs: list[str], quick: bool) -> list[Config]:
    """Every model at 2 and 3 layers; graphs and fanouts (sampled, or all-neighbour at the top layer)
    rotate over them so that each appears with several models."""
    out = []
    for i, (model, aggr) in enumerate(MODELS):
        for layers in (2, 3):
            j = 2 * i + layers
            sampled = (4, 6, 8)[:layers] if layers == 3 else (5, 10)
            fanouts = sampled if j % 2 == 0 else (*sampled[:-1], -1)
            out.append(Config(graphs[j % len(graphs)], model, aggr, layers, fanouts))
    # where K alone stops: a deep all-neighbour model on a graph its hops saturate (every micro-batch
    # holds most of the graph at its lower layers), so below one seed only recomputation helps
    # (and the memory wall's K-alone case in small: on synth-tiny one seed's 4 hops reach most of the
    # graph, so one seed per micro-batch is no smaller than K = 1, and recomputation at K = 1 saves ~20%)
    deep = [Config(DEEP_GRAPH, "gat", None, 4, (-1,) * 4), Config(DEEP_GRAPH, "sage", "mean", 4, (-1,) * 4),
            Config("synth-tiny", "gat", None, 4, (-1,) * 4)]
    return [out[0], deep[0]] if quick else out + deep


def user_configurations(graphs: list[str], names=None) -> list[Config]:
    """One configuration per model of `benchmarks.user_models` (those of ``names``; None: those of
    `BENCH_USER_MODELS`) whose library imports here: 2 layers, sampled and all-neighbour fanouts in
    turn, `USER_FEATURES`-wide features and input dropout."""
    from benchmarks.user_models import USER_MODELS, available
    from cherry.data.degree_laws import DEGREE_LAWS

    if names is not None:
        bad = [n for n in names if n not in USER_MODELS]
        if bad:
            raise ValueError(f"--user-models must name models of {USER_MODELS}, got {','.join(bad)!r}")
    laws = [g for g in graphs if g in DEGREE_LAWS]
    graph = USER_GRAPH if USER_GRAPH in laws or not laws else laws[0]
    return [Config(graph, name, None, 2, (5, 10) if i % 2 == 0 else (5, -1), USER_FEATURES, USER_INPUT_DROPOUT)
            for i, name in enumerate(USER_MODELS)
            if (name in names if names is not None else name in BENCH_USER_MODELS) and available(name)[0]]


def _dataset(name: str, num_nodes: int, root, seed: int, features: int = 32):
    """A `Dataset` of a degree law (random features of width ``features``, random labels) or a
    registered dataset."""
    from benchmarks.generated_graphs import degree_law_dataset
    from cherry.data import load_dataset
    from cherry.data.degree_laws import DEGREE_LAWS

    if name not in DEGREE_LAWS:
        return load_dataset(name, root)
    return degree_law_dataset(name, num_nodes, seed, features)


def _spec(config: Config, args, capacity_bytes):
    from cherry.spec import make_spec

    model = config.model
    if config.user_model:  # a registered layer runs as its registered name; a DGL/PyG model is passed in
        from benchmarks.user_models import register_gin

        model = register_gin() if model == "gin-layer" else "sage"
    return make_spec(dataset="synth-tiny", model=model, aggr=config.aggr, num_layers=config.num_layers,
                     # a DGL/PyG model drops its own input rows: the spec's input dropout is the registered layer's
                     input_dropout=config.input_dropout if model != "sage" or not config.user_model else 0.0,
                     fanouts=config.fanouts, hidden=args.hidden, heads=2, batch_size=args.batch_size,
                     device_memory_bytes=capacity_bytes, evaluate=False, seed=args.seed,
                     # no feature cache: the capacity points are measured without a budget, where none is
                     # built, and the cache has its own benchmark (`cherry bench cache`)
                     options={"ordering": "none", "feature_cache": "none"})


def _trainer(dataset, config, args, capacity_bytes, memory):
    from cherry.execution import Trainer

    model = None
    if config.user_model and config.model != "gin-layer":
        from benchmarks.user_models import seeded_user_model

        model = seeded_user_model(config.model, args.seed, dataset.feature_dim, args.hidden, dataset.num_classes,
                                  config.num_layers, config.input_dropout)
    return Trainer(dataset, _spec(config, args, capacity_bytes), memory=memory, model=model)


def _batches(dataset, args, count: int):
    gen = torch.Generator().manual_seed(args.seed + 1)
    pool = dataset.train_idx
    return [pool[torch.randperm(pool.numel(), generator=gen)[: args.batch_size]] for _ in range(count)]


def _peak_of(trainer, memory, blocks, pool=None, optimizer_step: bool = False) -> int:
    """The measured peak of one step on ``blocks`` (its gradient only, or with ``optimizer_step`` the
    whole step as `run_capacity` measures it), planned on ``pool``'s thread as `run_capacity` plans
    (the tracker of the training thread does not see the planner's host work there; planned here, its
    slicing of one seed per micro-batch would count)."""
    if pool is not None:
        # planned from a copy made there: the tracker counts a storage made on another thread from the
        # first time the measured thread uses it until it dies, and the caller keeps ``blocks`` (every
        # batch of the run, for the capacity points) alive, so each measured batch's index tensors
        # stayed counted into every later peak (~0.5 MB per batch on synth-tiny's deep GAT)
        blocks = pool.submit(lambda: trainer.executor.plan_batch(copy.deepcopy(blocks), trainer.data.features)).result()
    memory.reset_peak()
    run = trainer.executor.step if optimizer_step else trainer.executor.accumulate
    stats = run(blocks, trainer.data.features, trainer.data.labels)
    # the executor starts a peak window per micro-batch: what is read here is the last one's (and the
    # optimizer step's); the step's own measured peak is the largest window
    return max(int(memory.peak_bytes()), stats.measured_peak_bytes or 0)


def reference_capacities(dataset, config, args) -> dict[str, int]:
    """Capacities of `CAPACITY_POINTS` over every batch the run will train (the same seeds and the same
    sampling generator as `run_capacity`), measured with no capacity after a first step (the
    optimizer's state is live, as on every step of the run after its first), whole steps as
    `run_capacity` measures them: "seed" is the largest peak at one seed per micro-batch over the
    `MEASURED_BATCHES` batches priced highest that way (largest seed plus every micro-batch's resident
    index buffers), so that one seed barely fits on every batch of the run; "whole" is the largest
    peak at K = 1 over the batches priced highest at K = 1; "below-seed" lies halfway between what K
    alone needs (the least peak over K = 1, 2, 4, ... per batch, the largest over the batches measured)
    and the smallest measured peak with recomputation (and, where the input layer streams, streaming),
    where that saves more than 10%."""
    from cherry.memory import DeviceMemory
    from cherry.planning import BatchShape
    from cherry.sampling import slice_blocks
    from cherry.spec import BUDGET_RESERVE_FRACTION

    from cherry.planning.plan import resident_index_bytes

    def at_k(blocks, k: int, recompute: str = "off", stream: str = "off") -> int:
        with trainer.executor.overridden(num_microbatches=k, recompute=recompute, stream_inputs=stream):
            return _peak_of(trainer, memory, blocks, pool, optimizer_step=True)

    with DeviceMemory("cpu", None) as memory, ThreadPoolExecutor(max_workers=1) as pool:
        trainer = _trainer(dataset, config, args, None, memory)
        gen = torch.Generator().manual_seed(args.seed + 2)  # as run_capacity samples, with its sampler
        # sampled on the worker thread, as run_capacity's loader samples: sampled here, every batch of
        # the run would stay live in the tracker's count and lift each peak below (by ~2 MB at 100 steps)
        batches = pool.submit(lambda: [trainer.sampler.sample(seeds, gen)
                                       for seeds in _batches(dataset, args, args.steps)]).result()
        mm = trainer.memory_model
        # rank the batches by their analytic price at K = 1 and at one seed per micro-batch (the largest
        # seed plus every micro-batch's resident index buffers), then measure the top few of each
        # (on the worker thread too: slices made here would stay in the tracker's count while alive)
        def prices(blocks):
            singles = [slice_blocks(blocks, torch.tensor([i])) for i in range(blocks.num_seeds)]
            return (mm.activation_bytes(BatchShape.of(blocks)),
                    max(mm.activation_bytes(BatchShape.of(p)) for p in singles) + resident_index_bytes(singles))

        whole_price, seed_price = zip(*pool.submit(lambda: [prices(b) for b in batches]).result())
        top = lambda price: sorted(range(len(batches)), key=lambda i: -price[i])[:MEASURED_BATCHES]  # noqa: E731
        # a first step allocates the optimizer's state, which every step of the run after the first holds
        # (measured without it, "one seed barely fits" was below one seed from the run's second step on)
        at_k(batches[0], 1)
        whole = max(at_k(batches[i], 1) for i in top(whole_price))
        seed_peak, seed_batch = max((at_k(batches[i], batches[i].num_seeds), i) for i in top(seed_price))
        # recomputation's one-seed peak, measured on that batch (its saving on the whole step, floor and
        # resident buffers included, not on the activations alone)
        # and at K = 1 over the batches priced highest at K = 1: where one seed's hops reach most of the
        # graph (deep all-neighbour models), one seed per micro-batch holds every micro-batch's index
        # buffers and no fewer activations than K = 1, so recomputation's smallest peak is there; and
        # one seed streamed and recomputed (a wide input layer's rows are most of one seed's peak)
        rc_peak = min(at_k(batches[seed_batch], batches[seed_batch].num_seeds, "on"),
                      max(at_k(batches[i], 1, "on") for i in top(whole_price)),
                      _streamed_seed_peak(trainer, batches[seed_batch], seed_peak, at_k))
        # K alone's smallest peak: per batch the least over K = 1, 2, 4, ... (on a hub graph the peak
        # need not fall with K: K = 1 prefetches nothing, one seed per micro-batch holds every
        # micro-batch's index buffers), the largest of those over the batches priced highest; measured
        # only where recomputation could save enough to matter
        alone = min(seed_peak, whole)
        if rc_peak < RECOMPUTE_SAVING * alone:
            powers = lambda n: sorted({min(2 ** j, n) for j in range(n.bit_length() + 1)})  # noqa: E731
            alone = max(min(at_k(batches[i], k) for k in powers(batches[i].num_seeds))
                        for i in sorted(set(top(whole_price)) | set(top(seed_price))))
        safety = trainer.executor.options.safety
        trainer.close()
    # "fits": within the planner's own limit, the budget (capacity less its reserve) less the safety
    # margin, with `SPARE` to spare (a point exactly at the limit tests the margin, which below-seed does)
    keep = (1 - BUDGET_RESERVE_FRACTION) * (1 - safety) / SPARE
    seed_cap, whole_cap, rc_cap = seed_peak / keep, whole / keep, rc_peak / keep
    # below one seed: below what K alone needs on some batch of the run, halfway to what recomputation
    # needs, where it saves enough to matter
    below = int((alone / keep + rc_cap) / 2) if rc_peak < RECOMPUTE_SAVING * alone else None
    return {"below-seed": below, "seed": int(seed_cap),
            "mid": int(math.sqrt(seed_cap * max(whole_cap, seed_cap))), "whole": int(max(whole_cap, seed_cap))}


def _streamed_seed_peak(trainer, blocks, seed_peak: int, at_k) -> float:
    """The peak of one seed per micro-batch of ``blocks`` with the input layer streamed and recomputed,
    in the chunks a budget of ``seed_peak`` would have (inf where the model cannot stream)."""
    from cherry.execution.stream import can_stream, chunk_rows, stream_width

    if not can_stream(trainer.model):
        return math.inf
    ex = trainer.executor
    saved = ex.stream_chunk_rows
    ex.stream_chunk_rows = chunk_rows(stream_width(trainer.model), int(seed_peak))
    try:
        return at_k(blocks, blocks.num_seeds, "on", "on")
    finally:
        ex.stream_chunk_rows = saved


def _smallest_k(trainer, blocks, recompute: bool, upper: int, memory, pool=None) -> tuple[int, int]:
    """``(smallest K within the limit, smallest K within the budget)``: the smallest fixed K in
    [1, upper] whose measured peak fits (bisection; ``upper`` is taken to fit), with the same
    recomputation setting, on a snapshot of the memory model (the run's is not touched), planned on
    ``pool``'s thread as the run's steps are. A K fits when it runs without an out-of-memory under the
    capacity and its peak is within, first, the planner's own limit (the budget less the safety margin
    the run spec sets: what a planner with a perfect estimator would choose), second, the budget itself
    (the planner promises the budget; the reserve above it is the device's, not the planner's)."""
    from cherry.planning import BudgetTooSmallError

    ex = trainer.executor
    saved_options, saved_model = ex.options, ex.memory_model
    budget = saved_options.budget_bytes
    peaks: dict[int, float] = {}

    def peak(k: int) -> float:
        if k in peaks:
            return peaks[k]
        try:
            with ex.overridden(isolated=True, num_microbatches=k, recover_oom=False,
                               recompute="on" if recompute else "off"):
                peaks[k] = float(_peak_of(trainer, memory, blocks, pool))
        except (torch.OutOfMemoryError, BudgetTooSmallError):
            peaks[k] = math.inf
        # collected after the handler: while it runs, the traceback holds the failed step's frames, and
        # their tensors (2 MB on a hub batch) stayed live into the run's next step, which calibrated on them
        ex.free()
        return peaks[k]

    def smallest(threshold: float) -> int:
        low, high = 1, upper  # invariant: high fits (or is the upper end)
        while low < high:
            mid = (low + high) // 2
            if peak(mid) <= threshold:
                high = mid
            else:
                low = mid + 1
        return high

    return smallest(budget * (1 - saved_options.safety)), smallest(budget)


def run_capacity(dataset, config, args, capacity_bytes: int) -> dict:
    """Train ``args.steps`` fresh batches at ``capacity_bytes``; the row of figures (module docstring)."""
    from cherry.memory import DeviceMemory
    from cherry.planning import BudgetTooSmallError

    started = time.perf_counter()
    aborted, refused, peaks, ks, oom, rc, ratios, budget_ratios, reasons = 0, 0, [], [], 0, 0, [], [], []
    searches = []  # (blocks, K, recompute) of every --search-every-th step
    jumps = []  # (blocks, K, recompute, last K) of every step whose K more than doubled the last step's
    gen = torch.Generator().manual_seed(args.seed + 2)
    # drawn before the device is entered: drawn inside, the run's seed lists (512 B each at batch 64)
    # stayed counted as allocated for the whole run, 50 KiB of a 144 KiB capacity
    seed_batches = _batches(dataset, args, args.steps)
    with DeviceMemory("cpu", capacity_bytes) as memory:
        trainer = _trainer(dataset, config, args, capacity_bytes, memory)
        budget = trainer.budget_bytes
        # batches are sampled and planned on another thread, as `cherry train`'s loader does (host
        # construction: the tracker of the training thread does not see them)
        with ThreadPoolExecutor(max_workers=1) as pool:
            for step, seeds in enumerate(seed_batches):
                stats = None
                try:
                    planned = pool.submit(trainer.prepare, seeds, gen).result()
                    memory.reset_peak()
                    stats = trainer.step(planned)
                except BudgetTooSmallError as exc:  # refused before any compute: the budget is below any plan
                    refused += 1
                    reasons.append(str(exc).strip().splitlines()[0][:400])
                except torch.OutOfMemoryError as exc:
                    aborted += 1
                    reasons.append(str(exc).strip().splitlines()[0][:400] if str(exc).strip() else type(exc).__name__)
                if stats is None:  # freed after the handler, whose traceback holds the failed step's tensors
                    trainer.executor.free()
                    continue
                peaks.append(max(int(memory.peak_bytes()), stats.measured_peak_bytes or 0))
                ks.append(stats.num_microbatches)
                oom += stats.num_oom_recoveries
                rc += int(stats.recompute)
                # kept for after the run as copies made on the worker thread: the tracker counts a
                # storage the training thread has used for as long as it lives, so keeping the run's own
                # blocks would lift every later step's peak by their index tensors
                keep = lambda: pool.submit(copy.deepcopy, planned.blocks).result()  # noqa: E731
                if args.search_every and step % args.search_every == 0:
                    searches.append((keep(), stats.num_microbatches, stats.recompute))
                if len(ks) > 1 and ks[-1] > 2 * ks[-2]:
                    jumps.append((keep(), ks[-1], stats.recompute, ks[-2]))
            errors = sorted(trainer.memory_model.relative_errors())
            # the searches run after the run: their fixed-K probes (out-of-memory ones included) left
            # tensors counted into the run's next steps, which then calibrated on them and overran
            planned = None
            while searches:
                blocks, k, recompute = searches.pop(0)
                at_limit, at_budget = _smallest_k(trainer, blocks, recompute, k, memory, pool)
                del blocks
                ratios.append(k / at_limit)
                budget_ratios.append(k / at_budget)
            unforced = 0
            while jumps:  # forced: no K up to twice the last step's fits this batch within the budget
                blocks, k, recompute, last = jumps.pop(0)
                unforced += int(_smallest_k(trainer, blocks, recompute, k, memory, pool)[1] <= 2 * last)
                del blocks
        trainer.close()
    changes = sum(a != b for a, b in zip(ks, ks[1:]))
    peak = max(peaks, default=0)
    return {
        "config": config.label, "graph": config.graph, "model": config.model, "aggr": config.aggr,
        "num_layers": config.num_layers, "fanouts": list(config.fanouts), "user_model": config.user_model,
        "capacity_bytes": capacity_bytes,
        "budget_bytes": budget, "steps": args.steps, "aborted_steps": aborted,
        "refused_steps": refused,
        "peak_over_budget": peak / budget if budget else None, "peak_over_capacity": peak / capacity_bytes,
        "oom_replans": oom, "recompute_steps": rc, "k_median": statistics.median(ks) if ks else None,
        "k_over_smallest_median": statistics.median(ratios) if ratios else None,
        "k_over_smallest_in_budget_median": statistics.median(budget_ratios) if budget_ratios else None,
        "k_max_step_ratio": max((max(a, b) / min(a, b) for a, b in zip(ks, ks[1:])), default=None),
        "k_unforced_jumps": unforced,
        "k_changes_per_100": 100 * changes / max(len(ks) - 1, 1),
        "estimator_error_median": errors[len(errors) // 2] if errors else None,
        "estimator_error_p95": errors[min(len(errors) - 1, int(0.95 * len(errors)))] if errors else None,
        "wall_s": time.perf_counter() - started, "abort_reasons": sorted(set(reasons))[:3],
    }


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


HEADER = (f"{'configuration':<36} {'capacity':>10} {'abort':>5} {'refus':>5} {'pk/bud':>6} {'pk/cap':>6} {'oom':>4} {'rc':>4} "
          f"{'K':>5} {'K/Kmin':>6} {'K/Kbud':>6} {'dKmax':>5} {'dK>2':>4} {'dK/100':>6} {'err50':>6} {'err95':>6}")


def format_row(r: dict) -> str:
    from cherry.memory import format_size

    return (f"{r['config']:<36} {format_size(r['capacity_bytes']):>10} {r['aborted_steps']:>5} {r['refused_steps']:>5} "
            f"{_fmt(r['peak_over_budget'], '.3f'):>6} {_fmt(r['peak_over_capacity'], '.3f'):>6} {r['oom_replans']:>4} "
            f"{r['recompute_steps']:>4} {_fmt(r['k_median'], '.0f'):>5} {_fmt(r['k_over_smallest_median'], '.2f'):>6} "
            f"{_fmt(r['k_over_smallest_in_budget_median'], '.2f'):>6} {_fmt(r['k_max_step_ratio'], '.1f'):>5} "
            f"{r['k_unforced_jumps']:>4} {r['k_changes_per_100']:>6.1f} {_fmt(r['estimator_error_median'], '.3f'):>6} "
            f"{_fmt(r['estimator_error_p95'], '.3f'):>6}")


def summary(rows: list[dict]) -> dict:
    """The figures the issue's targets read: over every row."""
    ratios = [r["k_over_smallest_median"] for r in rows if r["k_over_smallest_median"] is not None]
    budget = [r["k_over_smallest_in_budget_median"] for r in rows if r["k_over_smallest_in_budget_median"] is not None]
    return {
        "configurations": len(rows), "aborted_steps": sum(r["aborted_steps"] for r in rows),
        "refused_steps": sum(r["refused_steps"] for r in rows),
        "max_peak_over_budget": max((r["peak_over_budget"] or 0 for r in rows), default=None),
        "max_peak_over_capacity": max((r["peak_over_capacity"] for r in rows), default=None),
        "oom_replans": sum(r["oom_replans"] for r in rows),
        "recompute_rows": sum(r["recompute_steps"] > 0 for r in rows),
        "k_over_smallest_median": statistics.median(ratios) if ratios else None,
        "k_over_smallest_in_budget_median": statistics.median(budget) if budget else None,
        "k_max_step_ratio": max((r["k_max_step_ratio"] for r in rows if r["k_max_step_ratio"]), default=None),
        "k_unforced_jumps": sum(r["k_unforced_jumps"] for r in rows),
        "k_changes_per_100_median": statistics.median(r["k_changes_per_100"] for r in rows) if rows else None,
        "estimator_error_median": statistics.median(r["estimator_error_median"] for r in rows
                                                    if r["estimator_error_median"] is not None) if rows else None,
    }


def recompute_cost(dataset, config, args, num_microbatches: int = 4) -> dict:
    """What recomputation costs and saves on ``config``: the same batches at the same fixed K, each
    step run with and without it, alternating (which goes first alternates too) so that drift hits
    both alike. Time: forward+backward of the whole batch (no optimizer step, no tracker: the
    tracker's dispatch cost would dilute the ratio), the ratio of medians with the hierarchical
    bootstrap interval of `cherry.report.stats.median_ratio` (one run). Memory: the measured peak of
    the first batch both ways under the emulated device's tracker."""
    from cherry.memory import DeviceMemory
    from cherry.report.stats import median_ratio

    def executor_for(trainer, recompute: str):
        return trainer.executor.overridden(num_microbatches=num_microbatches, recover_oom=False, recompute=recompute)

    batches = _batches(dataset, args, args.recompute_steps + 1)
    with DeviceMemory("cpu", None) as memory:
        trainer = _trainer(dataset, config, args, None, memory)
        blocks = trainer.sampler.sample(batches[0], torch.Generator().manual_seed(args.seed))
        peaks = {}
        for mode in ("off", "on"):
            with executor_for(trainer, mode):
                peaks[mode] = _peak_of(trainer, memory, blocks)
        trainer.close()
    trainer = _trainer(dataset, config, args, None, None)
    gen = torch.Generator().manual_seed(args.seed + 3)
    times = {"on": [], "off": []}
    for i, seeds in enumerate(batches[1:]):
        blocks = trainer.sampler.sample(seeds, gen)
        for mode in (("on", "off") if i % 2 == 0 else ("off", "on")):
            with executor_for(trainer, mode) as ex:
                start = time.perf_counter()
                ex.accumulate(blocks, trainer.data.features, trainer.data.labels)
                times[mode].append(time.perf_counter() - start)
    trainer.close()
    ratio = median_ratio(times["on"], times["off"])
    return {"config": config.label, "num_microbatches": num_microbatches, "steps": len(times["on"]),
            "time_ratio": ratio.value if ratio else None, "time_ratio_low": ratio.low if ratio else None,
            "time_ratio_high": ratio.high if ratio else None, "peak_off_bytes": peaks["off"],
            "peak_on_bytes": peaks["on"], "peak_ratio": peaks["on"] / max(peaks["off"], 1),
            "step_s_on_median": statistics.median(times["on"]), "step_s_off_median": statistics.median(times["off"])}


def dataset_configurations(names: list[str]) -> list[Config]:
    """One configuration per dataset of ``--datasets`` (`DATASET_MODELS`, else `DATASET_DEFAULT_MODEL`)."""
    return [Config(name, *DATASET_MODELS.get(name, DATASET_DEFAULT_MODEL)) for name in names]


def run_config(config: Config, args, points: list[str]) -> tuple[list[str], list[dict]]:
    """Every capacity point of one configuration: ``(printed lines, rows)``. Runs in a worker process
    when ``--jobs`` > 1 (configurations are independent: each builds its own dataset, trainers and
    emulated devices)."""
    torch.set_num_threads(args.threads)
    dataset = _dataset(config.graph, args.num_nodes, args.root, args.seed, config.features)
    caps = reference_capacities(dataset, config, args)
    lines, rows, done = [], [], {}
    for point in points:
        if caps[point] is None:
            lines.append(f"{config.label:<36} {'-':>9}  below one seed: recomputation and streaming save too "
                         "little here")
            continue
        if caps[point] in done:  # e.g. K = 1 fits where one seed per micro-batch does (index buffers)
            lines.append(f"{config.label:<36} {'-':>9}  {point}: the same capacity as {done[caps[point]]}")
            continue
        done[caps[point]] = point
        row = run_capacity(dataset, config, args, caps[point])
        row["capacity_point"] = point
        rows.append(row)
        lines.append(format_row(row))
    return lines, rows


def _worker_args(args):
    """``args`` without what a worker process cannot receive (the CLI's function)."""
    import argparse

    return argparse.Namespace(**{k: v for k, v in vars(args).items() if not k.startswith("_") and k != "func"})


@keeps_threads
def run(args) -> int:
    from cherry.io import write_json_atomic

    graphs = [g for g in args.graphs.split(",") if g]
    datasets = [d for d in (getattr(args, "datasets", "") or "").split(",") if d]
    if not graphs:
        raise ValueError("--graphs must name at least one degree law or dataset")
    from cherry.data.degree_laws import DEGREE_LAWS
    from cherry.data.sources import dataset_kind

    for name in graphs + datasets:  # a one-line error for an unknown name before any work
        if name not in DEGREE_LAWS:
            dataset_kind(name)
    jobs = getattr(args, "jobs", 1) or 1
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if args.quick:
        args.steps, args.search_every = min(args.steps, 4), min(args.search_every or 2, 2)
        args.recompute_steps = min(args.recompute_steps, 3)
        datasets = []
    torch.set_num_threads(args.threads)
    points = [p for p in args.capacities.split(",") if p]
    bad = [p for p in points if p not in CAPACITY_POINTS]
    if bad or not points:
        raise ValueError(f"--capacities must be comma-separated names of {CAPACITY_POINTS}, got {args.capacities!r}")
    started = time.perf_counter()
    configs = configurations(graphs, args.quick)
    if not args.quick and not getattr(args, "all_configs", False):
        configs = [configs[i] for i in DEFAULT_SAMPLE if i < len(configs)]
    user = getattr(args, "user_models", None)
    user_configs = user_configurations(graphs, None if user is None else [u for u in user.split(",") if u])
    if not args.quick:
        configs += user_configs
    configs += dataset_configurations(datasets)
    if getattr(args, "max_configs", None) is not None:
        configs = configs[: args.max_configs]
    from cherry.data import prepare_dataset

    for name in dict.fromkeys(c.graph for c in configs):  # prepared once, here, before any worker loads it
        if name not in DEGREE_LAWS:
            prepare_dataset(name, root=args.root)
    print(f"cherry bench budget: {len(configs)} configurations, {args.steps} steps per capacity, batch "
          f"{args.batch_size}, hidden {args.hidden}, K/Kmin every {args.search_every} steps, {jobs} "
          f"process{'es' if jobs > 1 else ''}; emulated device (CPU)", flush=True)
    print(HEADER, flush=True)
    rows = []
    if jobs == 1 or len(configs) <= 1:
        results = (run_config(c, args, points) for c in configs)
        pool = None
    else:
        # spawned, not forked: a fork of a process whose OpenMP pool has run can hang in the child
        pool = ProcessPoolExecutor(max_workers=min(jobs, len(configs)), mp_context=multiprocessing.get_context("spawn"))
        results = pool.map(run_config, configs, [_worker_args(args)] * len(configs), [points] * len(configs))
    try:
        for lines, config_rows in results:  # in the configurations' order, each printed when its turn comes
            for line in lines:
                print(line, flush=True)
            rows += config_rows
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    if args.recompute_steps:
        # where recomputation is chosen: the memory wall's K-alone case in small, at K = 1 (on the
        # geometric graph's deep GAT one seed's hops stay small and recomputation saves ~1%)
        config = Config("synth-tiny", "gat", None, 4, (-1,) * 4)
        cost = recompute_cost(_dataset(config.graph, args.num_nodes, args.root, args.seed), config, args,
                              num_microbatches=1)
        print(f"\nrecomputation on {cost['config']}, K={cost['num_microbatches']}, {cost['steps']} batches each way, "
              f"alternating: step time x{_fmt(cost['time_ratio'], '.2f')} [{_fmt(cost['time_ratio_low'], '.2f')}, "
              f"{_fmt(cost['time_ratio_high'], '.2f')}] (95% interval), peak x{cost['peak_ratio']:.2f} "
              f"({cost['peak_on_bytes']} B vs {cost['peak_off_bytes']} B)", flush=True)
    else:
        cost = None
    total = summary(rows)
    total["wall_s"] = time.perf_counter() - started
    print("\nsummary: " + ", ".join(f"{k}={_fmt(v, '.3f') if isinstance(v, float) else v}" for k, v in total.items()))
    if args.json:
        write_json_atomic(args.json, {"args": vars(_worker_args(args)), "rows": rows, "summary": total,
                                      "recompute_cost": cost})
    return 0
