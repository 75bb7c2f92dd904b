// CUDA kernels of edge_softmax (schema and contract: csrc/edge_softmax.cpp).
//
// One thread per (destination, head) walks its segment: max, then exp and sum, then normalise. A
// segment is written only by its own threads, so there are no atomics and results are deterministic.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace cherry {
namespace {

constexpr int kThreads = 256;

int64_t heads_of(const at::Tensor& t) {
  TORCH_CHECK(t.dim() >= 1, "edge tensors must be [E] or [E, H]");
  return t.size(0) > 0 ? t.numel() / t.size(0) : (t.dim() >= 2 ? t.size(1) : 1);
}

template <typename scalar_t>
__global__ void softmax_forward_kernel(const int64_t* __restrict__ ptr, const scalar_t* __restrict__ s,
                                       scalar_t* __restrict__ y, int64_t num_dst, int64_t heads) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_dst * heads) return;
  const int64_t d = i / heads, h = i % heads;
  const int64_t first = ptr[d], last = ptr[d + 1];
  if (first >= last) return;
  scalar_t seg_max = s[first * heads + h];
  for (int64_t e = first + 1; e < last; ++e) {
    const scalar_t v = s[e * heads + h];
    if (v > seg_max || v != v) seg_max = v;  // NaN wins, as in the reference's amax
  }
  scalar_t seg_sum = scalar_t(0);
  for (int64_t e = first; e < last; ++e) {
    const scalar_t v = exp(s[e * heads + h] - seg_max);
    y[e * heads + h] = v;
    seg_sum += v;
  }
  for (int64_t e = first; e < last; ++e) y[e * heads + h] /= seg_sum;
}

template <typename scalar_t>
__global__ void softmax_backward_kernel(const int64_t* __restrict__ ptr, const scalar_t* __restrict__ y,
                                        const scalar_t* __restrict__ g, scalar_t* __restrict__ gs, int64_t num_dst,
                                        int64_t heads) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_dst * heads) return;
  const int64_t d = i / heads, h = i % heads;
  const int64_t first = ptr[d], last = ptr[d + 1];
  scalar_t dot = scalar_t(0);
  for (int64_t e = first; e < last; ++e) dot += g[e * heads + h] * y[e * heads + h];
  for (int64_t e = first; e < last; ++e) {
    const int64_t j = e * heads + h;
    gs[j] = y[j] * (g[j] - dot);
  }
}

at::Tensor edge_softmax_forward_cuda(const at::Tensor& indptr, const at::Tensor& scores) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  const c10::cuda::CUDAGuard guard(scores.device());
  const auto ptr = indptr.contiguous();
  const auto s = scores.contiguous();
  const int64_t heads = heads_of(s), num_dst = ptr.numel() - 1, n = num_dst * heads;
  auto y = at::empty_like(s);
  if (n == 0 || s.numel() == 0) return y;
  AT_DISPATCH_FLOATING_TYPES(s.scalar_type(), "edge_softmax_forward_cuda", [&] {
    softmax_forward_kernel<scalar_t><<<(n + kThreads - 1) / kThreads, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr.data_ptr<int64_t>(), s.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), num_dst, heads);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

at::Tensor edge_softmax_backward_cuda(const at::Tensor& indptr, const at::Tensor& out, const at::Tensor& grad_out) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  TORCH_CHECK(out.sizes() == grad_out.sizes() && out.scalar_type() == grad_out.scalar_type(),
              "edge_softmax_backward: out and grad_out must have the same shape and dtype");
  const c10::cuda::CUDAGuard guard(out.device());
  const auto ptr = indptr.contiguous();
  const auto y = out.contiguous();
  const auto g = grad_out.contiguous();
  const int64_t heads = heads_of(y), num_dst = ptr.numel() - 1, n = num_dst * heads;
  auto gs = at::empty_like(y);
  if (n == 0 || y.numel() == 0) return gs;
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "edge_softmax_backward_cuda", [&] {
    softmax_backward_kernel<scalar_t><<<(n + kThreads - 1) / kThreads, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr.data_ptr<int64_t>(), y.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), gs.data_ptr<scalar_t>(), num_dst,
        heads);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return gs;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("edge_softmax_forward", &cherry::edge_softmax_forward_cuda);
  m.impl("edge_softmax_backward", &cherry::edge_softmax_backward_cuda);
}
