// CPU kernel of cherry::refine_groups (contract: cherry/ops/reference_planning.py).
//
// Reaches are built per seed with a stamp array over the input positions (stamp[u] == i: u is in
// R(i) already), so each seed costs the edges of its sampled tree and nothing is sorted; the order
// within a reach does not change any count, hence not the result. Counts live in one dense
// [num_inputs x K] int32 array (K <= a few dozen), so a seed's gains for all K groups are one
// pass over its reach with K-wide rows that stay in cache. Sequential by design: each move changes
// the counts the next seed's gain is computed from, and the passes cost milliseconds.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

namespace {

at::Tensor refine_groups_cpu(at::TensorList indptrs, at::TensorList indices, const at::Tensor& positions,
                             const at::Tensor& groups, const at::Tensor& weights, int64_t num_groups,
                             int64_t num_inputs, double max_group_weight, int64_t num_passes) {
  TORCH_CHECK(indptrs.size() == indices.size() && !indptrs.empty(), "refine_groups: one indptr and indices per layer");
  TORCH_CHECK(num_groups >= 1 && num_inputs >= 1, "refine_groups: num_groups and num_inputs must be >= 1");
  const int64_t n = positions.numel();
  const int64_t k = num_groups;
  const int64_t num_layers = static_cast<int64_t>(indptrs.size());
  const at::Tensor pos_c = positions.contiguous(), grp_c = groups.contiguous(), w_c = weights.contiguous();
  const int64_t* seeds = pos_c.data_ptr<int64_t>();
  const double* w = w_c.data_ptr<double>();

  // Reaches: R(i) = reach[ptr[i], ptr[i+1]).
  std::vector<int64_t> ptr(static_cast<size_t>(n) + 1, 0), reach, stamp(static_cast<size_t>(num_inputs), -1);
  reach.reserve(static_cast<size_t>(n) * 16);
  std::vector<at::Tensor> ips, inds;
  for (int64_t l = 0; l < num_layers; ++l) {
    ips.push_back(indptrs[l].contiguous());
    inds.push_back(indices[l].contiguous());
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = static_cast<int64_t>(reach.size());
    const int64_t s = seeds[i];
    TORCH_CHECK(s >= 0 && s < num_inputs, "refine_groups: position ", s, " out of range");
    stamp[s] = i;
    reach.push_back(s);
    for (int64_t l = num_layers - 1; l >= 0; --l) {
      const int64_t* ip = ips[l].data_ptr<int64_t>();
      const int64_t* ind = inds[l].data_ptr<int64_t>();
      const int64_t num_dst = ips[l].numel() - 1;
      const int64_t end = static_cast<int64_t>(reach.size());
      for (int64_t r = start; r < end; ++r) {
        const int64_t p = reach[r];
        TORCH_CHECK(p < num_dst, "refine_groups: node ", p, " is not a destination of layer ", l);
        for (int64_t e = ip[p]; e < ip[p + 1]; ++e) {
          const int64_t u = ind[e];
          TORCH_CHECK(static_cast<uint64_t>(u) < static_cast<uint64_t>(num_inputs), "refine_groups: index ", u,
                      " out of range");
          if (stamp[u] != i) {
            stamp[u] = i;
            reach.push_back(u);
          }
        }
      }
    }
    ptr[i + 1] = static_cast<int64_t>(reach.size());
  }

  at::Tensor out = grp_c.clone();
  int64_t* g = out.data_ptr<int64_t>();
  std::vector<int32_t> cnt(static_cast<size_t>(num_inputs * k), 0);
  std::vector<int64_t> size(static_cast<size_t>(k), 0), add(static_cast<size_t>(k), 0);
  std::vector<double> total(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    TORCH_CHECK(g[i] >= 0 && g[i] < k, "refine_groups: group ", g[i], " out of range");
    size[g[i]] += 1;
    total[g[i]] += w[i];
    for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) cnt[reach[r] * k + g[i]] += 1;
  }
  for (int64_t pass = 0; pass < num_passes; ++pass) {
    int64_t moved = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = g[i];
      if (size[a] <= 1) continue;
      int64_t lose = 0;
      std::fill(add.begin(), add.end(), 0);
      for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
        const int32_t* row = cnt.data() + reach[r] * k;
        lose += row[a] == 1;
        for (int64_t b = 0; b < k; ++b) add[b] += row[b] == 0;
      }
      int64_t best = -1, best_gain = 0;
      for (int64_t b = 0; b < k; ++b) {
        if (b != a && lose - add[b] > best_gain && total[b] + w[i] <= max_group_weight) {
          best = b;
          best_gain = lose - add[b];
        }
      }
      if (best < 0) continue;
      for (int64_t r = ptr[i]; r < ptr[i + 1]; ++r) {
        cnt[reach[r] * k + a] -= 1;
        cnt[reach[r] * k + best] += 1;
      }
      total[a] -= w[i];
      total[best] += w[i];
      size[a] -= 1;
      size[best] += 1;
      g[i] = best;
      ++moved;
    }
    if (moved == 0) break;
  }
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(cherry, CPU, m) { m.impl("refine_groups", &refine_groups_cpu); }
