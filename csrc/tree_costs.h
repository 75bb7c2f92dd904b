// Argument checks of cherry::tree_costs shared by its CPU and CUDA kernels (cpu/tree_costs.cpp,
// cuda/tree_costs.cu); the schema is in tree_costs.cpp.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

namespace cherry {

// One indptr, indices, per_dst and per_edge per layer, at least one layer.
inline int64_t tree_costs_num_layers(at::TensorList indptrs, at::TensorList indices, at::ArrayRef<double> per_dst,
                                     at::ArrayRef<double> per_edge) {
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  TORCH_CHECK(num_layers >= 1 && static_cast<int64_t>(indices.size()) == num_layers &&
                  static_cast<int64_t>(per_dst.size()) == num_layers &&
                  static_cast<int64_t>(per_edge.size()) == num_layers,
              "tree_costs: one indptr, indices, per_dst and per_edge per layer");
  return num_layers;
}

inline void check_tree_costs_layer(const at::Tensor& indptr, const at::Tensor& indices) {
  TORCH_CHECK(indptr.scalar_type() == at::kLong && indices.scalar_type() == at::kLong && indptr.dim() == 1 &&
                  indices.dim() == 1 && indptr.numel() >= 1,
              "tree_costs: indptrs and indices must be 1-D int64 tensors (indptr non-empty)");
}

}  // namespace cherry
