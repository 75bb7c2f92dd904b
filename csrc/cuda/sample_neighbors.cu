// CUDA kernel of cherry::sample_neighbors, bit-identical to cherry/ops/reference_sampling.py.
// One warp per seed: a take-all seed's lanes copy its adjacency together; otherwise lane 0 runs
// Floyd's algorithm (O(fanout) hash draws, whatever the degree, picks kept sorted in the output
// slots) and the lanes then gather the picked neighbours. Deduplication of sources (first-appearance
// order) uses ATen's unique, a scatter-min of first positions and a sort, as the reference does.
// Per-op ATen headers instead of <ATen/ATen.h>: the same API, a fraction of the parse time under nvcc.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kSeedsPerBlock = kThreads / kWarp;
constexpr uint32_t kGolden = 0x9E3779B9u;

__host__ __device__ inline uint32_t mix32(uint32_t x) {  // "lowbias32", a bijection
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

__device__ inline uint32_t node_state(uint32_t base, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  return mix32(mix32(base ^ static_cast<uint32_t>(u)) ^ static_cast<uint32_t>(u >> 32));
}

// floor(r * m / 2^32), exactly, for m in [1, 2^63): a draw in [0, m) by multiply-shift.
__device__ inline int64_t scale_draw(uint32_t r, int64_t m) {
  const uint64_t um = static_cast<uint64_t>(m), ur = r;
  return static_cast<int64_t>(ur * (um >> 32) + ((ur * (um & 0xFFFFFFFFull)) >> 32));
}

// Floyd's algorithm: `count` (< deg) distinct offsets in [0, deg), ascending, in `dst`. A repeated
// draw picks j, which exceeds every earlier pick (all in [0, j)), so it is appended.
__device__ void floyd_offsets(uint32_t h, int64_t deg, int64_t count, int64_t* dst) {
  int64_t n = 0;
  for (int64_t j = deg - count; j < deg; ++j, ++n) {
    const int64_t t = scale_draw(mix32(h ^ static_cast<uint32_t>(j)), j + 1);
    int64_t lo = 0, hi = n;  // first pick >= t
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (dst[mid] < t) lo = mid + 1; else hi = mid;
    }
    if (lo < n && dst[lo] == t) {
      dst[n] = j;
      continue;
    }
    for (int64_t k = n; k > lo; --k) dst[k] = dst[k - 1];
    dst[lo] = t;
  }
}

inline int blocks_for(int64_t n, int64_t per_block) { return static_cast<int>((n + per_block - 1) / per_block); }

__global__ void count_kernel(const int64_t* ip, const int64_t* seeds, int64_t n, int64_t fanout, int64_t* count) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t v = seeds[i];
  const int64_t d = ip[v + 1] - ip[v];
  count[i] = (fanout < 0 || d <= fanout) ? d : fanout;
}

// One warp per seed; every lane of a warp takes the same branches, so the warp-wide sync is safe.
__global__ void sample_kernel(const int64_t* ip, const int64_t* ind, const int64_t* seeds, int64_t n,
                              const int64_t* bp, uint32_t base, int64_t* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kSeedsPerBlock) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= n) return;
  const int64_t v = seeds[i];
  const int64_t start = ip[v];
  const int64_t deg = ip[v + 1] - start;
  const int64_t count = bp[i + 1] - bp[i];
  int64_t* dst = out + bp[i];
  if (count == deg) {
    for (int64_t k = lane; k < deg; k += kWarp) dst[k] = ind[start + k];
    return;
  }
  if (lane == 0) floyd_offsets(node_state(base, v), deg, count, dst);
  __syncwarp();  // also orders lane 0's writes of the offsets before the other lanes read them
  for (int64_t k = lane; k < count; k += kWarp) dst[k] = ind[start + dst[k]];
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_neighbors_cuda(
    const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& seeds_in,
    int64_t fanout, int64_t random_seed) {
  TORCH_CHECK(indptr_in.scalar_type() == at::kLong && indices_in.scalar_type() == at::kLong &&
                  seeds_in.scalar_type() == at::kLong,
              "sample_neighbors: indptr, indices and seeds must be int64");
  TORCH_CHECK(fanout == -1 || fanout > 0, "sample_neighbors: fanout must be positive or -1, got ", fanout);
  const c10::cuda::CUDAGuard guard(seeds_in.device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor seeds = seeds_in.contiguous();
  const int64_t n = seeds.numel();
  const auto opts = indptr.options();

  at::Tensor count = at::empty({n}, opts);
  if (n > 0) {
    count_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        indptr.data_ptr<int64_t>(), seeds.data_ptr<int64_t>(), n, fanout, count.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  at::Tensor block_indptr = at::zeros({n + 1}, opts);
  block_indptr.narrow(0, 1, n).copy_(at::cumsum(count, 0));
  const int64_t num_edges = block_indptr[n].item<int64_t>();

  const uint64_t s64 = static_cast<uint64_t>(random_seed);
  const uint32_t base = mix32(mix32(static_cast<uint32_t>(s64) ^ kGolden) ^ static_cast<uint32_t>(s64 >> 32));
  at::Tensor sampled = at::empty({num_edges}, opts);
  if (num_edges > 0) {
    sample_kernel<<<blocks_for(n, kSeedsPerBlock), kThreads, 0, stream>>>(
        indptr.data_ptr<int64_t>(), indices.data_ptr<int64_t>(), seeds.data_ptr<int64_t>(), n,
        block_indptr.data_ptr<int64_t>(), base, sampled.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }

  // Sources in first-appearance order over (seeds, sampled); seeds are distinct, so they come first.
  const at::Tensor all = at::cat({seeds, sampled});
  auto uniq = at::_unique2(all, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
  const at::Tensor values = std::get<0>(uniq);
  const at::Tensor inverse = std::get<1>(uniq).reshape({-1});
  const int64_t len = all.numel();
  const at::Tensor first = at::full({values.numel()}, len, opts)
                               .scatter_reduce(0, inverse, at::arange(len, opts), "amin", /*include_self=*/true);
  const at::Tensor order = std::get<1>(at::sort(first, /*stable=*/true, 0, false));
  const at::Tensor rank = at::empty({order.numel()}, opts).scatter_(0, order, at::arange(order.numel(), opts));
  const at::Tensor local = rank.index_select(0, inverse);
  return {block_indptr, local.narrow(0, n, num_edges).contiguous(), values.index_select(0, order)};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) { m.impl("sample_neighbors", &sample_neighbors_cuda); }
