"""A seeded random split of the labelled nodes, described by one short string.

``random:20,30`` draws 20 train and 30 validation nodes per class (Shchur et al.'s protocol for the
gnn-benchmark graphs; the rest of the labelled nodes are the test split); ``random:0.1,0.1`` draws 10%
of the labelled nodes for train and 10% for validation, uniformly, the rest test. ``@SEED`` (default
0) picks the draw: ``random:20,30@3``. The same string and labels give the same split on every
machine (numpy's PCG64 seeded with SEED), so the string is what a dataset's manifest records.

Contract of `draw_split`: the three splits are sorted, disjoint, labelled, and cover every labelled
node; a class with too few nodes for its per-class draw is a one-line ValueError naming it. An
empty class (no node carries that label) draws nothing.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

DEFAULT_SPLIT = "random:20,30"
_PATTERN = re.compile(r"^random:([0-9.]+),([0-9.]+)(?:@([0-9]+))?$")
_EXPECTED = ("expected 'random:TRAIN,VALID[@SEED]' with per-class counts (random:20,30) or fractions of "
             "the labelled nodes (random:0.1,0.1)")


@dataclass(frozen=True)
class SplitSpec:
    """A parsed split string: ``per_class`` counts, or fractions of the labelled nodes, and a seed."""

    train: float
    valid: float
    per_class: bool
    seed: int

    def text(self) -> str:
        """The canonical string (what the manifest records): ``random:20,30@0``."""
        fmt = (lambda v: str(int(v))) if self.per_class else (lambda v: f"{v:g}")
        return f"random:{fmt(self.train)},{fmt(self.valid)}@{self.seed}"


def parse_split(text: object) -> SplitSpec:
    """`SplitSpec` of ``text`` (see the module docstring); a one-line ValueError naming it otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"split must be a str such as {DEFAULT_SPLIT!r}, got {type(text).__name__}")
    match = _PATTERN.match(text.strip())
    if not match:
        raise ValueError(f"split {text!r}: {_EXPECTED}")
    raw = match.group(1), match.group(2)
    seed = int(match.group(3) or 0)
    if all(re.fullmatch(r"[0-9]+", v) for v in raw):
        train, valid = (int(v) for v in raw)
        if train < 1 or valid < 0:
            raise ValueError(f"split {text!r}: need at least 1 train node per class, got {train}")
        return SplitSpec(float(train), float(valid), True, seed)
    try:
        train, valid = (float(v) for v in raw)
    except ValueError:
        raise ValueError(f"split {text!r}: {_EXPECTED}") from None
    if not (0 < train < 1 and 0 <= valid < 1 and train + valid < 1):
        raise ValueError(f"split {text!r}: fractions must lie in (0, 1) with train + valid < 1, "
                         f"got {train:g}, {valid:g}")
    return SplitSpec(train, valid, False, seed)


def draw_split(labels: np.ndarray, spec: SplitSpec) -> dict[str, np.ndarray]:
    """``{"train", "valid", "test"}`` index vectors (int64, sorted) of the labelled nodes (label >= 0)."""
    labels = np.asarray(labels)
    rng = np.random.Generator(np.random.PCG64(spec.seed))
    labelled = np.flatnonzero(labels >= 0)
    if spec.per_class:
        train, valid = [], []
        need = int(spec.train) + int(spec.valid)
        for c in np.unique(labels[labelled]):
            members = labelled[labels[labelled] == c]
            if members.size <= need:
                raise ValueError(f"split {spec.text()}: class {int(c)} has {members.size} nodes; expected more "
                                 f"than {need} (train + valid per class) to leave a test node")
            members = rng.permutation(members)
            train.append(members[:int(spec.train)])
            valid.append(members[int(spec.train):need])
        train_idx = np.concatenate(train) if train else np.empty(0, np.int64)
        valid_idx = np.concatenate(valid) if valid else np.empty(0, np.int64)
    else:
        order = rng.permutation(labelled)
        n_train = max(int(round(spec.train * labelled.size)), 1)
        n_valid = int(round(spec.valid * labelled.size))
        train_idx, valid_idx = order[:n_train], order[n_train:n_train + n_valid]
    taken = np.zeros(labels.size, dtype=bool)
    taken[train_idx] = taken[valid_idx] = True
    test_idx = labelled[~taken[labelled]]
    if train_idx.size == 0:
        raise ValueError(f"split {spec.text()}: no labelled node to train on")
    return {"train": np.sort(train_idx).astype(np.int64), "valid": np.sort(valid_idx).astype(np.int64),
            "test": np.sort(test_idx).astype(np.int64)}
