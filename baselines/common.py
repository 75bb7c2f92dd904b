"""What the micro-batching baselines share: the configured K and its search, the seeded model, the accumulation loop and
the shared evaluator.

`AccumulatingSystem` runs a logical mini-batch as micro-batches one after another, as Betty and Buffalo
do: for each micro-batch ``k`` the input features are gathered and moved to the device, then
``loss_k = sum CE(model(blocks_k, x_k), y_k) / |B|`` (``|B|`` = seeds of the whole logical batch) and
``loss_k.backward()`` adds its gradient into ``.grad``; one optimizer step follows the last one. With
``|B_k| / |B|`` weights on mean losses this is the same sum, so when the micro-batches partition the
seeds and keep every sampled in-edge the accumulated gradient equals the full batch's (dropout 0).

`AccumulatingSystem.accumulate_gradients` does everything but the optimizer step and leaves the
gradients in the parameters' ``.grad``, so tests can compare systems' gradients on one sampled batch.
Only `cherry.data`, `cherry.sampling`, `cherry.models` and `cherry.bench` are imported here (a test
checks that no baseline imports cherry's planner or executor).

K is either fixed (``num_microbatches`` an int, as the released systems take it from a flag) or "auto"
(None) for the systems that set ``accepts_auto_microbatches``: the step then runs at the smallest K whose
step fits the device's capacity, found by `smallest_fitting_k` (try, and on an out-of-memory try a larger
K: doubling, then bisection), starting from the system's `_initial_k` (its own estimator where the
released system has one, else the K the previous step settled on, else 1). Every attempt starts from
``.grad = None`` and the same generator state, so a failed attempt neither loses nor double-counts a
gradient and the retry sees the same sampled neighbours; the `StepOutcome` reports the K that ran.
Within a run K never shrinks below the previous step's (the search is paid on the first step, as a
user finding K by hand would). A step that runs out of memory at one seed per micro-batch (the auto
search's last K, or a fixed K of at least the batch's seeds) raises `cherry.memory.SingleSeedOutOfMemoryError`:
no K fits that batch, which the memory wall reports as "one seed does not fit".
"""
from __future__ import annotations

import abc
import contextlib
import gc
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar

import torch
import torch.nn.functional as F

from cherry.systems.contract import StepOutcome, System
from cherry.data import Dataset
from cherry.data.metrics import split_accuracy
from cherry.memory import SingleSeedOutOfMemoryError
from cherry.models import build_model
from cherry.models.inference import layerwise_inference
from cherry.sampling import Blocks, LoadedBatch, NeighborSampler
from cherry.spec import RunSpec


def configured_num_microbatches(spec: RunSpec, system: str, accepts_auto: bool) -> Optional[int]:
    """The K a baseline was told to use, or None ("auto", K from the capacity) where it accepts that."""
    if not isinstance(spec, RunSpec):
        raise TypeError(f"spec must be a cherry.spec.RunSpec, got {type(spec).__name__}")
    k = spec.num_microbatches
    if k is None:
        if accepts_auto:
            return None
        raise ValueError(f"{system} needs a fixed K: set num_microbatches (got None)")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"num_microbatches must be an int >= 1, got {k!r}")
    return k


T = TypeVar("T")


@contextlib.contextmanager
def _single_seed_marked(single_seed: bool, k: int) -> Iterator[None]:
    """Re-raise an out-of-memory inside as `SingleSeedOutOfMemoryError` when the step ran at one seed
    per micro-batch (``single_seed``, at K = ``k``): no K fits that batch, which the memory wall reports."""
    try:
        yield
    except SingleSeedOutOfMemoryError:
        raise
    except torch.OutOfMemoryError as exc:
        if not single_seed:
            raise
        raise SingleSeedOutOfMemoryError(f"{str(exc).strip()} (at K = {k}: one seed per micro-batch)") from exc


