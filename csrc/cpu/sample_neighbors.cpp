// CPU kernel of cherry::sample_neighbors. Bit-identical to cherry/ops/reference_sampling.py:
// a seed with more than `fanout` in-neighbours picks `fanout` adjacency offsets by Floyd's algorithm
// driven by the counter-based hash (O(fanout) per seed, whatever its degree), in adjacency order.
// Seeds are processed in parallel only when there are enough of them to pay for a thread team (the
// sampler often runs on a background thread next to compute, where a team per call oversubscribes
// the cores). The first-appearance deduplication of sources is one sequential pass over a hash
// table, because its output order (seeds, then sources as first met) is inherently sequential.
// Like every graph op, it trusts `indices` to lie in [0, num_nodes) (cherry.data.Graph validates).
// Per-op ATen headers instead of <ATen/ATen.h>: only at::empty is needed, and it parses faster.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace {

constexpr uint32_t kGolden = 0x9E3779B9u;

inline uint32_t mix32(uint32_t x) {  // "lowbias32", a bijection on 32-bit words
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

inline uint32_t seed_base(int64_t random_seed) {
  const uint64_t s = static_cast<uint64_t>(random_seed);
  return mix32(mix32(static_cast<uint32_t>(s) ^ kGolden) ^ static_cast<uint32_t>(s >> 32));
}

inline uint32_t node_state(uint32_t base, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  return mix32(mix32(base ^ static_cast<uint32_t>(u)) ^ static_cast<uint32_t>(u >> 32));
}

// Parallel tasks are sized by work, about a millisecond each: a thread team pays off only when every
// task is long next to the delay of waking a worker, which on oversubscribed cores (the sampler thread
// beside a compute team) is a scheduler slice, milliseconds. Smaller calls run inline.
constexpr int64_t kCountGrain = 1 << 16;  // seeds per task of the degree pass (a load each)
constexpr int64_t kEdgeGrain = 1 << 16;   // kept edges per task of the selection pass

// floor(r * m / 2^32), exactly, for m in [1, 2^63): a draw in [0, m) from a 32-bit hash word r,
// by multiply-shift (no division; the same bias as r mod m, below m / 2^32).
inline int64_t scale_draw(uint32_t r, int64_t m) {
  const uint64_t um = static_cast<uint64_t>(m), ur = r;
  return static_cast<int64_t>(ur * (um >> 32) + ((ur * (um & 0xFFFFFFFFu)) >> 32));
}

// Up to this many picks, membership and insertion point come from one branch-free scan; beyond it a
// binary search beats the O(picks) scan per step.
constexpr int64_t kLinearPicks = 48;

// Floyd's algorithm: writes `count` (< deg) distinct offsets in [0, deg), ascending, to `dst`.
// The picks stay sorted as they are made, so no sort follows; a repeated draw picks j, which exceeds
// every earlier pick (they all lie in [0, j)) and is appended.
inline void floyd_offsets(uint32_t h, int64_t deg, int64_t count, int64_t* dst) {
  int64_t n = 0;
  for (int64_t j = deg - count; j < deg; ++j, ++n) {
    const int64_t t = scale_draw(mix32(h ^ static_cast<uint32_t>(j)), j + 1);
    int64_t pos = 0;
    bool seen = false;
    if (n <= kLinearPicks) {
      for (int64_t k = 0; k < n; ++k) {
        pos += dst[k] < t;
        seen |= dst[k] == t;
      }
    } else {
      pos = std::lower_bound(dst, dst + n, t) - dst;
      seen = pos < n && dst[pos] == t;
    }
    if (seen) {
      dst[n] = j;
      continue;
    }
    // Shift the larger picks up by one as the scan goes, carrying the displaced value: written so
    // that GCC does not turn it into a memmove call, which costs more than moving a few words.
    int64_t carry = t;
    for (int64_t k = pos; k < n; ++k) std::swap(carry, dst[k]);
    dst[n] = carry;
  }
}

// Open-addressing map from ids in [0, 2^31) or [0, 2^63) (Key = int32_t or int64_t) to local
// positions of the same width; linear probing at load <= 1/2. The 32-bit variant halves the table,
// which matters because the probes are cache misses.
template <typename Key>
class IdMap {
 public:
  explicit IdMap(int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    shift_ = 64;
    for (int64_t c = cap; c > 1; c >>= 1) --shift_;
    mask_ = cap - 1;
    slots_.assign(cap, Slot{-1, 0});
  }
  void prefetch(int64_t id) const { __builtin_prefetch(&slots_[home(id)]); }
  // Returns the local position of `id`, inserting it with `fresh` if absent; `inserted` tells which.
  int64_t find_or_insert(int64_t id, int64_t fresh, bool* inserted) {
    for (uint64_t i = home(id);; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.key == static_cast<Key>(id)) {
        *inserted = false;
        return slot.value;
      }
      if (slot.key < 0) {
        slot = Slot{static_cast<Key>(id), static_cast<Key>(fresh)};
        *inserted = true;
        return fresh;
      }
    }
  }

 private:
  struct Slot {
    Key key;
    Key value;
  };
  uint64_t home(int64_t id) const { return (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift_; }
  int shift_;
  uint64_t mask_;
  std::vector<Slot> slots_;
};

// Writes the local position of every sampled id to `loc` and returns the sources: the seeds
// (distinct, in order), then every new sampled id in first-appearance order.
template <typename Key>
std::vector<int64_t> relabel(const int64_t* seeds, int64_t num_seeds, const int64_t* sampled,
                             int64_t num_edges, int64_t* loc) {
  constexpr int64_t kAhead = 16;  // probes issued this far ahead overlap their cache misses
  std::vector<int64_t> src;
  src.reserve(num_seeds + num_edges);
  IdMap<Key> map(num_seeds + num_edges);
  bool inserted = false;
  for (int64_t i = 0; i < num_seeds; ++i) {
    if (i + kAhead < num_seeds) map.prefetch(seeds[i + kAhead]);
    map.find_or_insert(seeds[i], i, &inserted);
    TORCH_CHECK(inserted, "sample_neighbors: seeds must be distinct, ", seeds[i], " repeats");
    src.push_back(seeds[i]);
  }
  for (int64_t e = 0; e < num_edges; ++e) {
    if (e + kAhead < num_edges) map.prefetch(sampled[e + kAhead]);
    loc[e] = map.find_or_insert(sampled[e], static_cast<int64_t>(src.size()), &inserted);
    if (inserted) src.push_back(sampled[e]);
  }
  return src;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_cpu(
    const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& seeds_in,
    int64_t fanout, int64_t random_seed) {
  TORCH_CHECK(indptr_in.scalar_type() == at::kLong && indices_in.scalar_type() == at::kLong &&
                  seeds_in.scalar_type() == at::kLong,
              "sample_neighbors: indptr, indices and seeds must be int64");
  TORCH_CHECK(indptr_in.dim() == 1 && indices_in.dim() == 1 && seeds_in.dim() == 1,
              "sample_neighbors: indptr, indices and seeds must be one-dimensional");
  TORCH_CHECK(fanout == -1 || fanout > 0, "sample_neighbors: fanout must be positive or -1, got ", fanout);
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor seeds = seeds_in.contiguous();
  const int64_t num_nodes = indptr.numel() - 1;
  const int64_t num_seeds = seeds.numel();
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* ind = indices.data_ptr<int64_t>();
  const int64_t* sd = seeds.data_ptr<int64_t>();
  const auto opts = indptr.options();

  at::Tensor block_indptr = at::empty({num_seeds + 1}, opts);
  int64_t* bp = block_indptr.data_ptr<int64_t>();
  bp[0] = 0;
  at::parallel_for(0, num_seeds, kCountGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = sd[i];
      TORCH_CHECK(v >= 0 && v < num_nodes, "sample_neighbors: seed ", v, " out of range [0, ", num_nodes, ")");
      const int64_t deg = ip[v + 1] - ip[v];
      bp[i + 1] = (fanout < 0 || deg <= fanout) ? deg : fanout;
    }
  });
  for (int64_t i = 0; i < num_seeds; ++i) bp[i + 1] += bp[i];
  const int64_t num_edges = bp[num_seeds];

  // Two passes per chunk of seeds: first the position in `indices` of every kept edge (Floyd's
  // picks or the whole adjacency), then one gather. The gather's loads are cache misses into a large
  // array; in a loop of their own they are independent and overlap, between Floyd steps they do not.
  at::Tensor sampled = at::empty({num_edges}, opts);
  int64_t* out = sampled.data_ptr<int64_t>();
  const uint32_t base = seed_base(random_seed);
  const int64_t seed_grain = std::max<int64_t>(1, kEdgeGrain * num_seeds / std::max<int64_t>(num_edges, 1));
  at::parallel_for(0, num_seeds, seed_grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = sd[i];
      const int64_t start = ip[v];
      const int64_t deg = ip[v + 1] - start;
      const int64_t count = bp[i + 1] - bp[i];
      int64_t* dst = out + bp[i];
      if (count == deg) {
        for (int64_t k = 0; k < deg; ++k) dst[k] = start + k;
      } else {
        floyd_offsets(node_state(base, v), deg, count, dst);
        for (int64_t k = 0; k < count; ++k) dst[k] += start;
      }
    }
    for (int64_t e = bp[begin]; e < bp[end]; ++e) out[e] = ind[out[e]];
  });

  at::Tensor block_indices = at::empty({num_edges}, opts);
  int64_t* loc = block_indices.data_ptr<int64_t>();
  constexpr int64_t kMax32 = INT32_MAX;
  const std::vector<int64_t> src = (num_nodes <= kMax32 && num_seeds + num_edges <= kMax32)
                                       ? relabel<int32_t>(sd, num_seeds, out, num_edges, loc)
                                       : relabel<int64_t>(sd, num_seeds, out, num_edges, loc);
  at::Tensor src_nodes = at::empty({static_cast<int64_t>(src.size())}, opts);
  std::copy(src.begin(), src.end(), src_nodes.data_ptr<int64_t>());
  return {block_indptr, block_indices, src_nodes};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("sample_neighbors", &sample_neighbors_cpu); }
