"""Stock PyG mini-batch training, the "PyG" row of the benchmark.

Per step: a ``torch_geometric.loader.NeighborLoader`` over exactly the logical batch's seeds (one batch,
``num_neighbors`` = our fanouts output layer first, PyG's hop order), features indexed by the sampled
``n_id``, one forward/backward with ``torch_geometric.nn`` layers (`baselines.pyg.model`), one Adam step.

Sampling differs from DGL's and Cherry's by design of PyG: NeighborLoader samples each node's
neighbours once (hop by hop) and returns one subgraph, so a seed's layer-2 messages reuse its layer-1
sample instead of a fresh one; ``trim_to_layer`` then restricts each layer to the hops it needs.
The sampler needs pyg-lib or torch-sparse: without one the constructor raises `SystemUnavailable`.
PyG's samplers draw from torch's global RNG, which each step seeds from the runner's generator.
Evaluation: Cherry's shared layer-wise full-neighbour inference driving PyG's layers.
"""
from __future__ import annotations

import warnings

import torch
from torch.nn import functional as F

from baselines.library import check_seeds, draw_seed, host_side, model_spec, raise_unavailable
from baselines.pyg.model import PygModel
from cherry.systems.contract import StepOutcome, System
from cherry.compat.pyg import pyg_data
from cherry.compat import pyg_sampling_available
from cherry.data import Dataset
from cherry.data.metrics import split_accuracy
from cherry.sampling import LoadedBatch
from cherry.spec import RunSpec
from cherry.models.inference import layerwise_inference


class PygSystem(System):
    """Stock PyG: one NeighborLoader batch, one forward/backward, one optimizer step."""

    name = "pyg"

    def __init__(self, dataset: Dataset, spec: RunSpec, device: torch.device, memory, probe) -> None:
        super().__init__(dataset, spec, device, memory, probe)
        self.model_spec = model_spec(dataset, spec, self.name)
        ok, reason = pyg_sampling_available()
        if not ok:
            raise_unavailable(reason if "NeighborLoader" in reason else f"PyG NeighborLoader: {reason}")
        from torch_geometric.sampler import NeighborSampler

        self.device = torch.device(device)
        self.num_neighbors = list(reversed(tuple(spec.fanouts)))
        with host_side(), warnings.catch_warnings():
            # PyG warns that sampling without pyg-lib is deprecated; torch-sparse still works.
            warnings.filterwarnings("ignore", message=r".*without a 'pyg-lib' installation")
            self.data = pyg_data(dataset.graph)
            self.sampler = NeighborSampler(self.data, self.num_neighbors, is_sorted=True)
        torch.manual_seed(spec.seed)  # initial weights, as Cherry's trainer does
        self.model = PygModel(self.model_spec).to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)

    def _sample(self, seeds: torch.Tensor):
        from torch_geometric.loader import NeighborLoader

        loader = NeighborLoader(self.data, self.num_neighbors, input_nodes=seeds, batch_size=int(seeds.numel()),
                                shuffle=False, neighbor_sampler=self.sampler)
        return next(iter(loader))

    def step(self, batch: LoadedBatch) -> StepOutcome:
        seeds, generator = batch.seeds, batch.generator
        check_seeds(seeds, self.dataset.graph.num_nodes)
        with self.probe.phase("sample"):
            torch.manual_seed(draw_seed(generator))
            # The sampler runs on the host, outside the CPU tracker: torch-sparse draws each node's
            # neighbours with one `torch::randint` call, which under the tracker's dispatch mode cost
            # 8 s per batch of 4096 (0.6 s without); the device's copy of its output is counted below.
            with host_side():
                batch = self._sample(seeds)
        with self.probe.phase("gather"):
            n_id = batch.n_id
            x = self.dataset.features.index_select(0, n_id).to(self.device)
            y = self.dataset.labels.index_select(0, n_id[: seeds.numel()]).to(self.device)
            edge_index = batch.edge_index.to(self.device, copy=True)  # the subgraph as the device holds it
        with self.probe.phase("forward_backward"):
            self.model.train()
            self.optimizer.zero_grad(set_to_none=True)
            logits = self.model.forward_subgraph(x, edge_index, int(seeds.numel()),
                                                 getattr(batch, "num_sampled_nodes", None),
                                                 getattr(batch, "num_sampled_edges", None))
            loss = F.cross_entropy(logits, y)
            loss.backward()
        with self.probe.phase("optimizer"):
            self.optimizer.step()
        return StepOutcome(loss=float(loss.detach()), num_microbatches=1)

    def evaluate(self) -> dict[str, float]:
        ds = self.dataset
        logits = layerwise_inference(self.model, ds.graph, ds.features, self.device)
        return split_accuracy(logits, ds)
