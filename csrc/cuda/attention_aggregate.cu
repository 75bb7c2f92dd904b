// CUDA kernels of attention_aggregate (schema and contract: csrc/attention_aggregate.cpp).
//
// Forward: one thread per (destination, head, feature) walks its segment, so consecutive threads read
// consecutive features of one source row (coalesced) and out is written once, with no [E, H, F]
// messages. Backward: grad_z scatters alpha[e, h] * grad_out[d, h, f] with atomics from one thread per
// (destination, head, feature) (sum order therefore not deterministic, as in csr_aggregate's backward);
// grad_alpha is one thread per (destination, head), which owns its segment's entries: no atomics.
// Indices are validated by the Python wrapper; a device assert guards memory safety here.
#include <ATen/ATen.h>
#include <ATen/cuda/Atomic.cuh>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../attention_aggregate.h"

namespace cherry {
namespace {

constexpr int kThreads = 256;

int64_t num_blocks(int64_t n) { return (n + kThreads - 1) / kThreads; }

template <typename scalar_t>
__global__ void forward_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx,
                               const scalar_t* __restrict__ z, const scalar_t* __restrict__ alpha,
                               scalar_t* __restrict__ out, int64_t num_src, int64_t num_dst, int64_t heads,
                               int64_t feat) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = heads * feat;
  if (i >= num_dst * row) return;
  const int64_t d = i / row, hf = i % row, h = hf / feat;
  scalar_t acc = scalar_t(0);
  for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
    const int64_t s = idx[e];
    CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
    acc += z[s * row + hf] * alpha[e * heads + h];
  }
  out[i] = acc;
}

template <typename scalar_t>
__global__ void grad_z_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx,
                              const scalar_t* __restrict__ g, const scalar_t* __restrict__ alpha,
                              scalar_t* __restrict__ gz, int64_t num_src, int64_t num_dst, int64_t heads,
                              int64_t feat) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = heads * feat;
  if (i >= num_dst * row) return;
  const int64_t d = i / row, hf = i % row, h = hf / feat;
  const scalar_t gd = g[i];
  for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
    const int64_t s = idx[e];
    CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
    gpuAtomicAdd(gz + s * row + hf, gd * alpha[e * heads + h]);
  }
}

template <typename scalar_t>
__global__ void grad_alpha_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx,
                                  const scalar_t* __restrict__ g, const scalar_t* __restrict__ z,
                                  scalar_t* __restrict__ ga, int64_t num_src, int64_t num_dst, int64_t heads,
                                  int64_t feat) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_dst * heads) return;
  const int64_t d = i / heads, h = i % heads, row = heads * feat;
  const scalar_t* gd = g + d * row + h * feat;
  for (int64_t e = ptr[d]; e < ptr[d + 1]; ++e) {
    const int64_t s = idx[e];
    CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
    const scalar_t* zs = z + s * row + h * feat;
    scalar_t dot = scalar_t(0);
    for (int64_t f = 0; f < feat; ++f) dot += gd[f] * zs[f];
    ga[e * heads + h] = dot;
  }
}

at::Tensor attention_aggregate_forward_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& z,
                                            const at::Tensor& alpha) {
  check_attention_args(indptr, indices, z, alpha);
  const c10::cuda::CUDAGuard guard(z.device());
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto zc = z.contiguous();
  const auto ac = alpha.contiguous();
  const int64_t num_dst = ptr.numel() - 1, heads = zc.size(1), feat = zc.size(2), n = num_dst * heads * feat;
  auto out = at::empty({num_dst, heads, feat}, zc.options());
  if (n == 0) return out;
  AT_DISPATCH_FLOATING_TYPES(zc.scalar_type(), "attention_aggregate_forward_cuda", [&] {
    forward_kernel<scalar_t><<<num_blocks(n), kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
        ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), zc.data_ptr<scalar_t>(), ac.data_ptr<scalar_t>(),
        out.data_ptr<scalar_t>(), zc.size(0), num_dst, heads, feat);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> attention_aggregate_backward_cuda(const at::Tensor& indptr,
                                                                     const at::Tensor& indices,
                                                                     const at::Tensor& grad_out, const at::Tensor& z,
                                                                     const at::Tensor& alpha) {
  check_attention_args(indptr, indices, z, alpha);
  check_attention_grad(indptr, grad_out, z);
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto g = grad_out.contiguous();
  const auto zc = z.contiguous();
  const auto ac = alpha.contiguous();
  const int64_t num_dst = ptr.numel() - 1, heads = zc.size(1), feat = zc.size(2);
  auto grad_z = at::zeros({zc.size(0), heads, feat}, g.options());
  auto grad_alpha = at::zeros({idx.numel(), heads}, g.options());
  const int64_t n = num_dst * heads * feat;
  if (n == 0) return std::make_tuple(grad_z, grad_alpha);
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "attention_aggregate_backward_cuda", [&] {
    grad_z_kernel<scalar_t><<<num_blocks(n), kThreads, 0, stream>>>(
        ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), g.data_ptr<scalar_t>(), ac.data_ptr<scalar_t>(),
        grad_z.data_ptr<scalar_t>(), zc.size(0), num_dst, heads, feat);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    grad_alpha_kernel<scalar_t><<<num_blocks(num_dst * heads), kThreads, 0, stream>>>(
        ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), g.data_ptr<scalar_t>(), zc.data_ptr<scalar_t>(),
        grad_alpha.data_ptr<scalar_t>(), zc.size(0), num_dst, heads, feat);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return std::make_tuple(grad_z, grad_alpha);
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("attention_aggregate_forward", &cherry::attention_aggregate_forward_cuda);
  m.impl("attention_aggregate_backward", &cherry::attention_aggregate_backward_cuda);
}