def smallest_fitting_k(attempt: Callable[[int], T], first_k: int, max_k: int,
                       after_oom: Callable[[], None]) -> tuple[int, T]:
    """The smallest ``k`` in ``[first_k, max_k]`` for which ``attempt(k)`` completes without
    ``torch.OutOfMemoryError``, and that attempt's result, assuming fitting is monotone in ``k``.

    Tries ``first_k``, doubles until an attempt fits, then bisects between the largest failing and the
    smallest fitting ``k``; the returned result is from an attempt at the returned ``k`` (re-run if a
    later, smaller probe failed). ``after_oom()`` runs after each failure, outside the exception
    handler (so the failed attempt's frames are already released). Re-raises the out-of-memory of
    ``max_k`` when even that fails. ``attempt`` must start from a clean state itself.
    """
    if isinstance(first_k, bool) or not isinstance(first_k, int) or first_k < 1:
        raise ValueError(f"first_k must be an int >= 1, got {first_k!r}")
    if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < first_k:
        raise ValueError(f"max_k must be an int >= first_k ({first_k}), got {max_k!r}")
    failed, fits = first_k - 1, None  # largest k seen failing (or below the range); smallest seen fitting
    result: Any = None
    result_k = None
    k = first_k
    while True:
        try:
            result, result_k = attempt(k), k
        except torch.OutOfMemoryError:
            if k >= max_k:
                raise
            result, result_k = None, None
        if result_k == k:
            fits = k
        else:
            after_oom()
            failed = k
        if fits is None:
            k = min(2 * k, max_k)
        elif fits - failed > 1:
            k = (failed + fits) // 2
        elif result_k == fits:
            return fits, result
        else:
            k = fits  # the last probe (below fits) failed: run at fits again


def build_seeded_model(dataset: Dataset, spec: RunSpec, device: torch.device) -> torch.nn.Module:
    """The model of ``spec`` with parameters drawn right after ``torch.manual_seed(spec.seed)``, so
    every system starts from the same weights; moved to ``device``."""
    model_spec = spec.model_spec(dataset)
    torch.manual_seed(spec.seed)
    return build_model(model_spec).to(device)


def check_seeds(seeds: object, num_nodes: int) -> None:
    """Raise unless ``seeds`` is a non-empty 1-D int64 tensor of node ids."""
    if not isinstance(seeds, torch.Tensor):
        raise TypeError(f"seeds must be a torch.Tensor, got {type(seeds).__name__}")
    if seeds.dtype != torch.int64 or seeds.dim() != 1:
        raise ValueError(f"seeds must be a 1-D int64 tensor, got {seeds.dtype} of shape {tuple(seeds.shape)}")
    if seeds.numel() == 0:
        raise ValueError("seeds must hold at least one node id, got an empty tensor")
    if int(seeds.min()) < 0 or int(seeds.max()) >= num_nodes:
        raise ValueError(f"seeds must lie in [0, {num_nodes})")


@dataclass(frozen=True)
class MicrobatchShape:
    """Sizes of one micro-batch that was run, per layer (input layer first)."""

    num_seeds: int
    num_src: tuple[int, ...]
    num_edges: tuple[int, ...]

    @staticmethod
    def of(blocks: Blocks) -> "MicrobatchShape":
        return MicrobatchShape(blocks.num_seeds, tuple(b.num_src for b in blocks.layers),
                               tuple(b.num_edges for b in blocks.layers))


def redundancy_against(parent: Blocks, shapes: Sequence[MicrobatchShape]) -> tuple[float, ...]:
    """Per layer (input layer first): the micro-batches' summed source counts over the batch's own
    (1.0 = no node computed twice; Betty's and Buffalo's redundancy)."""
    return tuple(
        sum(s.num_src[l] for s in shapes) / max(parent.layers[l].num_src, 1) for l in range(parent.num_layers)
    )


