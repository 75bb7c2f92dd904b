"""Names of the datasets Cherry knows, their specs and where they live on disk.

Every dataset lives in ``<root>/<dir_name>`` in OGB's layout (``RELEASE_v1.txt``, ``raw/``,
``split/<split>/``, ``processed/``), with Cherry's converted cache in ``<root>/<dir_name>/cherry``.
Generated (``synth-*``) datasets are fully determined by their `SynthSpec` (including its seed), so
the same name and scale always give the same bytes.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from pathlib import Path

CACHE_DIRNAME = "cherry"
# ogbn-products' published split sizes (train/valid/test of 2,449,029 nodes); scaled for synth-products.
_PRODUCTS_SPLIT = (196_615, 39_323, 2_213_091)
# ogbn-papers100M's published sizes: 111,059,956 nodes, 1,615,685,872 edges, and a split that labels
# only ~1.4% of the nodes (train/valid/test); the rest are unlabelled and stay outside every split.
_PAPERS_NODES, _PAPERS_EDGES = 111_059_956, 1_615_685_872
_PAPERS_SPLIT = (1_207_179, 125_265, 214_338)


@dataclass(frozen=True)
class SynthSpec:
    """Parameters of a generated dataset (degree-corrected stochastic block model).

    ``num_edges`` counts undirected edges written to ``raw/edge.csv.gz`` (OGB's "directed edges before
    symmetrisation"); the CSC graph holds twice as many entries. ``homophily`` is the probability that
    an edge is drawn inside its source's class (per node, Beta-distributed around this mean);
    ``split_by_degree`` puts the highest-weight nodes in train and the tail in test (like products'
    sales-rank split); ``degree_exponent`` is the power-law exponent of the
    node weights; ``feature_signal`` scales the class centroid against unit Gaussian noise.
    ``chunked`` generates in bounded memory (`cherry.data.synthetic_chunked`: the same model, another
    random stream, so existing specs keep ``False`` and their bytes).
    """

    name: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    split_sizes: tuple[int, int, int]
    homophily: float = 0.7
    degree_exponent: float = 2.1
    feature_signal: float = 0.2
    class_skew: float = 0.7
    split_by_degree: bool = False
    seed: int = 0
    scale: float = 1.0
    chunked: bool = False

    def __post_init__(self) -> None:
        if self.num_nodes < 10 or self.num_edges < 1:
            raise ValueError(f"{self.name}: need >= 10 nodes and >= 1 edge, got {self.num_nodes}, {self.num_edges}")
        if sum(self.split_sizes) > self.num_nodes or min(self.split_sizes) < 1:
            raise ValueError(f"{self.name}: split sizes {self.split_sizes} must be >= 1 and sum to <= {self.num_nodes}")
        max_edges = self.num_nodes * (self.num_nodes - 1) // 2
        if self.num_edges > max_edges // 4:
            raise ValueError(f"{self.name}: {self.num_edges} edges is too dense for {self.num_nodes} nodes")


@dataclass(frozen=True)
class OgbSpec:
    """A real OGB node-property dataset read from a directory the user populates."""

    name: str
    num_classes: int


SYNTH_SPECS: dict[str, SynthSpec] = {
    "synth-tiny": SynthSpec(
        name="synth-tiny", num_nodes=2_000, num_edges=10_000, feature_dim=24, num_classes=5,
        split_sizes=(1_200, 400, 400), seed=1, feature_signal=0.25,
    ),
    "synth-arxiv": SynthSpec(
        name="synth-arxiv", num_nodes=169_343, num_edges=1_166_243, feature_dim=128, num_classes=40,
        split_sizes=(90_941, 29_799, 48_603), seed=2, feature_signal=0.2,
    ),
    # Full ogbn-products size; `DEFAULT_SCALE` shrinks it to a tenth.
    "synth-products": SynthSpec(
        name="synth-products", num_nodes=2_449_029, num_edges=61_859_140, feature_dim=100, num_classes=47,
        split_sizes=_PRODUCTS_SPLIT, seed=3, feature_signal=0.23, split_by_degree=True,
    ),
    # papers100M-shaped: its node/edge ratio, 128 features, 172 classes, ~1.4% labelled.
    # Full size is 57 GB of features; `DEFAULT_SCALE` shrinks it to 1/1000 (111k nodes, 1.6M edges).
    "synth-papers": SynthSpec(
        name="synth-papers", num_nodes=_PAPERS_NODES, num_edges=_PAPERS_EDGES, feature_dim=128,
        num_classes=172, split_sizes=_PAPERS_SPLIT, seed=4, feature_signal=0.25, class_skew=1.0, chunked=True,
    ),
}
DEFAULT_SCALE = {"synth-tiny": 1.0, "synth-arxiv": 1.0, "synth-products": 0.1, "synth-papers": 0.001}

OGB_SPECS: dict[str, OgbSpec] = {
    "ogbn-arxiv": OgbSpec("ogbn-arxiv", 40),
    "ogbn-products": OgbSpec("ogbn-products", 47),
    "ogbn-papers100M": OgbSpec("ogbn-papers100M", 172),
}

DATASET_NAMES: tuple[str, ...] = tuple(SYNTH_SPECS) + tuple(OGB_SPECS)


def check_name(name: object) -> str:
    """Return ``name`` if Cherry knows it; otherwise raise a one-line error listing valid names."""
    if not isinstance(name, str):
        raise TypeError(f"dataset name must be a str, got {type(name).__name__}")
    if name not in DATASET_NAMES:
        raise ValueError(f"unknown dataset {name!r}; expected one of: {', '.join(DATASET_NAMES)}")
    return name


def is_synthetic(name: str) -> bool:
    return check_name(name) in SYNTH_SPECS


def resolve_scale(name: str, scale: float | None) -> float | None:
    """The scale to use for ``name``: the default for generated sets, None for real ones."""
    check_name(name)
    if name in OGB_SPECS:
        if scale is not None:
            raise ValueError(f"--scale applies to generated datasets only, not to real dataset {name!r}")
        return None
    if scale is None:
        return DEFAULT_SCALE[name]
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or not 0 < scale <= 1:
        raise ValueError(f"scale must be a number in (0, 1], got {scale!r}")
    return float(scale)


def synth_spec(name: str, scale: float | None = None) -> SynthSpec:
    """The spec of generated dataset ``name`` at ``scale`` (nodes, edges and split sizes scaled)."""
    scale = resolve_scale(name, scale)
    if scale is None:
        raise ValueError(f"{name!r} is a real OGB dataset, not a generated one")
    base = SYNTH_SPECS[name]
    if scale == 1.0:
        return base
    num_nodes = max(int(round(base.num_nodes * scale)), 100)
    num_edges = max(int(round(base.num_edges * scale)), 1)
    train, valid, test = base.split_sizes
    n_train = max(int(round(train * scale)), 1)
    n_valid = max(int(round(valid * scale)), 1)
    if sum(base.split_sizes) < base.num_nodes:  # partly labelled (papers): keep the labelled share
        n_test = max(int(round(test * scale)), 1)
    else:  # every node in a split: test takes the rest, so rounding never drops a node
        n_test = num_nodes - n_train - n_valid
    return replace(base, num_nodes=num_nodes, num_edges=num_edges,
                   split_sizes=(n_train, n_valid, n_test), scale=scale)


def dir_name(name: str, scale: float | None = None) -> str:
    """Directory of ``name`` under the root: OGB's convention (``ogbn-arxiv`` -> ``ogbn_arxiv``).

    A generated dataset at a non-default scale gets its own directory (``synth_products_scale0.5``),
    so preparing one scale never overwrites another.
    """
    scale = resolve_scale(name, scale)
    base = name.replace("-", "_")
    if scale is None or scale == DEFAULT_SCALE[name]:
        return base
    return f"{base}_scale{scale:g}"


def default_root() -> Path:
    """``$CHERRY_DATA`` if set, else ``<repository>/data``."""
    env = os.environ.get("CHERRY_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[2] / "data"


def resolve_root(root: str | os.PathLike | None) -> Path:
    """The datasets root: ``root``, else `default_root`. ValueError (one line, naming the path and
    where it came from) if it, or the nearest existing folder above it, is not a directory."""
    if root is None:
        path = default_root()
        origin = " (from $CHERRY_DATA)" if os.environ.get("CHERRY_DATA") else ""
    elif not isinstance(root, (str, os.PathLike)) or isinstance(root, bytes):
        raise TypeError(f"root must be a path, got {type(root).__name__}")
    else:
        if not str(root):
            raise ValueError("data root must be a directory path, got an empty string")
        path, origin = Path(root).expanduser(), ""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == path else f"lies under {existing}, which is a file"
        raise ValueError(f"data root {str(path)!r}{origin} {where}; expected a directory")
    return path


def ensure_writable_dir(path: Path, what: str = "data root") -> Path:
    """Create ``path`` if needed; ValueError (one line, naming it) if it cannot be created or written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create {what} {str(path)!r}: {exc.strerror or exc}; "
                         "expected a directory Cherry can write to") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{what} {str(path)!r} is not writable; expected a directory Cherry can write "
                         "to (choose another with --root or $CHERRY_DATA)")
    return path
