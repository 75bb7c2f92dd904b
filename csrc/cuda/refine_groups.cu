// CUDA kernel of cherry::refine_groups (contract: cherry/ops/reference_planning.py).
//
// The reaches are built as in the reference, with ATen ops on (seed, position) keys made unique per
// layer (sorted by seed, then position; the order within a reach changes no count). The greedy
// passes are sequential over seeds by definition (each move changes the next seed's gains), so they
// run in one thread block that walks the seeds in order: its threads split a seed's reach, count
// the K gains with shared-memory atomics (integer sums: order-free, exact), thread 0 takes the
// decision with the same float64 weight arithmetic as the CPU, then the threads apply the move. The
// result is the CPU kernel's, bit for bit. Its shared memory grows with K (20 B per group): checked
// against the device's opt-in limit, with the opt-in above 48 KiB (prepare_greedy_launch). The planner
// runs these greedy ops on the host for a batch on the GPU (cherry/planning/split.py): they are faster
// there; this kernel serves direct calls.
#include <ATen/core/Tensor.h>
#include <ATen/ops/_unique2.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cstdint>
#include <tuple>
#include <vector>

namespace {

constexpr int kThreads = 256;

__global__ void count_kernel(const int64_t* owner, const int64_t* node, int64_t m, const int64_t* g, int64_t k,
                             int32_t* cnt) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < m) atomicAdd(cnt + node[r] * k + g[owner[r]], 1);
}

// One block. Shared memory: add[k] ints, size[k] long longs, total[k] doubles.
__global__ void greedy_kernel(const int64_t* ptr, const int64_t* reach, int64_t n, const double* w, int64_t k,
                              double cap, int64_t num_passes, int64_t* g, int32_t* cnt) {
  extern __shared__ unsigned char smem[];
  double* total = reinterpret_cast<double*>(smem);
  long long* size = reinterpret_cast<long long*>(total + k);
  int* add = reinterpret_cast<int*>(size + k);
  __shared__ int lose, moved;
  __shared__ long long best;
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int64_t b = 0; b < k; ++b) total[b] = 0.0, size[b] = 0;
    for (int64_t i = 0; i < n; ++i) total[g[i]] += w[i], size[g[i]] += 1;  // the CPU's summation order
  }
  __syncthreads();
  for (int64_t pass = 0; pass < num_passes; ++pass) {
    if (tid == 0) moved = 0;
    __syncthreads();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = g[i];
      if (size[a] <= 1) continue;  // uniform across the block: shared, and written before a barrier
      for (int64_t b = tid; b < k; b += blockDim.x) add[b] = 0;
      if (tid == 0) lose = 0;
      __syncthreads();
      for (int64_t r = ptr[i] + tid; r < ptr[i + 1]; r += blockDim.x) {
        const int32_t* row = cnt + reach[r] * k;
        if (row[a] == 1) atomicAdd(&lose, 1);
        for (int64_t b = 0; b < k; ++b)
          if (row[b] == 0) atomicAdd(add + b, 1);
      }
      __syncthreads();
      if (tid == 0) {
        long long pick = -1, best_gain = 0;
        for (int64_t b = 0; b < k; ++b) {
          const long long gain = static_cast<long long>(lose) - add[b];
          if (b != a && gain > best_gain && total[b] + w[i] <= cap) pick = b, best_gain = gain;
        }
        best = pick;
        if (pick >= 0) {
          total[a] -= w[i];
          total[pick] += w[i];
          size[a] -= 1;
          size[pick] += 1;
          g[i] = pick;
          moved += 1;
        }
      }
      __syncthreads();
      if (best >= 0) {
        for (int64_t r = ptr[i] + tid; r < ptr[i + 1]; r += blockDim.x) {
          cnt[reach[r] * k + a] -= 1;
          cnt[reach[r] * k + best] += 1;
        }
      }
      __syncthreads();
    }
    if (moved == 0) break;  // read by all after the last barrier
    __syncthreads();
  }
}

// Reaches as in the reference: (owner, node) keys made unique per layer; returns (ptr [n+1], node).
std::pair<at::Tensor, at::Tensor> build_reaches(at::TensorList indptrs, at::TensorList indices,
                                                const at::Tensor& positions, int64_t num_inputs,
                                                at::Tensor* owner_out) {
  const int64_t n = positions.numel();
  const auto opts = positions.options();
  at::Tensor owner = at::arange(n, opts);
  at::Tensor node = positions.contiguous();
  for (int64_t l = static_cast<int64_t>(indptrs.size()) - 1; l >= 0; --l) {
    const at::Tensor ip = indptrs[l].contiguous(), ind = indices[l].contiguous();
    const at::Tensor start = ip.index_select(0, node);
    const at::Tensor deg = ip.index_select(0, node.add(1)).sub(start);
    const at::Tensor seg = at::repeat_interleave(at::arange(node.numel(), opts), deg);
    const at::Tensor first = at::cumsum(deg, 0).sub(deg).index_select(0, seg);
    const at::Tensor offs = at::arange(seg.numel(), opts).sub(first);
    const at::Tensor fresh = ind.index_select(0, start.index_select(0, seg).add(offs));
    const at::Tensor keys = at::cat({owner.mul(num_inputs).add(node), owner.index_select(0, seg).mul(num_inputs).add(fresh)});
    const at::Tensor uniq = std::get<0>(at::_unique2(keys, /*sorted=*/true, false, false));
    owner = uniq.div(num_inputs, "floor");
    node = uniq.remainder(num_inputs);
  }
  at::Tensor ptr = at::zeros({n + 1}, opts);
  ptr.slice(0, 1).copy_(at::cumsum(at::bincount(owner, {}, n), 0));
  *owner_out = owner;
  return {ptr, node};
}

