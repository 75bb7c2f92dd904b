// Argument checks of cherry::cache_gather shared by its CPU and CUDA kernels (cpu/cache_gather.cpp,
// cuda/cache_gather.cu); the schema and contract are in cache_gather.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace cherry {

// Shapes and dtypes: slot_of [N] and nodes [M] int64; cache [S, F] and host [N, F] of one dtype.
inline void check_cache_gather_args(const at::Tensor& slot_of, const at::Tensor& cache, const at::Tensor& host,
                                    const at::Tensor& nodes) {
  TORCH_CHECK(slot_of.dim() == 1 && slot_of.scalar_type() == at::kLong, "slot_of must be a 1-D int64 tensor");
  TORCH_CHECK(nodes.dim() == 1 && nodes.scalar_type() == at::kLong, "nodes must be a 1-D int64 tensor");
  TORCH_CHECK(host.dim() == 2 && cache.dim() == 2, "cache and host must be 2-D [rows, features]");
  TORCH_CHECK(cache.size(1) == host.size(1), "cache and host must have the same number of features");
  TORCH_CHECK(cache.scalar_type() == host.scalar_type(), "cache and host must have the same dtype");
  TORCH_CHECK(slot_of.numel() == host.size(0), "slot_of must have one entry per host row");
}

}  // namespace cherry
