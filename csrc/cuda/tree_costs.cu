// CUDA kernel of cherry::tree_costs (contract: cherry/ops/reference_planning.py).
//
// One launch per layer, one thread per destination, each summing its sources' costs one layer down
// in edge order (as the CPU kernel does). Nothing is read back, so the planner's seed costs force no
// host sync. Indices are validated by the Python wrapper; a device assert guards memory safety.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../tree_costs.h"

namespace {

constexpr int kThreads = 256;

__global__ void layer_costs_kernel(const int64_t* __restrict__ ip, const int64_t* __restrict__ ind,
                                   const double* __restrict__ below, int64_t num_below, double* __restrict__ out,
                                   int64_t num_dst, double per_dst, double per_edge) {
  const int64_t d = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (d >= num_dst) return;
  const int64_t first = ip[d], last = ip[d + 1];
  // __dmul_rn / __dadd_rn: no fused multiply-add, the same roundings as the CPU kernel
  double cost = __dadd_rn(per_dst, __dmul_rn(per_edge, static_cast<double>(last - first)));
  if (below != nullptr) {
    double children = 0.0;
    for (int64_t e = first; e < last; ++e) {
      const int64_t u = ind[e];
      CUDA_KERNEL_ASSERT(u >= 0 && u < num_below);
      children = __dadd_rn(children, below[u]);
    }
    cost = __dadd_rn(cost, children);
  }
  out[d] = cost;
}

at::Tensor tree_costs_cuda(at::TensorList indptrs, at::TensorList indices, at::ArrayRef<double> per_dst,
                           at::ArrayRef<double> per_edge) {
  const int64_t num_layers = cherry::tree_costs_num_layers(indptrs, indices, per_dst, per_edge);
  const c10::cuda::CUDAGuard guard(indptrs[0].device());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor below;
  for (int64_t l = 0; l < num_layers; ++l) {
    const at::Tensor ip = indptrs[l].contiguous(), ind = indices[l].contiguous();
    cherry::check_tree_costs_layer(ip, ind);
    const int64_t num_dst = ip.numel() - 1;
    at::Tensor out = at::empty({num_dst}, ip.options().dtype(at::kDouble));
    if (num_dst > 0) {
      layer_costs_kernel<<<(num_dst + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
          ip.data_ptr<int64_t>(), ind.data_ptr<int64_t>(), l > 0 ? below.data_ptr<double>() : nullptr,
          l > 0 ? below.numel() : 0, out.data_ptr<double>(), num_dst, per_dst[l], per_edge[l]);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    below = out;
  }
  return below;
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CUDA, m) { m.impl("tree_costs", &tree_costs_cuda); }
