// CUDA kernel of node_dropout (schema and contract: csrc/node_dropout.cpp).
//
// One thread per element (grid-stride): hash, compare, multiply. No mask is stored and no atomics are
// used, so the output is deterministic and bit-identical to the CPU kernel's.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "../node_dropout.h"

#include <algorithm>

namespace cherry {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

template <typename scalar_t>
__global__ void node_dropout_kernel(const scalar_t* __restrict__ x, const int64_t* __restrict__ states,
                                    scalar_t* __restrict__ out, int64_t numel, int64_t width, int64_t threshold,
                                    scalar_t scale) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < numel; i += stride) {
    const int64_t r = i / width, j = i - r * width;
    const scalar_t keep = dropout_keeps(states[r], j, threshold) ? scalar_t(1) : scalar_t(0);
    out[i] = (x[i] * keep) * scale;
  }
}

at::Tensor node_dropout_cuda(const at::Tensor& x, const at::Tensor& states, int64_t threshold, double scale) {
  check_node_dropout_args(x, states, threshold);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous();
  const auto sc = states.contiguous();
  auto out = at::empty_like(xc);
  const int64_t numel = xc.numel();
  if (numel == 0) return out;
  const int64_t blocks = std::min<int64_t>((numel + kThreads - 1) / kThreads, kMaxBlocks);
  AT_DISPATCH_FLOATING_TYPES(xc.scalar_type(), "node_dropout_cuda", [&] {
    node_dropout_kernel<scalar_t><<<blocks, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), sc.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), numel, xc.size(1), threshold,
        static_cast<scalar_t>(scale));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("node_dropout", &cherry::node_dropout_cuda);
}
