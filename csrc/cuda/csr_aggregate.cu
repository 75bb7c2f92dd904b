// CUDA kernels of csr_aggregate (schema and contract: csrc/csr_aggregate.cpp).
//
// One thread per (destination, feature): consecutive threads read consecutive features of the same
// source row, so loads are coalesced, and the forward writes [D, F] directly (no [E, F] messages).
// The backward scatters with atomics into grad_x (sum order is therefore not deterministic).
// Indices are validated by the Python wrapper; a device assert guards memory safety here.
#include <ATen/ATen.h>
#include <ATen/cuda/Atomic.cuh>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace cherry {
namespace {

constexpr int kThreads = 256;
enum Reduce : int { kSum = 0, kMean = 1, kMax = 2 };

int parse_reduce(c10::string_view name) {
  if (name == "sum") return kSum;
  if (name == "mean") return kMean;
  if (name == "max") return kMax;
  TORCH_CHECK(false, "csr_aggregate: reduce must be 'sum', 'mean' or 'max', got '", std::string(name), "'");
}

int64_t num_blocks(int64_t n) { return (n + kThreads - 1) / kThreads; }

template <typename scalar_t>
__global__ void aggregate_forward_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx,
                                         const scalar_t* __restrict__ x, scalar_t* __restrict__ out,
                                         int64_t* __restrict__ arg, int64_t num_src, int64_t num_dst, int64_t feat,
                                         int reduce) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_dst * feat) return;
  const int64_t d = i / feat, f = i % feat;
  const int64_t first = ptr[d], last = ptr[d + 1];
  if (reduce == kMax) {
    scalar_t best = scalar_t(0);
    int64_t best_e = -1;
    for (int64_t e = first; e < last; ++e) {
      const int64_t s = idx[e];
      CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
      const scalar_t v = x[s * feat + f];
      if (best_e < 0 || v > best) {  // strict '>' keeps the first maximum in segment order
        best = v;
        best_e = e;
      }
    }
    out[i] = best;
    arg[i] = best_e;
  } else {
    scalar_t acc = scalar_t(0);
    for (int64_t e = first; e < last; ++e) {
      const int64_t s = idx[e];
      CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
      acc += x[s * feat + f];
    }
    if (reduce == kMean && last > first) acc /= static_cast<scalar_t>(last - first);
    out[i] = acc;
  }
}

template <typename scalar_t>
__global__ void aggregate_backward_kernel(const int64_t* __restrict__ ptr, const int64_t* __restrict__ idx,
                                          const scalar_t* __restrict__ g, const int64_t* __restrict__ arg,
                                          scalar_t* __restrict__ gx, int64_t num_src, int64_t num_dst, int64_t feat,
                                          int reduce) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_dst * feat) return;
  const int64_t d = i / feat, f = i % feat;
  if (reduce == kMax) {
    const int64_t e = arg[i];
    if (e >= 0) {
      const int64_t s = idx[e];
      CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
      gpuAtomicAdd(gx + s * feat + f, g[i]);
    }
    return;
  }
  const int64_t first = ptr[d], last = ptr[d + 1];
  if (first >= last) return;
  scalar_t gd = g[i];
  if (reduce == kMean) gd /= static_cast<scalar_t>(last - first);
  for (int64_t e = first; e < last; ++e) {
    const int64_t s = idx[e];
    CUDA_KERNEL_ASSERT(s >= 0 && s < num_src);
    gpuAtomicAdd(gx + s * feat + f, gd);
  }
}

std::tuple<at::Tensor, at::Tensor> csr_aggregate_forward_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                                              const at::Tensor& x_src, c10::string_view reduce_name) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kLong, "indices must be a 1-D int64 tensor");
  TORCH_CHECK(x_src.dim() == 2, "x_src must be 2-D [num_src, features]");
  const int reduce = parse_reduce(reduce_name);
  const c10::cuda::CUDAGuard guard(x_src.device());
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto x = x_src.contiguous();
  const int64_t num_dst = ptr.numel() - 1, feat = x.size(1), n = num_dst * feat;
  auto out = at::empty({num_dst, feat}, x.options());
  auto arg = reduce == kMax ? at::empty({num_dst, feat}, ptr.options()) : at::empty({0}, ptr.options());
  if (n == 0) return std::make_tuple(out, arg);
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "csr_aggregate_forward_cuda", [&] {
    aggregate_forward_kernel<scalar_t><<<num_blocks(n), kThreads, 0, stream>>>(
        ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), x.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
        reduce == kMax ? arg.data_ptr<int64_t>() : nullptr, x.size(0), num_dst, feat, reduce);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return std::make_tuple(out, arg);
}

at::Tensor csr_aggregate_backward_cuda(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& grad_out,
                                       const at::Tensor& argmax, int64_t num_src, c10::string_view reduce_name) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kLong, "indices must be a 1-D int64 tensor");
  TORCH_CHECK(grad_out.dim() == 2 && grad_out.size(0) == indptr.numel() - 1, "grad_out must be [num_dst, features]");
  TORCH_CHECK(num_src >= 0, "num_src must be >= 0");
  const int reduce = parse_reduce(reduce_name);
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const auto ptr = indptr.contiguous();
  const auto idx = indices.contiguous();
  const auto g = grad_out.contiguous();
  const auto arg = argmax.contiguous();
  if (reduce == kMax) {
    TORCH_CHECK(arg.scalar_type() == at::kLong && arg.sizes() == g.sizes(), "argmax must be int64 shaped like grad_out");
  }
  const int64_t num_dst = ptr.numel() - 1, feat = g.size(1), n = num_dst * feat;
  auto grad_x = at::zeros({num_src, feat}, g.options());
  if (n == 0) return grad_x;
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "csr_aggregate_backward_cuda", [&] {
    aggregate_backward_kernel<scalar_t><<<num_blocks(n), kThreads, 0, stream>>>(
        ptr.data_ptr<int64_t>(), idx.data_ptr<int64_t>(), g.data_ptr<scalar_t>(),
        reduce == kMax ? arg.data_ptr<int64_t>() : nullptr, grad_x.data_ptr<scalar_t>(), num_src, num_dst, feat,
        reduce);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return grad_x;
}

}  // namespace
}  // namespace cherry

TORCH_LIBRARY_IMPL(cherry, CUDA, m) {
  m.impl("csr_aggregate_forward", &cherry::csr_aggregate_forward_cuda);
  m.impl("csr_aggregate_backward", &cherry::csr_aggregate_backward_cuda);
}
