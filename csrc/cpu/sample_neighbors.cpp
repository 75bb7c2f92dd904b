// CPU kernel of cherry::sample_neighbors. Bit-identical to cherry/ops/reference_sampling.py:
// the kept neighbours of seed v are the `fanout` smallest keys mix32(state(v) ^ j) over its
// adjacency offsets j (ties by offset), written in adjacency order. Seeds are processed in parallel;
// the first-appearance deduplication of sources is one sequential pass over a hash table, because its
// output order (seeds, then sources as first met) is inherently sequential and the pass is cheap.
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

// Open-addressing map from non-negative global ids to local positions (linear probing).
class IdMap {
 public:
  explicit IdMap(int64_t expected) {
    int64_t cap = 16;
    while (cap < 2 * expected) cap <<= 1;
    shift_ = 64;
    for (int64_t c = cap; c > 1; c >>= 1) --shift_;
    mask_ = cap - 1;
    keys_.assign(cap, -1);
    vals_.resize(cap);
  }
  // Returns the local position of `id`, inserting it with `fresh` if absent; `inserted` tells which.
  int64_t find_or_insert(int64_t id, int64_t fresh, bool* inserted) {
    uint64_t slot = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> shift_;
    while (true) {
      const int64_t k = keys_[slot];
      if (k == id) {
        *inserted = false;
        return vals_[slot];
      }
      if (k < 0) {
        keys_[slot] = id;
        vals_[slot] = fresh;
        *inserted = true;
        return fresh;
      }
      slot = (slot + 1) & mask_;
    }
  }

 private:
  int shift_;
  uint64_t mask_;
  std::vector<int64_t> keys_;
  std::vector<int64_t> vals_;
};

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
  at::parallel_for(0, num_seeds, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = sd[i];
      TORCH_CHECK(v >= 0 && v < num_nodes, "sample_neighbors: seed ", v, " out of range [0, ", num_nodes, ")");
      const int64_t deg = ip[v + 1] - ip[v];
      bp[i + 1] = (fanout < 0 || deg <= fanout) ? deg : fanout;
    }
  });
  for (int64_t i = 0; i < num_seeds; ++i) bp[i + 1] += bp[i];
  const int64_t num_edges = bp[num_seeds];

  at::Tensor sampled = at::empty({num_edges}, opts);
  int64_t* out = sampled.data_ptr<int64_t>();
  const uint32_t base = seed_base(random_seed);
  at::parallel_for(0, num_seeds, 64, [&](int64_t begin, int64_t end) {
    std::vector<std::pair<uint32_t, int64_t>> cand;  // (key, offset): pair order is the tie rule
    for (int64_t i = begin; i < end; ++i) {
      const int64_t v = sd[i];
      const int64_t start = ip[v];
      const int64_t deg = ip[v + 1] - start;
      const int64_t count = bp[i + 1] - bp[i];
      int64_t* dst = out + bp[i];
      if (count == deg) {
        std::copy(ind + start, ind + start + deg, dst);
        continue;
      }
      const uint32_t h = node_state(base, v);
      cand.resize(deg);
      for (int64_t j = 0; j < deg; ++j) cand[j] = {mix32(h ^ static_cast<uint32_t>(j)), j};
      std::nth_element(cand.begin(), cand.begin() + count, cand.end());
      std::sort(cand.begin(), cand.begin() + count,
                [](const auto& a, const auto& b) { return a.second < b.second; });
      for (int64_t k = 0; k < count; ++k) dst[k] = ind[start + cand[k].second];
    }
  });

  // Sources: the seeds (distinct, in order), then every new sampled id in first-appearance order.
  at::Tensor block_indices = at::empty({num_edges}, opts);
  int64_t* loc = block_indices.data_ptr<int64_t>();
  std::vector<int64_t> src;
  src.reserve(num_seeds + num_edges);
  IdMap map(num_seeds + num_edges);
  bool inserted = false;
  for (int64_t i = 0; i < num_seeds; ++i) {
    map.find_or_insert(sd[i], i, &inserted);
    TORCH_CHECK(inserted, "sample_neighbors: seeds must be distinct, ", sd[i], " repeats");
    src.push_back(sd[i]);
  }
  for (int64_t e = 0; e < num_edges; ++e) {
    const int64_t fresh = static_cast<int64_t>(src.size());
    loc[e] = map.find_or_insert(out[e], fresh, &inserted);
    if (inserted) src.push_back(out[e]);
  }
  at::Tensor src_nodes = at::empty({static_cast<int64_t>(src.size())}, opts);
  std::copy(src.begin(), src.end(), src_nodes.data_ptr<int64_t>());
  return {block_indptr, block_indices, src_nodes};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("sample_neighbors", &sample_neighbors_cpu); }
