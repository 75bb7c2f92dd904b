"""The generator of `cherry.data.synthetic` in bounded memory: the same model, drawn in chunks
(its shared draws in `cherry.data.synth_draws`).

For a spec with ``chunked=True`` (synth-papers) a dataset of any size is generated while holding only
per-node vectors (labels, weights, a few int64/float64 values per node) and one chunk of edges or
feature rows at a time:

- node-level draws (labels, weights, per-node homophily and partner class, the split) come from one
  generator seeded ``[seed, 0]``, exactly as the in-memory model draws them;
- edges are drawn in pieces of `DRAWS_PER_PIECE` (piece ``k`` from generator ``[seed, 1, k]``); each
  undirected pair ``(a, b)``, ``a < b``, goes to the bucket file ``a mod B`` on disk (``B`` from the
  spec: about `BUCKET_EDGES` edges each); each bucket is deduplicated by a sort of its own keys. Rounds
  of draws continue until ``num_edges`` distinct pairs exist; a surplus is dropped uniformly (how many
  per bucket by a multivariate hypergeometric draw, which ones by each bucket's generator);
- edges come out bucket by bucket in a seeded order, shuffled inside each bucket (not sorted by
  source, as real edge lists are not);
- feature rows of node chunk ``k`` (`CHUNK_NODES` rows) come from generator ``[seed, 2, k]``.

So the same spec gives the same arrays on any machine and for any memory (nothing depends on the
size of the host), but not the same arrays as the in-memory generator (a different random stream:
that is why only new specs opt in). Guarantees are those of `cherry.data.synthetic.generate`.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

from cherry.data.registry import SynthSpec

CHUNK_NODES = 1 << 14  # feature rows per generated block (16 MiB of float64 noise at 128 features)
DRAWS_PER_PIECE = 1 << 18  # edge draws per piece (a few tens of MB of temporaries)
BUCKET_EDGES = 1 << 20  # target distinct edges per bucket file (8 MiB of keys)
_NODES, _EDGES, _FEATURES, _THINNING, _CENTROIDS = range(5)


def _rng(spec: SynthSpec, *stream: int) -> np.random.Generator:
    return np.random.default_rng([spec.seed, *stream])


class ChunkedSynth:
    """A generated dataset in bounded memory: per-node arrays held, edges and features as blocks.

    ``labels``, ``train_idx``, ``valid_idx``, ``test_idx`` are arrays; `edge_blocks` and
    `feature_blocks` yield ``[k, 2]`` int64 edges and ``[k, F]`` float32 rows (in node order). Edge
    buckets live in ``workdir`` (a temporary directory if None) until `close`.
    """

    def __init__(self, spec: SynthSpec, workdir: Path | None = None) -> None:
        from cherry.data.synth_draws import _node_weights

        if not isinstance(spec, SynthSpec):
            raise TypeError(f"spec must be a SynthSpec, got {type(spec).__name__}")
        self.spec = spec
        rng = _rng(spec, _NODES)
        n, c = spec.num_nodes, spec.num_classes
        class_p = 1.0 / np.arange(1, c + 1) ** spec.class_skew
        self.labels = rng.choice(c, size=n, p=class_p / class_p.sum()).astype(np.int64)
        self._weights = _node_weights(rng, n, spec.degree_exponent)
        self._homophily = rng.beta(spec.homophily, 1 - spec.homophily, n)  # Beta(h, 1 - h), as in memory
        classes = np.bincount(self.labels, minlength=c)
        nonempty = np.flatnonzero(classes > 0)
        self._partner = nonempty[rng.integers(0, nonempty.size, n)]
        perm = rng.permutation(n)
        if spec.split_by_degree:
            perm = perm[np.argsort(-self._weights[perm], kind="stable")]
        n_train, n_valid, n_test = spec.split_sizes
        splits = np.split(perm[: n_train + n_valid + n_test], [n_train, n_train + n_valid])
        self.train_idx, self.valid_idx, self.test_idx = (np.sort(s).astype(np.int64) for s in splits)
        self._own_dir = tempfile.TemporaryDirectory(prefix="cherry-edges-", dir=workdir)
        self._dir = Path(self._own_dir.name)
        self.num_buckets = max(1, math.ceil(spec.num_edges / BUCKET_EDGES))
        self._bucket_sizes: np.ndarray | None = None

    def close(self) -> None:
        self._own_dir.cleanup()

    def __enter__(self) -> "ChunkedSynth":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- edges -------------------------------------------------------------------------------------

    def _bucket(self, b: int) -> Path:
        return self._dir / f"bucket-{b}.i64"

    def _draw_piece(self, piece: int, draws: int, order, cumw, class_start, class_end) -> np.ndarray:
        from cherry.data.synth_draws import _sample_from_segments

        spec, n = self.spec, self.spec.num_nodes
        rng = _rng(spec, _EDGES, piece)
        src = order[_sample_from_segments(rng, cumw, np.zeros(draws, np.int64), np.full(draws, n, np.int64))]
        cls = np.where(rng.random(draws) < self._homophily[src], self.labels[src], self._partner[src])
        dst = order[_sample_from_segments(rng, cumw, class_start[cls], class_end[cls])]
        keep = src != dst
        a, b = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
        return a * n + b

    def _draw_edges(self) -> None:
        spec, n = self.spec, self.spec.num_nodes
        order = np.argsort(self.labels, kind="stable")
        cumw = np.cumsum(self._weights[order])
        sorted_labels = self.labels[order]
        class_start = np.searchsorted(sorted_labels, np.arange(spec.num_classes), side="left")
        class_end = np.searchsorted(sorted_labels, np.arange(spec.num_classes), side="right")
        del sorted_labels
        sizes = np.zeros(self.num_buckets, dtype=np.int64)
        piece, oversample = 0, 1.2
        for _ in range(20):
            missing = spec.num_edges - int(sizes.sum())
            if missing <= 0:
                break
            draw = int(missing * oversample) + 64
            for start in range(0, draw, DRAWS_PER_PIECE):
                keys = self._draw_piece(piece, min(DRAWS_PER_PIECE, draw - start), order, cumw, class_start,
                                        class_end)
                piece += 1
                bucket = (keys // n) % self.num_buckets
                by_bucket = np.argsort(bucket, kind="stable")
                bounds = np.searchsorted(bucket[by_bucket], np.arange(self.num_buckets + 1))
                for b in np.flatnonzero(np.diff(bounds)):
                    with open(self._bucket(b), "ab") as f:
                        keys[by_bucket[bounds[b]:bounds[b + 1]]].tofile(f)
                del keys, bucket, by_bucket
            gained = -int(sizes.sum())
            for b in range(self.num_buckets):
                sizes[b] = self._dedup(b)
            gained += int(sizes.sum())
            oversample = min(max(oversample, 1.1 * draw / max(gained, 1)), 50.0)
        if sizes.sum() < spec.num_edges:
            raise ValueError(f"{spec.name}: could not draw {spec.num_edges} distinct edges; graph too dense")
        surplus = int(sizes.sum()) - spec.num_edges
        drop = (_rng(spec, _THINNING).multivariate_hypergeometric(sizes, surplus) if surplus
                else np.zeros_like(sizes))
        self._bucket_sizes, self._drop = sizes, drop

    def _dedup(self, b: int) -> int:
        path = self._bucket(b)
        if not path.exists():
            return 0
        keys = np.sort(np.fromfile(path, dtype=np.int64))
        keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
        keys.tofile(path)
        return int(keys.size)

    def edge_blocks(self) -> Iterator[np.ndarray]:
        """The ``num_edges`` distinct undirected edges, ``[k, 2]`` int64 blocks with ``src < dst``."""
        if self._bucket_sizes is None:
            self._draw_edges()
        n = self.spec.num_nodes
        for b in _rng(self.spec, _THINNING).permutation(self.num_buckets):
            if self._bucket_sizes[b] == 0:
                continue
            keys = np.fromfile(self._bucket(b), dtype=np.int64)
            rng = _rng(self.spec, _THINNING, 1 + int(b))
            if self._drop[b]:
                keys = keys[np.sort(rng.choice(keys.size, keys.size - int(self._drop[b]), replace=False))]
            keys = keys[rng.permutation(keys.size)]
            yield np.stack([keys // n, keys % n], axis=1)

    # -- features ----------------------------------------------------------------------------------

    def feature_blocks(self) -> Iterator[np.ndarray]:
        """``[k, F]`` float32 feature rows, in node order, `CHUNK_NODES` rows per block."""
        from cherry.data.synth_draws import quantized_features

        spec = self.spec
        centroids = _rng(spec, _CENTROIDS).standard_normal((spec.num_classes, spec.feature_dim))
        centroids *= spec.feature_signal
        for k, start in enumerate(range(0, spec.num_nodes, CHUNK_NODES)):
            labels = self.labels[start:start + CHUNK_NODES]
            noise = _rng(spec, _FEATURES, k).standard_normal((labels.size, spec.feature_dim))
            yield quantized_features(centroids[labels] + noise)
