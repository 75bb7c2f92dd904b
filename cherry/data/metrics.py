"""The one accuracy metric every system is scored with.

OGB's own `Evaluator` for ``ogbn-*`` datasets; the same metric (accuracy) computed directly for the
generated ones, whose names OGB's Evaluator does not accept.
"""
from __future__ import annotations

import torch

from cherry.extras import require


def accuracy(logits: torch.Tensor, labels: torch.Tensor, index: torch.Tensor, dataset_name: str = "") -> float:
    """Accuracy of ``logits.argmax(1)`` against ``labels`` on the nodes ``index`` (nan when empty)."""
    if index.numel() == 0:
        return float("nan")
    pred = logits.index_select(0, index).argmax(1)
    true = labels.index_select(0, index)
    if dataset_name.startswith("ogbn-"):
        Evaluator = require("ogb.nodeproppred").Evaluator

        return float(Evaluator(dataset_name).eval({"y_true": true.view(-1, 1), "y_pred": pred.view(-1, 1)})["acc"])
    return float((pred == true).double().mean())


SPLITS = ("train", "valid", "test")


def split_accuracy(logits: torch.Tensor, dataset) -> dict[str, float]:
    """``{"train", "valid", "test"}`` accuracy of full-graph ``logits`` on ``dataset``'s splits."""
    return {split: accuracy(logits, dataset.labels, getattr(dataset, f"{split}_idx"), dataset.name)
            for split in SPLITS}
