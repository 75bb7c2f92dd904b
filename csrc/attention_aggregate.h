// Argument checks of cherry::attention_aggregate shared by its CPU and CUDA kernels
// (cpu/attention_aggregate.cpp, cuda/attention_aggregate.cu); the schema and contract are in
// attention_aggregate.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace cherry {

// indptr [D+1] and indices [E] int64; z [S, H, F]; alpha [E, H] of z's dtype.
inline void check_attention_args(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& z,
                                 const at::Tensor& alpha) {
  TORCH_CHECK(indptr.dim() == 1 && indptr.scalar_type() == at::kLong && indptr.numel() >= 1,
              "indptr must be a non-empty 1-D int64 tensor");
  TORCH_CHECK(indices.dim() == 1 && indices.scalar_type() == at::kLong, "indices must be a 1-D int64 tensor");
  TORCH_CHECK(z.dim() == 3, "z must be [num_src, heads, features], got ", z.dim(), " dimensions");
  TORCH_CHECK(alpha.dim() == 2 && alpha.size(0) == indices.numel() && alpha.size(1) == z.size(1),
              "alpha must be [num_edges, heads] = [", indices.numel(), ", ", z.size(1), "], got ", alpha.sizes());
  TORCH_CHECK(alpha.scalar_type() == z.scalar_type(), "alpha and z must have one dtype");
}

// The backward's grad_out: [D, H, F] of z's dtype.
inline void check_attention_grad(const at::Tensor& indptr, const at::Tensor& grad_out, const at::Tensor& z) {
  TORCH_CHECK(grad_out.dim() == 3 && grad_out.size(0) == indptr.numel() - 1 && grad_out.size(1) == z.size(1) &&
                  grad_out.size(2) == z.size(2) && grad_out.scalar_type() == z.scalar_type(),
              "grad_out must be [num_dst, heads, features] = [", indptr.numel() - 1, ", ", z.size(1), ", ", z.size(2),
              "] of z's dtype, got ", grad_out.sizes());
}

}  // namespace cherry
