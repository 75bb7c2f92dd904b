// CPU kernel of cherry::slice_layer, the per-layer step of slice_blocks (contract:
// cherry/ops/reference_sampling.py::slice_layer). Edges are copied in parallel over destinations;
// local renumbering is one sequential pass over a dense array of the parent's sources, which is
// small (a block's sources) and gives the first-appearance order directly.
// Per-op ATen headers instead of <ATen/ATen.h>: only at::empty is needed, and it parses faster.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> slice_layer_cpu(
    const at::Tensor& indptr_in, const at::Tensor& indices_in, const at::Tensor& dst_in,
    int64_t num_parent_src) {
  TORCH_CHECK(indptr_in.scalar_type() == at::kLong && indices_in.scalar_type() == at::kLong &&
                  dst_in.scalar_type() == at::kLong,
              "slice_layer: indptr, indices and dst_positions must be int64");
  TORCH_CHECK(indptr_in.dim() == 1 && indices_in.dim() == 1 && dst_in.dim() == 1,
              "slice_layer: indptr, indices and dst_positions must be one-dimensional");
  const at::Tensor indptr = indptr_in.contiguous();
  const at::Tensor indices = indices_in.contiguous();
  const at::Tensor dst_positions = dst_in.contiguous();
  const int64_t num_parent_dst = indptr.numel() - 1;
  TORCH_CHECK(num_parent_src >= num_parent_dst, "slice_layer: num_parent_src (", num_parent_src,
              ") must be >= the parent's destinations (", num_parent_dst, ")");
  const int64_t num_dst = dst_positions.numel();
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* ind = indices.data_ptr<int64_t>();
  const int64_t* dp = dst_positions.data_ptr<int64_t>();
  const auto opts = indptr.options();

  at::Tensor sub_indptr = at::empty({num_dst + 1}, opts);
  int64_t* sp = sub_indptr.data_ptr<int64_t>();
  sp[0] = 0;
  for (int64_t i = 0; i < num_dst; ++i) {
    const int64_t d = dp[i];
    TORCH_CHECK(d >= 0 && d < num_parent_dst, "slice_layer: dst position ", d, " out of range [0, ",
                num_parent_dst, ")");
    sp[i + 1] = sp[i] + (ip[d + 1] - ip[d]);
  }
  const int64_t num_edges = sp[num_dst];

  at::Tensor parent_edges = at::empty({num_edges}, opts);
  int64_t* pe = parent_edges.data_ptr<int64_t>();
  at::parallel_for(0, num_dst, 256, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t d = dp[i];
      std::copy(ind + ip[d], ind + ip[d + 1], pe + sp[i]);
    }
  });

  std::vector<int64_t> local(num_parent_src, -1);
  std::vector<int64_t> src;
  src.reserve(num_dst + std::min(num_edges, num_parent_src));
  for (int64_t i = 0; i < num_dst; ++i) {
    TORCH_CHECK(local[dp[i]] < 0, "slice_layer: dst_positions must be distinct, ", dp[i], " repeats");
    local[dp[i]] = i;
    src.push_back(dp[i]);
  }
  at::Tensor sub_indices = at::empty({num_edges}, opts);
  int64_t* si = sub_indices.data_ptr<int64_t>();
  for (int64_t e = 0; e < num_edges; ++e) {
    const int64_t p = pe[e];
    TORCH_CHECK(p >= 0 && p < num_parent_src, "slice_layer: parent index ", p, " out of range [0, ",
                num_parent_src, ")");
    if (local[p] < 0) {
      local[p] = static_cast<int64_t>(src.size());
      src.push_back(p);
    }
    si[e] = local[p];
  }
  at::Tensor src_positions = at::empty({static_cast<int64_t>(src.size())}, opts);
  std::copy(src.begin(), src.end(), src_positions.data_ptr<int64_t>());
  return {sub_indptr, sub_indices, src_positions};
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("slice_layer", &slice_layer_cpu); }