// Dynamic shared memory of greedy_kernel for K groups: total[K] doubles, size[K] long longs, add[K] ints.
size_t greedy_shared_bytes(int64_t k) {
  return static_cast<size_t>(k) * (sizeof(double) + sizeof(long long) + sizeof(int));
}

// Check that greedy_kernel's shared memory for K groups fits this device and opt in above the default
// 48 KiB (K >= 2,457 needs it, with the kernel's static shared variables): without the opt-in such a launch fails with a bare "invalid argument".
void prepare_greedy_launch(int64_t k) {
  const size_t shared = greedy_shared_bytes(k);
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  int optin_bytes = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attributes;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, greedy_kernel));
  const size_t available = static_cast<size_t>(optin_bytes) - attributes.sharedSizeBytes;
  TORCH_CHECK_VALUE(shared <= available, "refine_groups: num_groups = ", k, " needs ", shared,
                    " bytes of shared memory per block; this device allows ", available, " (num_groups <= ",
                    available / greedy_shared_bytes(1), "); refine on the CPU or with fewer groups");
  if (shared + attributes.sharedSizeBytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(greedy_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared)));
  }
}

// Refine `out` (one start, in place) on the built reaches; returns the count array.
at::Tensor run_greedy(const at::Tensor& ptr, const at::Tensor& node, const at::Tensor& owner, const at::Tensor& w,
                      int64_t n, int64_t k, int64_t num_inputs, double cap, int64_t num_passes, at::Tensor& out) {
  const auto stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor cnt = at::zeros({num_inputs * k}, node.options().dtype(at::kInt));
  const int64_t m = node.numel();
  if (m > 0) {
    count_kernel<<<static_cast<int>((m + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        owner.data_ptr<int64_t>(), node.data_ptr<int64_t>(), m, out.data_ptr<int64_t>(), k, cnt.data_ptr<int32_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const size_t shared = greedy_shared_bytes(k);
  greedy_kernel<<<1, kThreads, shared, stream>>>(ptr.data_ptr<int64_t>(), node.data_ptr<int64_t>(), n,
                                                 w.data_ptr<double>(), k, cap, num_passes, out.data_ptr<int64_t>(),
                                                 cnt.data_ptr<int32_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return cnt;
}

at::Tensor refine_groups_cuda(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                              const at::Tensor& groups, const at::Tensor& weights, int64_t num_groups,
                              int64_t num_inputs, double max_group_weight, int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups: num_groups and num_inputs must be >= 1");
  const c10::cuda::CUDAGuard guard(positions.device());
  prepare_greedy_launch(num_groups);
  at::Tensor owner;
  const auto [ptr, node] = build_reaches(indptrs, indices, positions, num_inputs, &owner);
  at::Tensor out = groups.contiguous().clone();
  run_greedy(ptr, node, owner, weights.contiguous(), positions.numel(), num_groups, num_inputs, max_group_weight,
             num_passes, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> refine_groups_many_cuda(at::TensorList indptrs, at::TensorList indices,
                                                           const at::Tensor& positions, const at::Tensor& groups,
                                                           const at::Tensor& weights, int64_t num_groups,
                                                           int64_t num_inputs, at::ArrayRef<double> max_group_weights,
                                                           int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups_many: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups_many: num_groups and num_inputs must be >= 1");
  TORCH_CHECK(groups.dim() == 2 && groups.size(0) == static_cast<int64_t>(max_group_weights.size()),
              "refine_groups_many: groups must be [C, n] with one cap per row");
  const c10::cuda::CUDAGuard guard(positions.device());
  prepare_greedy_launch(num_groups);
  at::Tensor owner;
  const auto [ptr, node] = build_reaches(indptrs, indices, positions, num_inputs, &owner);
  at::Tensor out = groups.contiguous().clone();
  const at::Tensor w = weights.contiguous();
  std::vector<at::Tensor> inputs;
  for (int64_t c = 0; c < groups.size(0); ++c) {
    at::Tensor row = out.select(0, c);  // a contiguous view: refined in place
    const at::Tensor cnt = run_greedy(ptr, node, owner, w, positions.numel(), num_groups, num_inputs,
                                      max_group_weights[c], num_passes, row);
    inputs.push_back(cnt.gt(0).sum().to(at::kLong));
  }
  return {out, at::stack(inputs)};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("refine_groups", &refine_groups_cuda);
  m.impl("refine_groups_many", &refine_groups_many_cuda);
}
