"""The batch loader: an epoch's seed batches, each sampled (and planned) ahead of its step.

One rule makes the batches of every run, whoever trains (the Trainer, the benchmark runner,
`cherry verify`, `cherry bench engine`):

- epoch ``e`` permutes the training seeds with a generator seeded by ``derive_seed(seed, "order", e)``
  and cuts the permutation into batches of ``batch_size`` (the last one may be smaller);
- a run of a fixed number of steps (``epochs = 0``) takes epochs 0, 1, ... in turn, dropping each
  epoch's smaller last batch (unless the training set is smaller than one batch);
- one sampling generator, seeded by ``derive_seed(seed, "sample")``, serves the whole run.

`BatchLoader` iterates such batches. Given a ``prepare(seeds, generator)`` function (sampling, and
for Cherry planning), it runs it for batch ``i + 1`` on one background thread while the caller steps
batch ``i``; the calls are made in batch order on that one thread, so the generator is drawn from in
the same order as without the thread and the same seed gives the same batches. The time a caller
waits for ``next()`` is what planning ahead did not hide (callers time it as the ``sample`` phase).
"""
from __future__ import annotations

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any, Callable, Iterator, Optional

import torch

_SEED_MASK = (1 << 63) - 1


def derive_seed(seed: int, purpose: str, index: int = 0) -> int:
    """A 63-bit seed for ``purpose`` (and an ``index``, e.g. the epoch) derived from a run's seed;
    distinct purposes give independent streams, and any int seed works (no overflow)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    digest = hashlib.sha256(f"cherry/{seed}/{purpose}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & _SEED_MASK


def epoch_seed_batches(train_idx: torch.Tensor, batch_size: int, seed: int, epoch: int,
                       drop_last: bool = False) -> list[torch.Tensor]:
    """Epoch ``epoch``'s batches of ``train_idx`` (see module docstring)."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    gen = torch.Generator().manual_seed(derive_seed(seed, "order", epoch))
    order = train_idx[torch.randperm(train_idx.numel(), generator=gen)]
    batches = list(torch.split(order, batch_size))
    if drop_last and len(batches) > 1 and batches[-1].numel() < batch_size:
        batches.pop()
    return batches


class StepSeedBatches(Sequence):
    """``num_steps`` batches taken from epochs 0, 1, ... in turn, each epoch's smaller last batch
    dropped; made lazily, one epoch at a time, as they are read in order (a run of many steps holds
    one epoch's batches, not all of them)."""

    def __init__(self, train_idx: torch.Tensor, batch_size: int, seed: int, num_steps: int) -> None:
        if train_idx.numel() == 0:
            raise ValueError("the training set is empty: no batch to take")
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 0:
            raise ValueError(f"num_steps must be an int >= 0, got {num_steps!r}")
        self.train_idx, self.batch_size, self.seed, self.num_steps = train_idx, batch_size, seed, num_steps
        self._epoch, self._first, self._batches = -1, 0, []  # the epoch held, its first step index

    def __len__(self) -> int:
        return self.num_steps

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.num_steps))]
        if not 0 <= i < self.num_steps:
            raise IndexError(f"step {i} out of range [0, {self.num_steps})")
        if i < self._first:  # reading backwards: start again from epoch 0
            self._epoch, self._first, self._batches = -1, 0, []
        while i >= self._first + len(self._batches):
            self._first += len(self._batches)
            self._epoch += 1
            self._batches = epoch_seed_batches(self.train_idx, self.batch_size, self.seed, self._epoch,
                                               drop_last=True)
        return self._batches[i - self._first]


def step_seed_batches(train_idx: torch.Tensor, batch_size: int, seed: int, num_steps: int) -> StepSeedBatches:
    """``num_steps`` batches taken from epochs 0, 1, ... in turn (see `StepSeedBatches`)."""
    return StepSeedBatches(train_idx, batch_size, seed, num_steps)


def sampling_generator(seed: int) -> torch.Generator:
    """The run's one sampling generator (see module docstring)."""
    return torch.Generator().manual_seed(derive_seed(seed, "sample"))


@dataclass(frozen=True)
class LoadedBatch:
    """Batch ``index`` of the loader: its seeds, the sampling generator, and what ``prepare`` made of
    it (None without a ``prepare``). A consumer that samples by itself draws from ``generator``."""

    index: int
    seeds: torch.Tensor
    generator: torch.Generator
    prepared: Any = None


class BatchLoader:
    """Iterates ``seed_batches``, preparing batch ``i + 1`` on a background thread during batch ``i``.

    ``prepare`` is called once per batch, in order, on one thread; its exception is raised by the
    ``next()`` that would have returned that batch. `close` (or leaving a ``with`` block) waits for
    the thread; an iterator abandoned early leaves at most one prepared batch unused.
    """

    def __init__(self, seed_batches: Sequence[torch.Tensor], generator: torch.Generator,
                 prepare: Optional[Callable[[torch.Tensor, torch.Generator], Any]] = None) -> None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        if prepare is not None and not callable(prepare):
            raise TypeError(f"prepare must be callable or None, got {type(prepare).__name__}")
        self.seed_batches = seed_batches if isinstance(seed_batches, Sequence) else list(seed_batches)
        self.generator = generator
        self.prepare = prepare
        self._pool: Optional[ThreadPoolExecutor] = None

    def __len__(self) -> int:
        return len(self.seed_batches)

    def _submit(self, i: int) -> Optional[Future]:
        if self.prepare is None or i >= len(self.seed_batches):
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cherry-loader")
        return self._pool.submit(self.prepare, self.seed_batches[i], self.generator)

    def __iter__(self) -> Iterator[LoadedBatch]:
        future = self._submit(0)
        for i, seeds in enumerate(self.seed_batches):
            prepared = future.result() if future is not None else None
            future = self._submit(i + 1)
            yield LoadedBatch(i, seeds, self.generator, prepared)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "BatchLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def spec_seed_batches(spec, train_idx: torch.Tensor, epoch: Optional[int] = None) -> Sequence[torch.Tensor]:
    """The batches a run spec trains: epoch ``epoch`` (capped at ``max_steps_per_epoch``), or for a
    run of steps (``epoch=None``, ``spec.epochs == 0``) its ``warmup + steps`` batches."""
    if epoch is None:
        return step_seed_batches(train_idx, spec.batch_size, spec.seed, spec.warmup + spec.steps)
    batches = epoch_seed_batches(train_idx, spec.batch_size, spec.seed, epoch)
    if spec.max_steps_per_epoch is not None:
        batches = batches[: spec.max_steps_per_epoch]
    return batches
