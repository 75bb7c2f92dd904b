"""Data-parallel micro-batching: N ranks train one logical mini-batch with its exact gradient.

Per step, on every rank of an initialized ``torch.distributed`` group (`cherry.launch`):

- the batch's seeds (the same on every rank, by the loader's one rule) are sorted by the locality
  rank (`cherry.planning.seed_rank`) and cut into N contiguous ranges; rank ``r`` takes range ``r``
  (`split_batch_seeds`), so each rank's seeds share neighbours as a micro-batch's do;
- every rank samples with the run's one sampling generator (`cherry.sampling.sampling_generator`,
  derived from the run seed only) and draws the same per-layer random seeds; the sampler's draws are
  a counter-based hash of (layer seed, node) (`cherry.ops.reference_sampling`), so a seed node gets the
  same neighbours whichever rank samples it: rank r's blocks are the single-process batch's blocks
  restricted to rank r's seeds. Dropout, the only other randomness, draws from a stream derived from
  the run seed and the rank;
- each rank plans its own K under its own budget and accumulates its micro-batches with the
  executor (`MicrobatchExecutor.accumulate`: ``torch.autograd.grad`` into accumulators, with its own
  out-of-memory re-planning), inside DDP's ``no_sync`` so DDP's reducer never acts;
- then ONE all-reduce (SUM) of the flattened accumulators, each scaled by ``n_r / N`` first: the
  executor's loss is ``sum CE / n_r``, so the sum over ranks is ``sum CE / N``, the whole batch's
  gradient; a second small all-reduce carries the loss, correct count and per-rank K and peaks;
- one optimizer step on the same gradient from the same parameters: parameters stay identical on
  every rank (DDP's constructor broadcasts rank 0's to start).

Why the executor's accumulators and not DDP's backward hooks: the number of micro-batches a rank
runs is only known at its end (out-of-memory recovery adds micro-batches), and a collective inside a
micro-batch that may still fail would leave the ranks out of step. With one collective after the
last micro-batch, one rank re-planning makes the others wait at the all-reduce, never deadlock. A rank
whose out-of-memory cannot be recovered still joins that all-reduce with a failure flag, so every rank
raises `MicrobatchOutOfMemoryError` together.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from cherry.execution.executor import MicrobatchOutOfMemoryError, PlannedBatch, StepStats
from cherry.execution.trainer import Trainer
from cherry.planning import seed_rank
from cherry.sampling.loader import derive_seed


def split_batch_seeds(seeds: torch.Tensor, rank_of_node: Optional[torch.Tensor], rank: int,
                      world_size: int) -> torch.Tensor:
    """Rank ``rank``'s share of the batch ``seeds``: range ``rank`` of ``world_size`` contiguous ranges
    (sizes differ by at most one, larger first) of the seeds sorted by ``rank_of_node`` (a locality
    rank indexed by node id; None keeps the batch's order). The shares partition the seeds."""
    if not isinstance(seeds, torch.Tensor) or seeds.dim() != 1 or seeds.dtype != torch.int64:
        raise TypeError(f"seeds must be a 1-D int64 tensor, got {type(seeds).__name__}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"rank must be an int in [0, {world_size}), got {rank!r}")
    ordered = seeds
    if rank_of_node is not None:
        ordered = seeds[torch.argsort(rank_of_node[seeds], stable=True)]
    return torch.tensor_split(ordered, world_size)[rank]


@dataclass(frozen=True)
class RankShare:
    """One rank's part of a logical batch: its planned blocks (None: no seed fell to this rank) and
    the seed count of the whole batch, the loss's denominator."""

    planned: Optional[PlannedBatch]
    num_batch_seeds: int


@dataclass(frozen=True)
class RankStepStats:
    """Per rank (index = rank) of the last step."""

    num_seeds: tuple[int, ...]
    num_microbatches: tuple[int, ...]
    num_oom_recoveries: tuple[int, ...]
    estimated_peak_bytes: tuple[int, ...]
    measured_peak_bytes: tuple[Optional[int], ...]


_FIELDS = 5  # per-rank slots of the stats vector: seeds, K, recoveries, estimated peak, measured peak


class DistributedTrainer(Trainer):
    """A `Trainer` that is one rank of a data-parallel job (see module docstring).

    Needs an initialized process group of ``world_size`` ranks, each building this with the same
    ``spec`` and dataset. `Trainer.fit`, `run_epoch` and `train_epoch` work unchanged; their step
    stats are the whole logical batch's (loss, correct, seeds; K, peaks: the largest over ranks), and
    `last_rank_stats` / `rank_peak_bytes` keep the per-rank values. Evaluation runs on rank 0 and its
    result is broadcast (the parameters are the same everywhere).
    """

    def __init__(self, dataset, spec, memory=None, probe=None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("DistributedTrainer needs an initialized torch.distributed process group "
                             "(cherry.launch.process_group, torchrun or srun)")
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        if spec.batch_size < self.world_size:
            raise ValueError(f"batch_size {spec.batch_size} is below the {self.world_size} ranks: every rank "
                             "needs a seed")
        if self.rank == 0:  # the locality rank is cached per dataset: compute once, then read
            seed_rank(dataset, spec.ordering, spec.seed)
        dist.barrier()
        super().__init__(dataset, spec, memory=memory, probe=probe)
        self.split_rank = seed_rank(dataset, spec.ordering, spec.seed)
        import inspect

        from torch.nn.parallel import DistributedDataParallel

        # No buffer sync per forward: that collective would pair up forwards across ranks, whose
        # micro-batch counts differ (newer torch names the switch forward_sync_buffers).
        names = inspect.signature(DistributedDataParallel).parameters
        no_sync_buffers = ({"forward_sync_buffers": False} if "forward_sync_buffers" in names
                           else {"broadcast_buffers": False})
        self.ddp = DistributedDataParallel(self.model, **no_sync_buffers)
        self.executor.model = self.ddp
        # torch's global RNG per rank (dropout masks come from the executor's counter-based seed, the
        # same on every rank, so they equal one process's)
        torch.manual_seed(derive_seed(spec.seed, "rank", self.rank))
        self.last_rank_stats: Optional[RankStepStats] = None
        self.rank_peak_bytes: list[Optional[int]] = [None] * self.world_size

    def prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> RankShare:
        """Sample and plan this rank's share of batch ``seeds`` (run ahead by the loader)."""
        local = split_batch_seeds(seeds, self.split_rank, self.rank, self.world_size)
        if local.numel() == 0:
            self.sampler.sample(seeds[:1], generator)  # draw as the other ranks do: streams stay in step
            return RankShare(None, int(seeds.numel()))
        return RankShare(super().prepare(local, generator), int(seeds.numel()))

    def step(self, share: RankShare) -> StepStats:
        """One optimizer step of the whole logical batch: local micro-batches, one all-reduce, step."""
        if not isinstance(share, RankShare):
            raise TypeError(f"share must be a RankShare (from DistributedTrainer.prepare), got {type(share).__name__}")
        self.model.train()
        grads = self.executor.gradients()  # the accumulators themselves: reduced in place below
        stats, failure = None, None
        if share.planned is not None:
            try:
                with self.ddp.no_sync():
                    stats = self.executor.accumulate(share.planned, self.dataset.features, self.dataset.labels)
            except torch.OutOfMemoryError as exc:
                failure = " ".join(str(exc).split()) or "out of memory"
        n_local = share.planned.blocks.num_seeds if share.planned is not None else 0
        world = self.world_size
        with self.probe.phase("optimizer"):  # the all-reduce is part of applying the step
            if stats is None:
                flat = torch.zeros(sum(g.numel() for g in grads), dtype=grads[0].dtype, device=grads[0].device)
            else:
                flat = torch.cat([g.reshape(-1) for g in grads]).mul_(n_local / share.num_batch_seeds)
            vec = torch.zeros(3 + _FIELDS * world, dtype=torch.float64, device=flat.device)
            if stats is not None:
                vec[0] = stats.loss * n_local / share.num_batch_seeds
                vec[1] = stats.num_correct
                slots = (n_local, stats.num_microbatches, stats.num_oom_recoveries, stats.estimated_peak_bytes,
                         -1 if stats.measured_peak_bytes is None else stats.measured_peak_bytes)
                for i, value in enumerate(slots):
                    vec[3 + i * world + self.rank] = float(value)
            vec[2] = 1.0 if failure is not None else 0.0
            dist.all_reduce(flat)
            dist.all_reduce(vec)
            values = vec.tolist()
            if values[2] > 0:
                messages = [None] * world
                dist.all_gather_object(messages, failure)
                raise MicrobatchOutOfMemoryError("; ".join(f"rank {r}: {m}" for r, m in enumerate(messages)
                                                           if m is not None))
            offset = 0
            for g in grads:
                g.copy_(flat[offset:offset + g.numel()].view_as(g))
                offset += g.numel()
            for p, g in zip(self.executor.params, grads):
                p.grad = g
            self.optimizer.step()
            for p in self.executor.params:
                p.grad = None
        per_rank = [[int(values[3 + i * world + r]) for r in range(world)] for i in range(_FIELDS)]
        measured = tuple(None if v < 0 else v for v in per_rank[4])
        self.last_rank_stats = RankStepStats(*map(tuple, per_rank[:4]), measured_peak_bytes=measured)
        self.rank_peak_bytes = [m if old is None else (old if m is None else max(old, m))
                                for old, m in zip(self.rank_peak_bytes, measured)]
        known = [m for m in measured if m is not None]
        return StepStats(
            loss=values[0], num_correct=int(round(values[1])), num_seeds=share.num_batch_seeds,
            num_microbatches=max(per_rank[1]), num_oom_recoveries=sum(per_rank[2]),
            staged_features=bool(stats.staged_features) if stats is not None else False,
            estimated_peak_bytes=max(per_rank[3]), measured_peak_bytes=max(known) if known else None,
            redundancy=stats.redundancy if stats is not None else (),
            recompute=bool(stats.recompute) if stats is not None else False,  # this rank's
            feature_rows_read=stats.feature_rows_read if stats is not None else 0,  # this rank's traffic
            feature_rows_missed=stats.feature_rows_missed if stats is not None else 0,
            feature_bytes_moved=stats.feature_bytes_moved if stats is not None else 0,
        )

    def evaluate(self) -> dict[str, float]:
        """Rank 0 evaluates; every rank returns its result."""
        result = [super().evaluate() if self.rank == 0 else None]
        dist.broadcast_object_list(result, src=0)
        return result[0]


__all__ = ["DistributedTrainer", "RankShare", "RankStepStats", "split_batch_seeds"]