class AccumulatingSystem(System):
    """A baseline that runs a logical mini-batch as sequential micro-batches (see module docstring).

    Subclasses set ``name`` and implement `_prepare` (sampling, under its phase) and `_run` (splitting
    into ``k`` micro-batches under their own phases, calling `run_microbatch` or `run_all`); they may
    override `_initial_k`. Their options are declared, with their defaults, in the systems table
    (`cherry.systems`) and arrive validated in ``spec.options``. ``self.num_microbatches`` is the
    fixed K, or None for "auto" (only where ``accepts_auto_microbatches``).
    """

    never_splits: bool = False  # True: K is always 1 and spec.num_microbatches is ignored

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, spec, torch.device(device), memory, probe)
        self.num_microbatches = 1 if self.never_splits else configured_num_microbatches(
            spec, self.name, self.accepts_auto_microbatches)
        self.model_spec = spec.model_spec(dataset)
        self.model = build_seeded_model(dataset, spec, self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)
        self.sampler = NeighborSampler(dataset.graph, spec.fanouts)
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.auto_k: Optional[int] = None  # the K the auto search settled on so far

    # -- the step ----------------------------------------------------------------------------------
    def step(self, batch: LoadedBatch) -> StepOutcome:
        outcome = self.accumulate_gradients(batch.seeds, batch.generator)
        with self.probe.phase("optimizer"):
            self.optimizer.step()
        return outcome

    def accumulate_gradients(self, seeds: torch.Tensor, generator: torch.Generator) -> StepOutcome:
        """Everything of `step` but the optimizer step: afterwards each parameter's ``.grad`` holds the
        logical batch's accumulated gradient (at the fixed K, or at the K the search found)."""
        check_seeds(seeds, self.dataset.graph.num_nodes)
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        self.model.train()
        prepared = self._prepare(seeds, generator)
        num_seeds = int(seeds.numel())
        if self.num_microbatches is not None:
            with _single_seed_marked(self.num_microbatches >= num_seeds, self.num_microbatches):
                return self._attempt(prepared, generator, self.num_microbatches)
        state = generator.get_state()

        def attempt(k: int) -> StepOutcome:
            generator.set_state(state)  # the retry draws what the failed attempt drew
            return self._attempt(prepared, generator, k)

        first_k = max(self._initial_k(prepared), self.auto_k or 1)
        max_k = max(num_seeds, first_k)  # one seed per micro-batch is as fine as it gets
        with _single_seed_marked(True, max_k):  # smallest_fitting_k raises only the OOM of max_k
            self.auto_k, outcome = smallest_fitting_k(attempt, first_k, max_k, self._after_oom)
        return outcome

    def _attempt(self, prepared: Any, generator: torch.Generator, k: int) -> StepOutcome:
        self.optimizer.zero_grad(set_to_none=True)
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        return self._run(prepared, generator, k)

    def _after_oom(self) -> None:
        """Drop what a failed attempt left: its partial gradients and the tensors of its frames."""
        self.optimizer.zero_grad(set_to_none=True)
        self._loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        gc.collect()  # tracebacks form reference cycles; the emulated capacity counts what they hold
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def gradients(self) -> list[Optional[torch.Tensor]]:
        """Copies of the parameters' current ``.grad`` (None where a parameter got no gradient)."""
        return [None if p.grad is None else p.grad.detach().clone() for p in self.model.parameters()]

    @abc.abstractmethod
    def _prepare(self, seeds: torch.Tensor, generator: torch.Generator) -> Any:
        """What every attempt at this step shares (the sampled batch); done once per step."""

    @abc.abstractmethod
    def _run(self, prepared: Any, generator: torch.Generator, k: int) -> StepOutcome:
        """Split ``prepared`` into ``k`` micro-batches and run them via `run_microbatch`/`run_all`."""

    def _initial_k(self, prepared: Any) -> int:
        """Where the auto search starts for this step (a system's own estimator may raise it)."""
        return 1

    def run_microbatch(self, blocks: Blocks, total_seeds: int) -> None:
        """Gather, forward and backward one micro-batch, its loss scaled by ``1 / total_seeds``."""
        if blocks.num_seeds == 0:
            return
        with self.probe.phase("gather"):
            # Betty and Buffalo index the host features per micro-batch and copy the rows over.
            x = self.dataset.features.index_select(0, blocks.input_nodes).to(self.device)
            y = self.dataset.labels.index_select(0, blocks.seeds).to(self.device)
            on_device = blocks.to(self.device)
        with self.probe.phase("forward_backward"):
            logits = self.model(on_device, x)
            loss = F.cross_entropy(logits, y, reduction="sum") / total_seeds
            loss.backward()
        self._loss_sum += loss.detach().to(torch.float64)

    def loss_so_far(self) -> float:
        """The logical batch's mean cross-entropy accumulated by this step's micro-batches."""
        return float(self._loss_sum)

    def run_all(self, microbatches: Iterable[Blocks], total_seeds: int) -> list[MicrobatchShape]:
        """Run each micro-batch as the iterable produces it (so only one is alive at a time, as when
        they are streamed to the device); return the shapes of those run (empty ones are skipped)."""
        shapes = []
        for mb in microbatches:
            if mb.num_seeds == 0:
                continue
            self.run_microbatch(mb, total_seeds)
            shapes.append(MicrobatchShape.of(mb))
            del mb  # free it before the next one is built
        return shapes

    # -- evaluation -------------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Train/valid/test accuracy by layer-wise full-neighbour inference (the shared evaluator)."""
        ds = self.dataset
        logits = layerwise_inference(self.model, ds.graph, ds.features, self.device)
        return split_accuracy(logits, ds)
