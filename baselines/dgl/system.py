"""Stock DGL mini-batch training, the "DGL" row of the benchmark.

Per step: ``dgl.dataloading.NeighborSampler(fanouts).sample_blocks`` on the whole logical batch (DGL
resamples every layer's destinations, as Cherry does), features indexed by the input nodes, one
forward/backward with ``dgl.nn`` layers (`baselines.dgl.model`), one Adam step. No micro-batching.
DGL's sampler draws from DGL's own RNG, which each step seeds from the runner's generator; with more
than one OpenMP thread DGL's sampling is still not bit-reproducible (threads race; dmlc/dgl#3302). Evaluation is DGL-style layer-wise inference: each layer over all nodes in chunks of
destinations, each chunk a ``MultiLayerFullNeighborSampler(1)`` block, then the shared accuracy metric.

Memory on the CPU (emulated device): the tensor tracker sees torch tensors only, so DGL's graph and
blocks (allocated by DGL's C++ runtime) are not counted; on a GPU the blocks would be, but the PyPI
DGL wheel has no CUDA, and the constructor then raises `SystemUnavailable`.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F

from baselines.library import check_seeds, draw_seed, host_side, model_spec, raise_unavailable
from baselines.dgl.model import DglModel, with_self_edges
from cherry.systems.contract import StepOutcome, System
from cherry.compat.dgl import dgl_graph
from cherry.data import Dataset
from cherry.data.metrics import split_accuracy
from cherry.models.inference import host_rows
from cherry.sampling import LoadedBatch
from cherry.spec import RunSpec

EVAL_CHUNK = 1 << 16  # destinations per layer-wise inference chunk (as Cherry's default)


class DglSystem(System):
    """Stock DGL: one sampled mini-batch, one forward/backward, one optimizer step."""

    name = "dgl"

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, spec, device, memory, probe)
        self.model_spec = model_spec(dataset, spec, self.name)
        from cherry.compat import import_dgl

        try:
            dgl = import_dgl()
        except ImportError as exc:
            raise_unavailable(str(exc))
        self.dgl = dgl
        self.device = torch.device(device)
        if self.device.type != "cpu":
            try:
                dgl.graph(([0], [0])).to(self.device)
            except Exception as exc:  # the PyPI wheel is CPU-only; DGLError is not importable by name
                raise_unavailable(f"this DGL build cannot use {self.device}: {str(exc).splitlines()[0]}")
        with host_side():
            self.graph = dgl_graph(dgl, dataset.graph)
        self.sampler = dgl.dataloading.NeighborSampler(list(spec.fanouts))
        torch.manual_seed(spec.seed)  # initial weights, as Cherry's trainer does
        self.model = DglModel(dgl, self.model_spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)

    def _prepare_block(self, block):
        if self.model.needs_self_edges:
            block = with_self_edges(self.dgl, block)
        return block.to(self.device) if self.device.type != "cpu" else block

    def step(self, batch: LoadedBatch) -> StepOutcome:
        seeds, generator = batch.seeds, batch.generator
        check_seeds(seeds, self.dataset.graph.num_nodes)
        with self.probe.phase("sample"):
            self.dgl.seed(draw_seed(generator))
            input_nodes, output_nodes, blocks = self.sampler.sample_blocks(self.graph, seeds)
            blocks = [self._prepare_block(b) for b in blocks]
        with self.probe.phase("gather"):
            x = self.dataset.features.index_select(0, input_nodes).to(self.device)
            y = self.dataset.labels.index_select(0, output_nodes).to(self.device)
        with self.probe.phase("forward_backward"):
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self.model(blocks, x), y)
            loss.backward()
        with self.probe.phase("optimizer"):
            self.optimizer.step()
        return StepOutcome(loss=float(loss.detach()), num_microbatches=1)

    @torch.no_grad()
    def logits(self, chunk_size: int = EVAL_CHUNK) -> torch.Tensor:
        """Full-neighbour logits of every node (CPU), layer by layer over chunks of destinations; a chunk
        out of memory is halved and retried (re-raised at one destination), as Cherry's evaluator does."""
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an int >= 1, got {chunk_size!r}")
        sampler = self.dgl.dataloading.MultiLayerFullNeighborSampler(1)
        was_training = self.model.training
        self.model.eval()
        try:
            h = self.dataset.features
            for layer in range(self.model_spec.num_layers):
                h = self._logits_layer(layer, sampler, h, chunk_size)
            return h
        finally:
            self.model.train(was_training)

    def _logits_layer(self, layer: int, sampler, h: torch.Tensor, size: int) -> torch.Tensor:
        n = self.dataset.graph.num_nodes
        out, start = None, 0
        while start < n:
            end = min(start + size, n)
            rows = None
            try:
                dst = torch.arange(start, end, dtype=torch.int64)
                input_nodes, _, blocks = sampler.sample_blocks(self.graph, dst)
                x = h.index_select(0, input_nodes).to(self.device)
                rows = self.model.forward_layer(layer, self._prepare_block(blocks[0]), x).cpu()
            except torch.OutOfMemoryError:
                if size == 1:
                    raise
            if rows is None:  # outside the except block: its traceback would pin the chunk's tensors
                x = blocks = None
                size = max(1, size // 2)
                continue
            if out is None:  # host memory, which an emulated device does not count (nor would a GPU)
                out = host_rows(n, rows.shape[1], rows.dtype)
            out[start:end] = rows
            start = end
            del rows, x
        return out

    def evaluate(self) -> dict[str, float]:
        logits = self.logits()
        ds = self.dataset
        return split_accuracy(logits, ds)
