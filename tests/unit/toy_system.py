"""A toy system for `test_toy_system`: registered through `cherry.systems.register_system`, the one
documented entry point for adding a system. A linear model on the seeds' own features (no sampling):
just enough to step in K pieces (K = the spec's, 1 for "auto"), report phases and evaluate like any
system."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cherry.systems.contract import StepOutcome, System
from cherry.data.metrics import split_accuracy
from cherry.sampling import LoadedBatch

OPTIONS = {"scale": {"type": "number", "exclusiveMinimum": 0, "default": 1.0,
                     "description": "multiplies the input features"}}


class ToySystem(System):
    name = "toy"

    def __init__(self, dataset, spec, device, memory, probe) -> None:
        super().__init__(dataset, spec, device, memory, probe)
        torch.manual_seed(spec.seed)
        self.scale = spec.options["scale"]
        self.model = torch.nn.Linear(dataset.feature_dim, dataset.num_classes).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=spec.lr)
        self.num_parameters = sum(p.numel() for p in self.model.parameters())
        self.steps = []

    def step(self, batch: LoadedBatch) -> StepOutcome:
        self.steps.append(batch.index)
        with self.probe.phase("gather"):
            x = self.dataset.features.index_select(0, batch.seeds).to(self.device) * self.scale
            y = self.dataset.labels.index_select(0, batch.seeds).to(self.device)
        k = min(self.spec.num_microbatches or 1, len(y))
        with self.probe.phase("forward_backward"):
            self.optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for xs, ys in zip(torch.tensor_split(x, k), torch.tensor_split(y, k)):
                part = F.cross_entropy(self.model(xs), ys, reduction="sum") / len(y)
                part.backward()
                loss += float(part.detach())
        with self.probe.phase("optimizer"):
            self.optimizer.step()
        return StepOutcome(loss=loss, num_microbatches=k)

    def evaluate(self) -> dict[str, float]:
        with torch.no_grad():
            logits = self.model(self.dataset.features.to(self.device) * self.scale).cpu()
        return split_accuracy(logits, self.dataset)


SYSTEM = ToySystem
