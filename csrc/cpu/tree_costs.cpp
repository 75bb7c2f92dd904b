// CPU kernel of cherry::tree_costs (contract: cherry/ops/reference_planning.py).
//
// One pass per layer, input layer first: a destination's cost is per_dst + per_edge * in-degree plus
// (above the input layer) the sum of its sources' costs one layer down, in edge order. The planner
// called this as a dozen tensor ops and an aggregation per plan (0.85 ms with cold caches at
// synth-arxiv batch 8192, most of it per-op overhead and passes over the same degrees); here each
// layer's indptr and indices are read once. The memory model's counts are integers, so every sum is
// exact and any order gives the reference's value.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "../tree_costs.h"

#include <cstdint>
#include <vector>

namespace {

at::Tensor tree_costs_cpu(at::TensorList indptrs, at::TensorList indices, at::ArrayRef<double> per_dst,
                          at::ArrayRef<double> per_edge) {
  const int64_t num_layers = cherry::tree_costs_num_layers(indptrs, indices, per_dst, per_edge);
  std::vector<double> below, own;
  for (int64_t l = 0; l < num_layers; ++l) {
    const at::Tensor ip_t = indptrs[l].contiguous(), ind_t = indices[l].contiguous();
    cherry::check_tree_costs_layer(ip_t, ind_t);
    const int64_t* ip = ip_t.data_ptr<int64_t>();
    const int64_t* ind = ind_t.data_ptr<int64_t>();
    const int64_t num_dst = ip_t.numel() - 1;
    const int64_t num_below = static_cast<int64_t>(below.size());
    TORCH_CHECK(ip[0] == 0 && ip[num_dst] == ind_t.numel(), "tree_costs: indptrs[", l,
                "] must run from 0 to len(indices[", l, "])");
    own.resize(static_cast<size_t>(num_dst));
    const double pd = per_dst[l], pe = per_edge[l];
    for (int64_t d = 0; d < num_dst; ++d) {
      const int64_t first = ip[d], last = ip[d + 1];
      TORCH_CHECK(first <= last, "tree_costs: indptrs[", l, "] must be non-decreasing");
      double cost = pd + pe * static_cast<double>(last - first);
      if (l > 0) {
        double children = 0.0;
        for (int64_t e = first; e < last; ++e) {
          const int64_t u = ind[e];
          TORCH_CHECK(static_cast<uint64_t>(u) < static_cast<uint64_t>(num_below), "tree_costs: indices[", l,
                      "] holds ", u, ", outside the ", num_below, " destinations of layer ", l - 1);
          children += below[u];
        }
        cost += children;
      }
      own[d] = cost;
    }
    below.swap(own);
  }
  at::Tensor out = at::empty({static_cast<int64_t>(below.size())}, indptrs[0].options().dtype(at::kDouble));
  std::copy(below.begin(), below.end(), out.data_ptr<double>());
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("tree_costs", &tree_costs_cpu); }
